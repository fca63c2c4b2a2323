"""Computed verdicts: an experiment's claims as rules over stored rows, decided from the intervals.

An experiment states each claim it can test as a rule in its YAML (``claims:``), beside the prose
``claim:`` it asks as its question::

    claims:
      - id: split_mma_near_gather
        text: split_mma takes at most 1.15x the gather roofline of the same rows (M = 32, grouped)
        rule:
          numerator:   {component: sparse_mla, variant: split_mma,
                        point: {M: 32, context: 262144, selection: grouped}}
          op: "<="
          factor: 1.15
          denominator: {component: sparse_gather, variant: gather_xor,
                        point: {M: 32, context: 262144, selection: grouped}}

A *selector* (``numerator``, ``denominator``) names one row: its ``component``, its ``variant``
(or ``fastest``: the lowest p50 among our own ok rows there, a peer's never), the ``point`` axes
that pin it (an axis left out must take one value among the matching rows) and optionally the
``sweep`` it comes from (a write-up that draws on several). A side may also be a list of
selectors: the sum of their times (the indexer's scan + top-k + expand as one term), its interval
the sum of their p20s to the sum of their p80s; only with the ``us`` metric (rates do not add).
``metric`` is ``us`` (µs per launch,
the default), ``gbps`` or ``roofline_fraction``; each row gives its p20-p80 interval of that
metric (the time's p20 and p80; a rate inverts them). The rule holds ``numerator op factor x
denominator``, or ``numerator op value`` with a constant ``value`` instead of a denominator.

The decision never sets one median against another: with the numerator's interval ``[a_lo, a_hi]``
and the denominator's ``[b_lo, b_hi]`` the ratio lies in ``[a_lo / b_hi, a_hi / b_lo]``; a claim
is *accepted* when that whole range satisfies ``op factor``, *rejected* when none of it does, and
*inconclusive* when the range straddles the factor. A claim resting on a missing, skipped, failed
row, or on a selector that matches several rows, is inconclusive and says which. A noisy row (its
p20-p80 spread over the timing's bound) is not trusted for its interval, only for its fastest
sample: its time is taken as anywhere from its ``ms_min`` up (a rate: anywhere up to the rate at
``ms_min``), so it decides a claim only where no sample of it could have (a peer whose fastest
launch is slower than our p80 is slower than ours whatever its noise); otherwise the claim stays
inconclusive and names the noisy row.

`check_claims` validates the rules against the registry (one line naming the key and what is
allowed) when an experiment is composed; `evaluate` decides them over a rows frame.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from harness.axes import ConfigError
from harness.fuel import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "experiments"

OPS = ("<=", "<", ">=", ">")
METRICS = ("us", "gbps", "roofline_fraction")
FASTEST = "fastest"
RULE_KEYS = ("numerator", "op", "factor", "denominator", "value", "metric")
SELECTOR_KEYS = ("component", "variant", "point", "sweep")
CLAIM_KEYS = ("id", "text", "rule")
VERDICTS = ("accepted", "rejected", "inconclusive")


def _default_max_noise() -> float:
    from harness.config import TimingConf

    return float(TimingConf.max_noise)


MAX_NOISE = _default_max_noise()   # the spread above which a row is noisy (timing.max_noise's default)


# -- validation (at experiment load time) ----------------------------------------------------------
def _keys(where: str, obj: Any, allowed: Sequence[str], required: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where}: expected a mapping with {', '.join(required)}")
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise ConfigError(f"{where}.{extra[0]}: unknown key; allowed: {', '.join(allowed)}")
    for k in required:
        if k not in obj or obj[k] is None:
            raise ConfigError(f"{where}.{k}: missing; allowed keys: {', '.join(allowed)}")
    return obj


def _check_selector(where: str, sel: Any, geometry) -> None:
    from harness import registry

    sel = _keys(where, sel, SELECTOR_KEYS, ("component", "variant"))
    comps = registry.components()
    name = str(sel["component"])
    if name not in comps:
        raise ConfigError(f"{where}.component: unknown value {name!r}; allowed: {', '.join(sorted(comps))}")
    comp = comps[name]
    variants = comp.variant_names(None)
    if str(sel["variant"]) not in (FASTEST, *variants):
        raise ConfigError(f"{where}.variant: unknown value {sel['variant']!r} for component {name}; "
                          f"allowed: {FASTEST}, {', '.join(variants)}")
    point = sel.get("point") or {}
    if not isinstance(point, Mapping):
        raise ConfigError(f"{where}.point: expected a mapping of axis values; allowed axes: {', '.join(comp.axis_names)}")
    axes = {a.name: a for a in comp.axes}
    for axis, value in point.items():
        if axis not in axes:
            raise ConfigError(f"{where}.point.{axis}: unknown axis for component {name}; "
                              f"allowed: {', '.join(comp.axis_names)}")
        try:
            axes[axis].check(value, geometry)
        except ConfigError as exc:
            raise ConfigError(f"{where}.point.{exc}") from None
    if "sweep" in sel and not str(sel["sweep"]).strip():
        raise ConfigError(f"{where}.sweep: empty; allowed: a sweep name")


def _check_side(where: str, side: Any, metric: str, geometry) -> None:
    """One selector, or a non-empty list of them summed (times only)."""
    if isinstance(side, Sequence) and not isinstance(side, (str, bytes, Mapping)):
        if not side:
            raise ConfigError(f"{where}: an empty list; allowed: a selector or a list of selectors")
        if metric != "us":
            raise ConfigError(f"{where}: a sum of rows needs metric us, not {metric!r}; allowed: us")
        for i, sel in enumerate(side):
            _check_selector(f"{where}[{i}]", sel, geometry)
        return
    _check_selector(where, side, geometry)


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {value!r} is not a positive number; allowed: a positive number")
    return float(value)


def check_claims(claims: Any, geometry) -> list[dict[str, Any]]:
    """The claims as plain dicts, each rule checked; ConfigError (one line) on the first problem."""
    claims = _plain(claims)
    if claims is None:
        return []
    if not isinstance(claims, Sequence) or isinstance(claims, (str, bytes)):
        raise ConfigError("claims: expected a list of {id, text, rule}")
    seen: set[str] = set()
    out = []
    for i, claim in enumerate(claims):
        where = f"claims[{i}]"
        claim = _keys(where, claim, CLAIM_KEYS, ("id", "text", "rule"))
        cid = str(claim["id"])
        if not cid.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{where}.id: {cid!r} is not a slug; allowed: letters, digits, '-', '_'")
        if cid in seen:
            raise ConfigError(f"{where}.id: {cid!r} names two claims; allowed: each id once")
        seen.add(cid)
        where = f"claims.{cid}.rule"
        rule = _keys(where, claim["rule"], RULE_KEYS, ("numerator", "op"))
        if rule["op"] not in OPS:
            raise ConfigError(f"{where}.op: unknown value {rule['op']!r}; allowed: {', '.join(OPS)}")
        metric = rule.get("metric", "us")
        if metric not in METRICS:
            raise ConfigError(f"{where}.metric: unknown value {metric!r}; allowed: {', '.join(METRICS)}")
        has_den, has_value = rule.get("denominator") is not None, rule.get("value") is not None
        if has_den == has_value:
            raise ConfigError(f"{where}: give a denominator (with an optional factor) or a value, not "
                              f"{'both' if has_den else 'neither'}")
        if has_value and "factor" in rule:
            raise ConfigError(f"{where}.factor: only with a denominator; allowed: value alone")
        _check_side(f"{where}.numerator", rule["numerator"], metric, geometry)
        if has_den:
            _check_side(f"{where}.denominator", rule["denominator"], metric, geometry)
            _number(f"{where}.factor", rule.get("factor", 1.0))
        else:
            _number(f"{where}.value", rule["value"])
        out.append(_plain(claim))
    return out


def _plain(obj: Any) -> Any:
    """OmegaConf / ruamel containers as plain dicts and lists (for meta.json and templates)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def experiment_claims(name: str, geometry) -> list[dict[str, Any]]:
    """The checked ``claims`` of ``experiments/experiment/<name>.yaml`` (the file as it is now)."""
    import yaml

    path = EXPERIMENTS / "experiment" / f"{name}.yaml"
    if not path.is_file():
        allowed = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"experiment: unknown value {name!r}; allowed: {', '.join(allowed)}")
    data = yaml.safe_load(path.read_text()) or {}
    return check_claims(data.get("claims"), geometry)


