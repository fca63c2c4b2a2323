"""Where a decode step goes: the step's terms (experiments/budget/*.yaml) priced from measured rows.

A budget file names the terms of one decode step, each a sum of *parts* (component + point) times
the layers that run it (a fuel-derived count), and the Ms and context it is asked at. The rows come
from published reports (``reports/*/rows.csv``) and / or results stores, measured at different
times: for each part and M the budget takes our fastest verified row (status ok, not a peer) at
that point and says which report, commit and device it came from; a part with no such row is "not
measured" and its term (and any total that needs it) stays open instead of being guessed. The
non-attention part of the step is a stated input of the file (not measured here).

Nothing here knows a kernel: components, points and layer counts are the file's.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any, Sequence

import pandas as pd
import yaml

from harness import store
from harness.fuel import REPO_ROOT, Geometry

BUDGETS = REPO_ROOT / "experiments" / "budget"


class BudgetError(ValueError):
    """A budget file that cannot be used: one line naming the key."""


@dataclasses.dataclass(frozen=True)
class Part:
    component: str
    point: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Term:
    label: str
    layers: str                 # a Geometry attribute (n_kda_layers, n_dsa_layers)
    parts: tuple[Part, ...]
    strategy: str | None = None


@dataclasses.dataclass(frozen=True)
class Budget:
    name: str
    context: int
    Ms: tuple[int, ...]
    terms: tuple[Term, ...]
    moe_us_per_step: float | None
    moe_source: str

    @property
    def strategies(self) -> list[str]:
        seen: list[str] = []
        for t in self.terms:
            if t.strategy and t.strategy not in seen:
                seen.append(t.strategy)
        return seen or [""]


def load_budget(path: str | pathlib.Path, geometry: Geometry) -> Budget:
    path = pathlib.Path(path)
    if not path.is_file():
        path = BUDGETS / f"{path}.yaml" if (BUDGETS / f"{path}.yaml").is_file() else path
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in BUDGETS.glob("*.yaml")))
        raise BudgetError(f"budget: no such file or budget {str(path)!r}; allowed: {known}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise BudgetError(f"budget: {path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    terms = []
    for i, raw in enumerate(data.get("terms") or []):
        layers = str(raw.get("layers", ""))
        if not isinstance(getattr(geometry, layers, None), int):
            raise BudgetError(f"terms[{i}].layers: {layers!r} is not a layer count of the fuel; "
                              f"allowed: n_kda_layers, n_dsa_layers")
        parts = tuple(Part(str(p["component"]), dict(p.get("point") or {})) for p in raw.get("parts") or [])
        if not parts:
            raise BudgetError(f"terms[{i}].parts: a term needs at least one part")
        terms.append(Term(str(raw["label"]), layers, parts, raw.get("strategy")))
    if not terms:
        raise BudgetError(f"terms: {path} names no terms")
    moe = data.get("moe_us_per_step")
    return Budget(str(data.get("name", path.stem)), int(data.get("context", 262144)),
                  tuple(int(m) for m in data.get("M", [32])), tuple(terms),
                  None if moe is None else float(moe), str(data.get("moe_source") or ""))


def published_rows(reports: str | pathlib.Path) -> pd.DataFrame:
    """Every published report's rows, each with its report folder (``source``)."""
    frames = []
    for rows in sorted(pathlib.Path(reports).glob("*/rows.csv")):
        df = store.read_rows_table(rows)
        df["source"] = f"reports/{rows.parent.name}"
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def store_rows(root: str | pathlib.Path) -> pd.DataFrame:
    df = store.load(root)
    if len(df):
        df["source"] = df["sweep_dir"].map(lambda p: pathlib.Path(str(p)).name)
    return df


def _matches(rows: pd.DataFrame, component: str, point: dict[str, Any]) -> pd.DataFrame:
    sel = rows[(rows["component"] == component) & (rows["status"] == "ok") & (~rows["peer"].astype(bool))]
    for key, value in point.items():
        if key not in sel.columns:
            return sel.iloc[0:0]
        col = sel[key]
        sel = sel[(col.astype(str) == str(value)) | (pd.to_numeric(col, errors="coerce") == pd.to_numeric(value, errors="coerce"))]
    return sel


def pick(rows: pd.DataFrame, part: Part, M: int, context: int) -> dict[str, Any] | None:
    """Our fastest ok row for ``part`` at M (and the budget's context, where the component reads
    one), with where it came from; None if no row was measured there."""
    if rows.empty:
        return None
    point = {"M": M, **part.point}
    cand = _matches(rows, part.component, point)
    if "context" in cand.columns and cand["context"].notna().any():
        cand = cand[pd.to_numeric(cand["context"], errors="coerce") == context]
    if cand.empty:
        return None
    best = cand.loc[cand["ms_p50"].astype(float).idxmin()]
    return {"us": float(best["ms_p50"]) * 1e3, "us_p20": float(best["ms_p20"]) * 1e3,
            "us_p80": float(best["ms_p80"]) * 1e3, "variant": str(best["variant"]),
            "source": str(best.get("source", "")), "commit": str(best.get("commit", ""))[:7],
            "device": str(best.get("device_short", "")), "noisy": bool(best.get("noisy", False))}


@dataclasses.dataclass
class TermCost:
    term: Term
    parts: list[tuple[Part, dict[str, Any] | None]]
    layers: int

    @property
    def per_layer_us(self) -> float:
        if any(found is None for _, found in self.parts):
            return math.nan
        return sum(found["us"] for _, found in self.parts)

    @property
    def per_step_us(self) -> float:
        return self.per_layer_us * self.layers


