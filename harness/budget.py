"""Where a decode step goes: the step's terms (experiments/budget/*.yaml) priced from measured rows.

A budget file names the terms of one decode step, each a sum of *parts* (component + point) times
the layers that run it (a fuel-derived count), and the Ms and context it is asked at. The rows come
from published reports (``reports/*/rows.csv``) and / or results stores, measured at different
times: for each part and M the budget takes our fastest verified row (status ok, not a peer, of
a variant the code still has) at that point and says which report, commit and device it came
from; a part with no such row is "not measured" and its term (and any total that needs it) stays
open instead of being guessed. The non-attention part of the step is a stated input of the file
(not measured here).

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
class ContextCurve:
    """How the per-layer cost of the terms moves with the context: every strategy term is held
    against the ``against`` term at each context the rows hold, and the context where they cross
    is interpolated; ``derived`` is a crossover a source derives (tokens, and where it is from)."""
    against: str
    derived_tokens: int | None = None
    derived_source: str = ""


@dataclasses.dataclass(frozen=True)
class Budget:
    name: str
    context: int
    Ms: tuple[int, ...]
    terms: tuple[Term, ...]
    moe_us_per_step: float | None
    moe_source: str
    curve: ContextCurve | None = None
    device: str | None = None   # the card whose rows price it (device_short); None: any card

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
    curve = None
    if data.get("context_curve") is not None:
        raw = data["context_curve"] or {}
        against = str(raw.get("against", ""))
        if against not in [t.label for t in terms if t.strategy is None]:
            raise BudgetError(f"context_curve.against: {against!r} is not a term without a strategy; allowed: "
                              + ", ".join(repr(t.label) for t in terms if t.strategy is None))
        derived = raw.get("derived_crossover") or {}
        curve = ContextCurve(against, int(derived["tokens"]) if derived.get("tokens") else None,
                             str(derived.get("source", "")))
    device = data.get("device")
    if device is not None and (not isinstance(device, str) or not device.strip()):
        raise BudgetError(f"device: {device!r} is not a card's short name (a rows' device_short, e.g. h200), "
                          "or null for any card")
    return Budget(str(data.get("name", path.stem)), int(data.get("context", 262144)),
                  tuple(int(m) for m in data.get("M", [32])), tuple(terms),
                  None if moe is None else float(moe), str(data.get("moe_source") or ""), curve,
                  device.strip().lower() if device else None)


def on_device(rows: pd.DataFrame, device: str | None) -> pd.DataFrame:
    """``rows`` measured on ``device`` (their device_short) only; all of them when it is None.
    Why: a step priced from two cards' rows answers for neither (an H100's top-k beside an H200's
    scan), so a budget names its card and the gathered rows are cut to it."""
    if device is None or rows.empty:
        return rows
    if "device_short" not in rows.columns:
        return rows.iloc[0:0]
    return rows[rows["device_short"].astype(str).str.lower() == device]


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


def code_variants() -> dict[str, set[str]]:
    """The variants the registered components have now, by component (the registry's)."""
    from harness import registry

    return {name: set(comp.variant_names()) for name, comp in registry.components().items()}


def drop_removed(rows: pd.DataFrame, variants: dict[str, set[str]] | None = None) -> pd.DataFrame:
    """``rows`` without those of a variant its component no longer has (``variants``, default the
    registry's: {component: names}); a component the registry does not know keeps every row. What
    the budget prices from: a removed design's report keeps its number, but a reader cannot run it."""
    if rows.empty:
        return rows
    variants = code_variants() if variants is None else variants
    kept = [str(c) not in variants or str(v) in variants[str(c)] for c, v in zip(rows["component"], rows["variant"])]
    return rows[kept]


def ours_by_component(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Our verified rows (status ok, not a peer's), split by component: what every part is priced
    from, computed once per frame (a budget prices hundreds of parts over thousands of rows)."""
    if rows.empty:
        return {}
    ours = rows[(rows["status"] == "ok") & (~rows["peer"].astype(bool))]
    return {str(c): g for c, g in ours.groupby("component", sort=False)}


def _matches(sel: pd.DataFrame, point: dict[str, Any]) -> pd.DataFrame:
    for key, value in point.items():
        if key not in sel.columns:
            return sel.iloc[0:0]
        col = sel[key]
        try:  # a number (or a number written as text, "64") compares by value: 64 is 64.0
            number = None if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = None
        sel = sel[(pd.to_numeric(col, errors="coerce") == number) if number is not None else (col.astype(str) == str(value))]
    return sel


def pick(rows: pd.DataFrame, part: Part, M: int, context: int,
         index: dict[str, pd.DataFrame] | None = None) -> dict[str, Any] | None:
    """Our fastest ok row for ``part`` at M (and the budget's context, where the component reads
    one), with where it came from; None if no row was measured there. ``index``: the frame's
    ``ours_by_component``, when the caller prices many parts."""
    index = ours_by_component(rows) if index is None else index
    if part.component not in index:
        return None
    cand = _matches(index[part.component], {"M": M, **part.point})
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


def price(budget: Budget, rows: pd.DataFrame, geometry: Geometry, context: int | None = None) -> dict[int, list[TermCost]]:
    """Every term at every M of the budget, at its context (or ``context``)."""
    context = budget.context if context is None else context
    index = ours_by_component(rows)
    return {M: [TermCost(t, [(p, pick(rows, p, M, context, index)) for p in t.parts], int(getattr(geometry, t.layers)))
                for t in budget.terms] for M in budget.Ms}


def complete(costs_by_m: dict[int, list[TermCost]]) -> bool:
    """True when every part of every term is measured at every M."""
    return all(found is not None for costs in costs_by_m.values() for c in costs for _, found in c.parts)


# -- the context curve --------------------------------------------------------------------------------
def curve_contexts(budget: Budget, rows: pd.DataFrame) -> list[int]:
    """The contexts at which the rows hold a row of every part that reads a context."""
    if rows.empty or "context" not in rows.columns:
        return []
    parts = {p.component for t in budget.terms for p in t.parts}
    per = [set(pd.to_numeric(rows.loc[(rows["component"] == c) & (rows["status"] == "ok"), "context"],
                             errors="coerce").dropna().astype(int)) for c in parts]
    per = [s for s in per if s]
    return sorted(set.intersection(*per)) if per else []


def curve(budget: Budget, rows: pd.DataFrame, geometry: Geometry) -> dict[int, dict[int, list[TermCost]]]:
    """``{context: {M: [TermCost]}}`` at every context the rows hold for every part (none when the
    budget draws no context curve)."""
    if budget.curve is None:
        return {}
    parts = {p.component for t in budget.terms for p in t.parts}
    rows = rows[rows["component"].isin(parts)] if len(rows) else rows
    return {ctx: price(budget, rows, geometry, ctx) for ctx in curve_contexts(budget, rows)}


def crossovers(budget: Budget, by_context: dict[int, dict[int, list[TermCost]]]) -> list[dict[str, Any]]:
    """Per M and strategy term: where its per-layer cost crosses the ``against`` term's, from the
    measured contexts: the bracketing pair and the crossing interpolated linearly in log(context)
    on the difference of the two costs; or that it stays on one side over the measured range."""
    if budget.curve is None or len(by_context) < 2:
        return []
    contexts = sorted(by_context)
    out = []
    for M in budget.Ms:
        for strategy_term in [t for t in budget.terms if t.strategy is not None]:
            diffs = []
            for ctx in contexts:
                costs = {c.term.label: c.per_layer_us for c in by_context[ctx][M]}
                diffs.append(costs[strategy_term.label] - costs[budget.curve.against])
            row = {"M": M, "term": strategy_term.label, "strategy": strategy_term.strategy,
                   "against": budget.curve.against, "bracket": None, "tokens": None, "side": ""}
            if any(d != d for d in diffs):
                row["side"] = "not measured at every context"
            else:
                for (c1, d1), (c2, d2) in zip(zip(contexts, diffs), zip(contexts[1:], diffs[1:])):
                    if d1 <= 0 < d2 or d1 >= 0 > d2:
                        t = d1 / (d1 - d2)
                        row["bracket"] = (c1, c2)
                        row["tokens"] = float(math.exp(math.log(c1) + t * (math.log(c2) - math.log(c1))))
                        break
                else:
                    row["side"] = (f"it costs {'more' if diffs[0] > 0 else 'less'} at every measured context "
                                   f"({contexts[0]:,}–{contexts[-1]:,})")
            out.append(row)
    return out


def curve_markdown(budget: Budget, by_context: dict[int, dict[int, list[TermCost]]], plot: str | None) -> str:
    """Per-layer µs of every DSA-layer term at each measured context, and the crossings."""
    if budget.curve is None or len(by_context) < 2:
        return ""
    contexts = sorted(by_context)
    labels = [budget.curve.against] + [t.label for t in budget.terms if t.strategy is not None]
    lines = [f"### Per layer against the context", "",
             f"µs per layer (p50 of our fastest verified rows, summed over each term's parts) at every context "
             f"the rows hold all parts for; each strategy term is held against *{budget.curve.against}*, whose "
             f"selection does not grow with the context.", ""]
    lines += ["| M | context | " + " | ".join(labels) + " |", "| --- | --- | " + " | ".join("---" for _ in labels) + " |"]
    for M in budget.Ms:
        for ctx in contexts:
            costs = {c.term.label: c.per_layer_us for c in by_context[ctx][M]}
            lines.append(f"| {M} | {ctx:,} | " + " | ".join(_us(costs[label]) for label in labels) + " |")
    lines.append("")
    rows = []
    for x in crossovers(budget, by_context):
        if x["tokens"] is not None:
            where = (f"between {x['bracket'][0]:,} and {x['bracket'][1]:,}, near **{x['tokens']:,.0f}** "
                     f"(interpolated in log context)")
        else:
            where = f"none: {x['side']}"
        rows.append(f"| {x['M']} | {x['term']} | {where} |")
    if rows:
        lines += [f"Where each strategy's indexer crosses *{budget.curve.against}* (measured):", "",
                  "| M | indexer strategy | crossing (tokens) |", "| --- | --- | --- |", *rows, ""]
    if budget.curve.derived_tokens:
        lines.append(f"- Derived, not measured: {budget.curve.derived_source} puts the crossover near "
                     f"{budget.curve.derived_tokens:,} tokens.")
    lines.append("")
    if plot:
        lines += [f"![µs per layer against the context]({plot})", ""]
    return "\n".join(lines)


def plot_curve(budget: Budget, by_context: dict[int, dict[int, list[TermCost]]], path: pathlib.Path) -> bool:
    """One panel per M: µs per layer against the context (log scale) for the ``against`` term and
    every strategy term, the measured crossings marked and the derived one drawn as a line."""
    if budget.curve is None or len(by_context) < 2:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    contexts = sorted(by_context)
    labels = [budget.curve.against] + [t.label for t in budget.terms if t.strategy is not None]
    cross = crossovers(budget, by_context)
    ncols = min(2, len(budget.Ms))
    nrows = -(-len(budget.Ms) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax in axes.flat[len(budget.Ms):]:
        ax.set_visible(False)
    for ax, M in zip(axes.flat, budget.Ms):
        for label in labels:
            ys = [{c.term.label: c.per_layer_us for c in by_context[ctx][M]}[label] for ctx in contexts]
            ax.plot(contexts, ys, marker="o", lw=2 if label == budget.curve.against else 1.2,
                    ls="-" if label == budget.curve.against else "--", label=label)
        for x in cross:
            if x["M"] == M and x["tokens"] is not None:
                ax.axvline(x["tokens"], color="grey", lw=0.8, alpha=0.6)
        if budget.curve.derived_tokens:
            ax.axvline(budget.curve.derived_tokens, color="k", ls=":", lw=1,
                       label=f"derived crossover {budget.curve.derived_tokens:,}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(contexts, [f"{c // 1024:,}K" if c % 1024 == 0 else f"{c:,}" for c in contexts])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("µs per layer")
        ax.set_title(f"M = {M}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"{budget.name}: one DSA layer's terms against the context (measured; grey: crossings)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def step_totals(budget: Budget, costs: list[TermCost]) -> dict[str, float]:
    """Attention µs per step for each strategy: every common term plus that strategy's terms."""
    out = {}
    for strategy in budget.strategies:
        terms = [c for c in costs if c.term.strategy in (None, strategy)]
        out[strategy] = sum(c.per_step_us for c in terms)
    return out


def finding(budget: Budget, costs_by_m: dict[int, list[TermCost]]) -> str:
    """One sentence in numbers: attention per step at each M under the budget's first strategy and
    the term that sets it (or "" when a part is not measured)."""
    strategy = budget.strategies[0]
    totals, tops = [], []
    for M, costs in costs_by_m.items():
        total = step_totals(budget, costs)[strategy]
        if total != total:
            return ""
        terms = [c for c in costs if c.term.strategy in (None, strategy)]
        top = max(terms, key=lambda c: c.per_step_us)
        totals.append(total)
        tops.append((M, top.term.label, top.per_step_us / total))
    Ms = " / ".join(str(M) for M in costs_by_m)
    head = (f"at {budget.context:,} tokens ({next(t.label for t in budget.terms if t.strategy == strategy) if strategy else 'every term'}), "
            f"attention per decode step takes {' / '.join(f'{t:,.0f}' for t in totals)} µs at M = {Ms}")
    labels = {label for _, label, _ in tops}
    if len(labels) == 1:
        shares = [share for _, _, share in tops]
        return head + f"; the largest term at every M is {tops[0][1]} ({min(shares):.0%}–{max(shares):.0%} of it)"
    return head + "; the largest term: " + ", ".join(f"M = {M} {label} ({share:.0%})" for M, label, share in tops)


def _us(x: float) -> str:
    return "not measured" if x != x else f"{x:,.1f}"


def markdown(budget: Budget, costs_by_m: dict[int, list[TermCost]], plot: str | None) -> str:
    """The "Where the step goes" section: a table per M, the totals per strategy, which term sets
    the attention budget, and where every figure came from."""
    lines = [f"## Where the step goes ({budget.name}, context {budget.context:,})", ""]
    lines.append("Per decode step over all layers: each term is the sum of its parts' µs per layer "
                 "(our fastest verified row at that point, of a variant the code still has"
                 + (f", measured on the {budget.device}" if budget.device else "") + ", p50) "
                 "times the layers that run it. "
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


def section(budget: Budget, rows: pd.DataFrame, geometry: Geometry, out: pathlib.Path | None,
            prefix: str = "", costs: dict[int, list[TermCost]] | None = None) -> tuple[str, list[str]]:
    """The whole "Where the step goes" markdown (the step at the budget's context, then the
    per-layer curve against the context where the rows hold several) and the plots it wrote
    into ``out`` (named ``<prefix><budget>.png`` and ``<prefix><budget>-context.png``).
    ``costs``: ``price(budget, rows, geometry)`` when the caller has it already."""
    costs = price(budget, rows, geometry) if costs is None else costs
    plots, plot, curve_plot = [], None, None
    if out is not None and plot_budget(budget, costs, out / f"{prefix}{budget.name}.png"):
        plot = f"{prefix}{budget.name}.png"
        plots.append(plot)
    by_context = curve(budget, rows, geometry)
    if out is not None and plot_curve(budget, by_context, out / f"{prefix}{budget.name}-context.png"):
        curve_plot = f"{prefix}{budget.name}-context.png"
        plots.append(curve_plot)
    text = markdown(budget, costs, plot)
    more = curve_markdown(budget, by_context, curve_plot)
    return text + ("\n" + more if more else ""), plots


def render(budget: Budget, rows: pd.DataFrame, geometry: Geometry, out: pathlib.Path | None) -> str:
    """The budget priced from ``rows`` measured on its device (``on_device``), written to ``out``."""
    text, _ = section(budget, on_device(rows, budget.device), geometry, out)
    if out is not None:
        store.atomic_write_bytes(out / "README.md", (f"# {budget.name}: where the decode step goes\n\n" + text).encode())
    return text


def gather_rows(reports: Sequence[str], roots: Sequence[str]) -> pd.DataFrame:
    frames = [published_rows(r) for r in reports] + [store_rows(r) for r in roots]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def priced_rows(reports: Sequence[str | pathlib.Path], roots: Sequence[str | pathlib.Path] = ()) -> pd.DataFrame:
    """What a budget is priced from: the published reports' and stores' rows (``gather_rows``)
    without those of variants the code no longer has (``drop_removed``). The CLI, the write-ups'
    step budget and the committed budget's test all read rows through this."""
    return drop_removed(gather_rows([str(r) for r in reports], [str(r) for r in roots]))