# -- evaluation -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Pick:
    """The row a selector found, with its metric's p20-p80 interval and p50; or why none."""

    label: str
    row: pd.Series | None = None
    lo: float = math.nan
    mid: float = math.nan
    hi: float = math.nan
    problem: str = ""
    parts: list["Pick"] = dataclasses.field(default_factory=list)   # a sum's terms
    noisy: bool = False      # the only problem is the row's noise (a sum judges its own)
    fastest: tuple[float, float] | None = None   # a noisy row's bound from its fastest sample

    @property
    def bounded(self) -> bool:
        """A single noisy row that its fastest sample bounds: the claim may use ``fastest``."""
        return self.noisy and not self.parts and self.fastest is not None

    @property
    def rows(self) -> list[pd.Series]:
        return [p.row for p in self.parts if p.row is not None] if self.parts else \
            ([self.row] if self.row is not None else [])

    def describe(self, unit: str) -> str:
        if self.row is None:
            return f"{self.label}: {self.problem}"
        if self.parts:
            terms = " + ".join(f"{p.label} {_f(p.mid)}" + (" (noisy)" if p.noisy else "") for p in self.parts)
            runs = sorted({f"{r.get('sweep', '?')} at {str(r.get('commit', '') or '')[:7]}" for r in self.rows})
            return (f"sum {_f(self.mid)} {unit} ({_f(self.lo)}–{_f(self.hi)}, spread "
                    f"{(self.hi - self.lo) / self.mid * 100:.1f}%) = {terms} ({'; '.join(runs)})")
        run = f"{self.row.get('sweep', '?')} at {str(self.row.get('commit', '') or '')[:7]}"
        return f"{self.label} {_f(self.mid)} {unit} ({_f(self.lo)}–{_f(self.hi)}, {run})"