def price(budget: Budget, rows: pd.DataFrame, geometry: Geometry) -> dict[int, list[TermCost]]:
    return {M: [TermCost(t, [(p, pick(rows, p, M, budget.context)) for p in t.parts], int(getattr(geometry, t.layers)))
                for t in budget.terms] for M in budget.Ms}


def step_totals(budget: Budget, costs: list[TermCost]) -> dict[str, float]:
    """Attention µs per step for each strategy: every common term plus that strategy's terms."""
    out = {}
    for strategy in budget.strategies:
        terms = [c for c in costs if c.term.strategy in (None, strategy)]
        out[strategy] = sum(c.per_step_us for c in terms)
    return out


def _us(x: float) -> str:
    return "not measured" if x != x else f"{x:,.1f}"


def markdown(budget: Budget, costs_by_m: dict[int, list[TermCost]], plot: str | None) -> str:
    """The "Where the step goes" section: a table per M, the totals per strategy, which term sets
    the attention budget, and where every figure came from."""
    lines = [f"## Where the step goes ({budget.name}, context {budget.context:,})", ""]
    lines.append("Per decode step over all layers: each term is the sum of its parts' µs per layer "
                 "(our fastest verified row at that point, p50) times the layers that run it. "
                 "Measured figures name their report; a term with a part not measured at that M "
                 "stays open.")
    if budget.moe_us_per_step is None:
        lines.append("The non-attention part of the step (MoE and the rest) is not measured by "
                     "attnbench and no figure was stated, so the attention share is not given.")
    else:
        lines.append(f"The non-attention part of the step is a stated input, **not measured here**: "
                     f"{budget.moe_us_per_step:,.1f} µs per step ({budget.moe_source or 'source not given'}).")
    lines.append("")
    sources: dict[str, str] = {}
    for M, costs in costs_by_m.items():
        lines += [f"### M = {M}", "", "| term | layers | µs per layer (parts) | µs per step |", "| --- | --- | --- | --- |"]
        for c in costs:
            parts = []
            for p, found in c.parts:
                if found is None:
                    parts.append(f"{p.component}: not measured")
                else:
                    sources[found["source"]] = f"{found['commit']} on {found['device']}"
                    parts.append(f"{p.component} `{found['variant']}` {found['us']:.2f}"
                                 f"{' (noisy)' if found['noisy'] else ''} [{found['source'].split('/')[-1]}]")
            label = c.term.label + (f" *(strategy {c.term.strategy})*" if c.term.strategy else "")
            lines.append(f"| {label} | {c.layers} | {_us(c.per_layer_us)}: {'; '.join(parts)} | {_us(c.per_step_us)} |")
        lines.append("")
        totals = step_totals(budget, costs)
        for strategy, total in totals.items():
            terms = [c for c in costs if c.term.strategy in (None, strategy)]
            name = f"with strategy `{strategy}`" if strategy else ""
            if total != total:
                lines.append(f"- Attention per step {name}: open (a part is not measured at M = {M}).")
                continue
            top = max(terms, key=lambda c: c.per_step_us)
            share = "" if budget.moe_us_per_step is None else \
                f"; attention is {total / (total + budget.moe_us_per_step):.0%} of the step with the stated non-attention figure"
            lines.append(f"- Attention per step {name}: **{total:,.1f} µs**; the largest term is "
                         f"{top.term.label} ({top.per_step_us:,.1f} µs, {top.per_step_us / total:.0%}){share}.")
        lines.append("")
    if plot:
        lines += [f"![µs per step by term]({plot})", ""]
    if sources:
        lines += ["Rows from: " + "; ".join(f"`{s}` ({v})" for s, v in sorted(sources.items())) + "."]
        commits = {v for v in sources.values()}
        if len(commits) > 1:
            lines.append(f"These figures were measured on {len(commits)} different commit/device pairs; "
                         "each is the best verified row of its report at that point.")
    return "\n".join(lines) + "\n"


def plot_budget(budget: Budget, costs_by_m: dict[int, list[TermCost]], path: pathlib.Path) -> bool:
    """Stacked bars: µs per step by term, one bar per (M, strategy) whose terms are all measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = []
    for M, costs in costs_by_m.items():
        for strategy in budget.strategies:
            terms = [c for c in costs if c.term.strategy in (None, strategy)]
            if all(c.per_step_us == c.per_step_us for c in terms):
                bars.append((f"M={M}\n{strategy}" if strategy else f"M={M}", terms))
    if not bars:
        return False
    labels = [t.label for t in budget.terms if t.strategy is None] + ["indexer"]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(bars)), 4.5))
    bottoms = [0.0] * len(bars)
    for j, label in enumerate(labels):
        heights = []
        for _, terms in bars:
            if label == "indexer":
                heights.append(sum(c.per_step_us for c in terms if c.term.strategy is not None))
            else:
                heights.append(sum(c.per_step_us for c in terms if c.term.label == label))
        ax.bar(range(len(bars)), heights, bottom=bottoms, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(bars)), [b for b, _ in bars], fontsize=8)
    ax.set_ylabel("µs per decode step (all layers)")
    ax.set_title(f"{budget.name}: attention per decode step, context {budget.context:,}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def render(budget: Budget, rows: pd.DataFrame, geometry: Geometry, out: pathlib.Path | None) -> str:
    costs = price(budget, rows, geometry)
    plot = None
    if out is not None and plot_budget(budget, costs, out / f"{budget.name}.png"):
        plot = f"{budget.name}.png"
    text = markdown(budget, costs, plot)
    if out is not None:
        store.atomic_write_bytes(out / "README.md", (f"# {budget.name}: where the decode step goes\n\n" + text).encode())
    return text


def gather_rows(reports: Sequence[str], roots: Sequence[str]) -> pd.DataFrame:
    frames = [published_rows(r) for r in reports] + [store_rows(r) for r in roots]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