def _f(x: float) -> str:
    return "–" if x != x else (f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}")


def same_value(a: Any, b: Any) -> bool:
    """Whether a stored axis value ``b`` is the value ``a`` a rule or point names: numbers by
    value (32 is 32.0: a published rows.csv reads integer axes back as floats), else as text.
    numbers.Real, because NumPy's integers (a row's axis value) are not ints."""
    if isinstance(a, numbers.Real) and not isinstance(a, (bool, np.bool_)):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def truthy(v: Any) -> bool:
    """A stored flag (bool, or its text in a rows.csv) as a bool."""
    return str(v).strip().lower() in ("true", "1", "1.0")


def _label(sel: Mapping[str, Any]) -> str:
    point = " ".join(f"{k}={v}" for k, v in (sel.get("point") or {}).items())
    return f"{sel['component']}/{sel['variant']}" + (f" at {point}" if point else "") + (
        f" in {sel['sweep']}" if sel.get("sweep") else "")


def _rate_per_ms(row: pd.Series, metric: str) -> float:
    """The metric times ms for a rate metric: GB/s = bytes / (ms * 1e6), or that over the roofline."""
    rate = float(row["bytes"]) / 1e6
    if metric == "roofline_fraction":
        roof = float(row.get("roofline_gbps", math.nan))
        rate = rate / roof if roof == roof and roof > 0 else math.nan
    return rate


def _interval(row: pd.Series, metric: str) -> tuple[float, float, float]:
    """(lo, mid, hi) of the metric from the row's ms_p20 / ms_p50 / ms_p80."""
    p20, p50, p80 = (float(row[c]) for c in ("ms_p20", "ms_p50", "ms_p80"))
    if metric == "us":
        return p20 * 1e3, p50 * 1e3, p80 * 1e3
    rate = _rate_per_ms(row, metric)
    return rate / p80, rate / p50, rate / p20


def _fastest_bound(row: pd.Series, metric: str) -> tuple[float, float] | None:
    """What a noisy row's fastest sample (ms_min) bounds: its time is at least that (us: [min, inf)),
    its rate at most the rate at it ([0, rate / min]); None without a usable ms_min."""
    try:
        fastest = float(row.get("ms_min", math.nan))
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(fastest) and fastest > 0):
        return None
    if metric == "us":
        return fastest * 1e3, math.inf
    rate = _rate_per_ms(row, metric)
    return (0.0, rate / fastest) if math.isfinite(rate) else None


def select(rows: pd.DataFrame, sel: Mapping[str, Any], metric: str) -> Pick:
    pick = Pick(_label(sel))
    m = rows["component"].astype(str) == str(sel["component"])
    if sel.get("sweep"):
        m &= rows["sweep"].astype(str) == str(sel["sweep"])
    for axis, value in (sel.get("point") or {}).items():
        if axis not in rows.columns:
            pick.problem = f"no row matches (no stored row has the axis {axis})"
            return pick
        m &= rows[axis].map(lambda v, value=value: same_value(value, v))
    here = rows[m]
    if sel["variant"] == FASTEST:
        peer = here["peer"].map(truthy) if "peer" in here else pd.Series(False, index=here.index)
        ours = here[(here["status"] == "ok") & ~peer]
        if ours.empty:
            pick.problem = "no ok row of ours at that point"
            return pick
        here = here[here["variant"] == ours.loc[ours["ms_p50"].idxmin(), "variant"]]
        pick.label += f" (= {here['variant'].iloc[0]})"
    else:
        here = here[here["variant"].astype(str) == str(sel["variant"])]
    if here.empty:
        pick.problem = "no row matches"
        return pick
    if len(here) > 1:
        from harness.report import component_axes

        loose = [a for a in component_axes(here) if here[a].nunique(dropna=False) > 1]
        if "sweep" in here and here["sweep"].nunique() > 1:
            loose.append("sweep")
        pick.problem = (f"{len(here)} rows match (they differ in {', '.join(loose) or 'nothing: the same point twice'}); "
                        f"pin {'it' if len(loose) == 1 else 'them'} in the rule")
        return pick
    row = here.iloc[0]
    pick.row = row
    if row["status"] != "ok":
        why = str(row.get("reason") or "") if row.get("reason") == row.get("reason") else ""
        pick.problem = f"its row is {row['status']}" + (f" ({why})" if why else "")
        return pick
    pick.lo, pick.mid, pick.hi = _interval(row, metric)
    if truthy(row.get("noisy")):
        pick.problem = f"its row is noisy (p20–p80 spread {float(row.get('spread', math.nan)) * 100:.1f}% of p50)"
        pick.noisy = all(math.isfinite(x) for x in (pick.lo, pick.mid, pick.hi))
        pick.fastest = _fastest_bound(row, metric) if pick.noisy else None
    elif not all(math.isfinite(x) for x in (pick.lo, pick.mid, pick.hi)):
        pick.problem = f"its row has no {metric} interval"
    return pick


def select_side(rows: pd.DataFrame, side: Any, metric: str) -> Pick:
    """A selector's pick, or the sum of a list's picks: their p20s, p50s and p80s added. A part
    missing, skipped or failed leaves the sum without a figure; a noisy part does not by itself:
    the sum is judged noisy when its own p20-p80 spread exceeds the timing's noise bound (a
    5 µs expand whose launches jitter by 7% moves a 170 µs indexer layer by 0.2%)."""
    if isinstance(side, Mapping):
        return select(rows, side, metric)
    parts = [select(rows, sel, metric) for sel in side]
    total = Pick(" + ".join(p.label for p in parts))
    total.row = next((p.row for p in parts if p.row is not None), None)
    total.parts = parts
    bad = [p for p in parts if p.problem and not p.noisy]
    if bad:
        total.problem = "; ".join(f"{p.label}: {p.problem}" for p in bad)
        return total
    total.lo, total.mid, total.hi = (sum(getattr(p, k) for p in parts) for k in ("lo", "mid", "hi"))
    spread = (total.hi - total.lo) / total.mid
    if spread > MAX_NOISE:
        total.problem = f"the sum is noisy (p20–p80 spread {spread * 100:.1f}% of p50 > {MAX_NOISE:.0%})"
    return total


def _holds(lo: float, hi: float, op: str, target: float) -> str:
    """accepted when every value of [lo, hi] satisfies ``x op target``, rejected when none does."""
    if op in ("<=", "<"):
        yes = hi <= target if op == "<=" else hi < target
        no = lo > target if op == "<=" else lo >= target
    else:
        yes = lo >= target if op == ">=" else lo > target
        no = hi < target if op == ">=" else hi <= target
    return "accepted" if yes else "rejected" if no else "inconclusive"


UNITS = {"us": "µs", "gbps": "GB/s", "roofline_fraction": "of roofline"}


def evaluate_claim(claim: Mapping[str, Any], rows: pd.DataFrame) -> dict[str, Any]:
    """One claim decided over ``rows``: verdict, the figures that decided it, why, the rows used."""
    rule = claim["rule"]
    metric, op = rule.get("metric", "us"), rule["op"]
    unit = UNITS[metric]
    num = select_side(rows, rule["numerator"], metric)
    picks = [num]
    if rule.get("denominator") is not None:
        factor = float(rule.get("factor", 1.0))
        den = select_side(rows, rule["denominator"], metric)
        picks.append(den)
        target_text = f"{op} {factor:g} × denominator"
    else:
        factor, den = float(rule["value"]), None
        target_text = f"{op} {factor:g} {unit}"
    bad = [p for p in picks if p.problem and not p.bounded]
    noisy = [p for p in picks if p.problem and p.bounded]
    figures = "; ".join(p.describe(unit) for p in picks if p.row is not None and p.lo == p.lo)
    result = {"id": claim["id"], "text": claim["text"], "rule": target_text,
              "rows": [r for p in picks for r in p.rows]}
    if bad:
        why = "; ".join(f"{p.label}: {p.problem}" for p in bad + noisy)
        return {**result, "verdict": "inconclusive", "figures": figures or "–", "why": why,
                "ratio": None}

    def bounds(p: Pick) -> tuple[float, float]:
        return p.fastest if p.bounded else (p.lo, p.hi)
    nlo, nhi = bounds(num)
    what = "p20–p80" if not noisy else "p20–p80, a noisy row from its fastest sample,"
    if den is not None:
        dlo, dhi = bounds(den)
        lo, mid, hi = nlo / dhi, num.mid / den.mid, nhi / dlo
        figures += f"; ratio {mid:.3f} ({what} bounds {lo:.3f}–{hi:.3f}) {target_text.replace(' × denominator', '')}"
    else:
        lo, mid, hi = nlo, num.mid, nhi
        figures += f"; {target_text}"
    verdict = _holds(lo, hi, op, factor)
    why = {"accepted": f"the whole {what} range {_f(lo)}–{_f(hi)} is {op} {factor:g}",
           "rejected": f"no part of the {what} range {_f(lo)}–{_f(hi)} is {op} {factor:g}",
           "inconclusive": f"the {what} range {_f(lo)}–{_f(hi)} straddles {factor:g}"}[verdict]
    if noisy:
        fastest = "; ".join(f"{p.label}: {p.problem}, fastest sample {_f(float(p.row['ms_min']) * 1e3)} µs"
                            for p in noisy)
        why = f"{why} ({fastest})"
    return {**result, "verdict": verdict, "figures": figures, "why": why, "ratio": (lo, mid, hi)}


def evaluate(claims: Sequence[Mapping[str, Any]], rows: pd.DataFrame) -> list[dict[str, Any]]:
    return [evaluate_claim(c, rows) for c in claims]


def verdict_table(results: Sequence[Mapping[str, Any]]) -> str:
    from harness.report import md_table

    return md_table(["claim", "verdict", "rule", "figures (measured)", "why"],
                    [[f"`{r['id']}`: {r['text']}", f"**{r['verdict']}**", r["rule"], r["figures"], r["why"]]
                     for r in results])


def experiment_of(overrides: Sequence[str]) -> str | None:
    """The ``+experiment=NAME`` a job was run with, if any."""
    for o in overrides:
        key, _, value = str(o).partition("=")
        if key.lstrip("+~") == "experiment" and value:
            return value
    return None
