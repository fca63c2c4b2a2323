"""Reports: a sweep rendered as a dated markdown write-up from a Jinja template.

``render_sweep`` writes ``<out_root>/<date>-<sweep>-<device>/`` with ``README.md`` (the template,
rendered with StrictUndefined so a missing value is an error, not a blank), ``rows.csv`` (every
stored row with its provenance columns), ``provenance.json``, ``roofline.json`` and one plot per
component. Every figure in the text comes from those rows; CPU figures are labelled as such.
"""

from __future__ import annotations

import math
import os
import pathlib
import shutil
import tempfile
from typing import Any, Iterable, Sequence

import jinja2
import numpy as np
import pandas as pd

from harness import accounting as acc
from harness import reopen, store
from harness.fuel import DEFAULT_FUEL, REPO_ROOT, Geometry, load_fuel

TEMPLATES = REPO_ROOT / "reports" / "templates"


# -- small formatting helpers (used by templates through filters) ------------------------------------
def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        # An integer axis becomes float in a frame where other components leave it NaN: print
        # 1024.0 as 1024, not as 1.02e+03.
        if spec == ".3g" and value.is_integer():
            return str(int(value))
        return format(value, spec)
    return str(value)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; cells are already strings or are str()-ed; pipes are escaped."""
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["fmt"] = fmt
    return env


# -- tables -----------------------------------------------------------------------------------------
def component_axes(df: pd.DataFrame) -> list[str]:
    """Point axes these rows hold a value for, in the order their components declare them."""
    return [a for a in store.point_axes(df) if df[a].notna().any()]


def results_table(df: pd.DataFrame, cpu: bool) -> str:
    axes = component_axes(df)
    unit = "host" if cpu else ""
    headers = ["variant", *axes, f"µs/layer p50{' (' + unit + ')' if unit else ''}", "p20–p80 µs", "GB/s",
               "% roofline", "layers", "ms all layers", "rel err", "n", "status"]
    rows = []
    fallback = graph_fallbacks(df)
    for i, r in df.sort_values(axes + ["variant"]).iterrows():
        status = r["status"] + (" (noisy)" if r.get("noisy") else "") + (" (no graph)" if fallback[i] else "")
        rows.append([
            r["variant"] + (" [peer]" if r.get("peer") else ""),
            *[fmt(r[a]) for a in axes],
            fmt(r["ms_p50"] * 1e3, ".2f"),
            f"{fmt(r['ms_p20'] * 1e3, '.2f')}–{fmt(r['ms_p80'] * 1e3, '.2f')}",
            fmt(r["gbps"], ".1f"),
            fmt(r["roofline_fraction"] * 100 if r["roofline_fraction"] == r["roofline_fraction"] else None, ".1f"),
            fmt(r["layers"]),
            fmt(r["ms_all_layers"], ".4f"),
            fmt(r["rel_err"], ".2e"),
            fmt(r["n"]),
            status,
        ])
    return md_table(headers, rows)


# A point joins the line fit when it moves at least this share of the group's largest point's bytes:
# small points are latency-bound (a few tiles for many SMs) and would bend the line.
SCALING_MIN_SHARE = 0.25
SCALING_MIN_POINTS = 3


def scaling_fits(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per variant (and fixed value of every other axis): the least-squares line
    ``seconds = fixed + bytes / rate`` through the ok rows that move at least SCALING_MIN_SHARE of
    the group's largest byte count, over the first numeric axis that varies. The rate is the cost
    of each added byte once the step is large; ``fixed`` is what it pays whatever its size."""
    ok = df[df["status"] == "ok"]
    axes = component_axes(ok)
    numeric = [a for a in axes if ok[a].nunique() > 1 and pd.api.types.is_numeric_dtype(ok[a])]
    if not numeric:
        return []
    size = numeric[0]
    others = [a for a in axes if a != size]
    fits = []
    for key, grp in ok.groupby(["variant", *others], dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        big = grp[grp["bytes"] >= SCALING_MIN_SHARE * grp["bytes"].max()].sort_values("bytes")
        if big["bytes"].nunique() < SCALING_MIN_POINTS:
            continue
        x = big["bytes"].to_numpy(dtype=float)
        y = big["ms_p50"].to_numpy(dtype=float) * 1e-3
        slope, fixed = (float(c) for c in np.polyfit(x, y, 1))
        if slope <= 0:  # time does not grow with bytes: no rate to report
            continue
        dev = np.abs(fixed + slope * x - y) / y
        fits.append({
            "variant": key[0], "peer": bool(grp["peer"].iloc[0]) if "peer" in grp else False,
            "others": dict(zip(others, key[1:])), "size_axis": size,
            "sizes": big[size].tolist(),
            "rate_gbps": 1e-9 / slope, "fixed_us": fixed * 1e6, "max_dev": float(dev.max()),
        })
    return fits


def scaling_table(df: pd.DataFrame, roofline_gbps: float | None) -> str:
    fits = scaling_fits(df)
    if not fits:
        return ""
    others = list(fits[0]["others"])
    size = fits[0]["size_axis"]
    headers = ["variant", *others, f"{size} in the fit", "marginal GB/s", "% roofline", "fixed µs",
               "largest deviation"]
    fits.sort(key=lambda f: (*[str(f["others"][o]) for o in others], -f["rate_gbps"]))
    rows = [[f["variant"] + (" [peer]" if f["peer"] else ""), *[fmt(f["others"][o]) for o in others],
             ", ".join(fmt(v) for v in f["sizes"]), fmt(f["rate_gbps"], ".0f"),
             fmt(f["rate_gbps"] / roofline_gbps * 100 if roofline_gbps else None, ".1f"),
             fmt(f["fixed_us"], ".2f"), f"{f['max_dev'] * 100:.1f}%"] for f in fits]
    return md_table(headers, rows)


def graph_fallbacks(df: pd.DataFrame) -> pd.Series:
    """Ok rows timed without a CUDA graph in a sweep whose other ok rows used one: their capture
    failed and they ran as plain launches (the runner's reason says why; rows stored before it
    recorded one are caught by the mixed ``graph`` column alone)."""
    ok = df["status"] == "ok"
    graph = df["graph"].astype(bool) if "graph" in df.columns else pd.Series(False, index=df.index)
    said = df["reason"].fillna("").astype(str).str.contains("graph capture failed", regex=False)
    return ok & ~graph & (bool((ok & graph).any()) | said)


def _problems(df: pd.DataFrame) -> pd.Series:
    """Rows the problems table lists: not ok, noisy, or timed without the graph they asked for."""
    return (df["status"] != "ok") | (df["noisy"] == True) | graph_fallbacks(df)  # noqa: E712 (pandas mask)


def problems_table(df: pd.DataFrame) -> str:
    fallback = graph_fallbacks(df)
    bad = df[_problems(df)]
    if bad.empty:
        return ""
    axes = component_axes(bad)
    rows = []
    for i, r in bad.iterrows():
        reason = str(r["reason"]) if r["reason"] == r["reason"] and str(r["reason"]) else ""
        if fallback[i] and "graph" not in reason:
            reason = "; ".join(filter(None, ["timed as plain launches, not a CUDA graph: its capture failed", reason]))
        rows.append([r["component"], r["variant"], *[fmt(r[a]) for a in axes], r["status"], reason])
    return md_table(["component", "variant", *axes, "status", "reason"], rows)


def notes_table(df: pd.DataFrame) -> str:
    """Ok rows that say how they ran (a launch's ``note``, such as the config a peer's autotuned
    kernel was pinned to) and that the problems table does not already list, or ""."""
    said = df["reason"].fillna("").astype(str).str.len() > 0
    noted = df[~_problems(df) & said]
    if noted.empty:
        return ""
    axes = component_axes(noted)
    rows = [[r["component"], r["variant"], *[fmt(r[a]) for a in axes], str(r["reason"])]
            for _, r in noted.iterrows()]
    return md_table(["component", "variant", *axes, "how it ran"], rows)


TIMELINE_DIR = "timeline"  # a tool's per-CTA timeline kept beside a report (tools/kda_timeline.py)


def timeline_table(report_folder: pathlib.Path) -> str:
    """``timeline/summary.csv`` of a report folder as a table (one column per variant), or ""."""
    path = pathlib.Path(report_folder) / TIMELINE_DIR / "summary.csv"
    if not path.is_file():
        return ""
    summary = pd.read_csv(path)
    if summary.empty or "variant" not in summary:
        return ""
    variants = summary["variant"].tolist()
    rows = [[col, *[fmt(v, ".2f") if isinstance(v, float) else fmt(v) for v in summary[col]]]
            for col in summary.columns if col != "variant"]
    return md_table(["", *variants], rows)


def accounting_markdown(g: Geometry) -> str:
    """Seed 000's byte tables and seed 003 §9's figures, derived from the fuel."""
    items = md_table(["item", "bytes", "MiB / GiB", "derivation"],
                     [[i.name, i.bytes, f"{i.bytes / acc.MIB:.2f} MiB" if i.bytes < acc.GIB else f"{i.bytes / acc.GIB:.3f} GiB",
                       i.derivation] for i in acc.bytes_per_stream_items(g)])
    streams = md_table(["accounting", "bytes per stream", "GiB per stream", f"streams in {g.serving.pool_gib} GiB"],
                       [[a.label, a.bytes, f"{a.gib:.3f}", a.streams] for a in acc.per_stream_accounting(g)])
    budgets = md_table(["accounting", "GiB per stream (per booster)", "budget GiB", "streams"],
                       [[b.accounting, f"{b.per_stream_gib:.3f}", f"{b.budget_gib:g}", b.streams]
                        for b in acc.budget_lines(g)])
    s9 = md_table(["seed 003 §9 figure", "value"], [
        ["values per token, 11 DSA layers (MLA latent)", acc.flash_values_per_token(g, False)],
        ["values per token with pooled indexer keys", acc.flash_values_per_token(g, True)],
        ["KDA state, all layers, BF16", f"{acc.kda_state_bytes_all_layers(g) / acc.MIB:g} MiB"],
        [f"growing cache at {g.serving.max_position_embeddings} tokens, pooled keys",
         f"{acc.growing_cache_bytes(g) / acc.GIB:.4f} GiB"],
    ])
    return (f"### Bytes per stream (BF16, context {g.serving.context_cap})\n\n{items}\n\n"
            f"### Per-stream accounting\n\nThe conv state stays BF16 in every row, the FP32 row included.\n\n{streams}\n\n"
            f"### Budgets\n\nUnder the {g.serving.boosters}-booster split only the KDA state shards; the MLA latent and "
            f"the indexer keys replicate, so each stream occupies every booster. The budget left today is "
            f"{g.serving.booster_gib} − {g.serving.weights_gib} = {acc.booster_budget_gib(g):g} GiB per booster: "
            f"seed 000's \"10 streams\" is the single-device figure; the split figure gives the larger count.\n\n{budgets}\n\n"
            f"### Seed 003 §9.1–9.3\n\n{s9}\n")


def geometry_table(g: Geometry) -> str:
    """Every fact of the fuel with its value, its source and whether it is established."""
    def value(v: Any) -> str:
        return f"{len(v)} layers ({v[0]}…{v[-1]})" if isinstance(v, list) and len(v) > 8 else fmt(v)

    return md_table(["fact", "value", "established", "source"],
                    [[f"`{k}`", value(f.value), "yes" if f.established else
                      f"**open** (alternatives: {', '.join(map(str, f.alternatives))})", f.source]
                     for k, f in g.facts.items()])


def other_runs(published: pd.DataFrame, row: pd.Series, axes: Sequence[str]) -> pd.DataFrame:
    """The ok rows of other sweeps (published ones) that measured ``row``'s component, variant and
    point on the same kind of device: the runs a figure's run-to-run spread is taken over."""
    from harness.verdicts import same_value

    if published.empty or "component" not in published.columns:
        return published
    m = (published["component"] == row["component"]) & (published["variant"] == row["variant"]) & (
        published["status"] == "ok")
    if "device_short" in published.columns:
        m &= published["device_short"].astype(str) == str(row.get("device_short"))
    mine = pathlib.Path(str(row.get("sweep_dir", ""))).name
    m &= published["sweep_dir"].map(lambda d: pathlib.Path(str(d)).name != mine)
    if "chain" in published.columns and row.get("chain") == row.get("chain"):
        # launches per sample: a layer timed back to back is another measurement than one alone
        m &= pd.to_numeric(published["chain"], errors="coerce").fillna(1) == float(row.get("chain") or 1)
    for a in axes:
        if a not in published.columns:
            return published.iloc[0:0]
        m &= published[a].map(lambda v, want=row[a]: same_value(want, v) if want == want else v != v).astype(bool)
    return published[m]


def headline(df: pd.DataFrame, cpu: bool, published: pd.DataFrame | None = None) -> list[str]:
    """One line per component, computed from the rows: our fastest ok row at its largest point,
    its µs per launch with the p20–p80 range across this run's repetitions, GB/s, share of this
    sweep's roofline, and its spread across the other published runs of that point on this kind
    of device (run to run), or that none measured it."""
    from harness.publish import headlines

    lines = []
    for h in headlines(df):
        r = df[(df["component"] == h["component"]) & (df["variant"] == h["variant"]) & (df["status"] == "ok")]
        r = r.loc[(r["ms_p50"] * 1e3 - h["us"]).abs().idxmin()]
        line = (f"{h['component']}: `{h['variant']}` at {h['point']} takes **{h['us']:.2f} µs** per launch "
                f"(p20–p80 across repetitions {r['ms_p20'] * 1e3:.2f}–{r['ms_p80'] * 1e3:.2f}), {fmt(h['gbps'], '.0f')} GB/s, "
                f"{fmt(h['roofline_pct'], '.1f')}% of the copy roofline measured in this sweep"
                + (" (noisy)" if h["noisy"] else "") + (" — CPU host figures" if cpu else ""))
        if published is not None and not cpu:
            runs = other_runs(published, r, component_axes(df[df["component"] == h["component"]]))
            if len(runs):
                p50 = runs["ms_p50"].astype(float) * 1e3
                med = float(p50.median())
                names = sorted({str(x).split("/")[-1] for x in runs["source"]})
                line += (f"; across {len(runs)} other published run(s) of that point on this device "
                         f"({', '.join(f'`{n}`' for n in names[-3:])}{', …' if len(names) > 3 else ''}) its p50 ran "
                         f"{p50.min():.2f}–{p50.max():.2f} µs, this run {(h['us'] / med - 1) * 100:+.1f}% from their median")
            else:
                line += "; no other published run measured that point on this device (no run-to-run spread yet)"
        lines.append(line)
    return lines


def _sweep_label(df: pd.DataFrame) -> str:
    """``sweep`` at ``commit`` (chain N, graph) for a compare table's header."""
    first = df.iloc[0]
    chain = int(first["chain"]) if "chain" in df.columns and first["chain"] == first["chain"] else 1
    timing = f"chain {chain}" if chain > 1 else "single launch"
    return f"`{first['sweep']}` at `{str(first.get('commit', ''))[:7]}` ({timing})"


COMPARE_LABELS = ("same", "faster", "slower", "ambiguous")


def compare_rows(a: pd.DataFrame, b: pd.DataFrame, tolerance: float = 0.0) -> tuple[pd.DataFrame, int, int]:
    """Every row two sweeps share (same component, variant and point), labelled from the p20-p80
    intervals: B's time over A's lies in ``[b_p20 / a_p80, b_p80 / a_p20]``;

    - ``slower`` when all of that range is above ``1 + tolerance``, ``faster`` when all of it is
      below ``1 - tolerance``;
    - ``same`` when the intervals overlap and each p50 lies inside the other's interval (or the
      whole range is within the tolerance);
    - ``ambiguous`` otherwise: partly overlapping intervals, a noisy, skipped or failed row on
      either side, or a point measured more than once on one side (``why`` says which).

    Returns (the shared rows with ``label``, ``why``, ``ratio``, ``lo``, ``hi``; rows only in A;
    rows only in B). The rows keep their own provenance; nothing is averaged or re-timed."""
    from harness.verdicts import truthy

    axes = [ax for ax in component_axes(pd.concat([a, b])) if ax in a.columns and ax in b.columns]
    keys = ["component", "variant", *axes]

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df["noisy_"] = df["noisy"].map(truthy)
        return df.groupby(keys, dropna=False, sort=False).agg(
            ms=("ms_p50", "median"), p20=("ms_p20", "min"), p80=("ms_p80", "max"), times=("ms_p50", "size"),
            status=("status", lambda s: ",".join(sorted(set(map(str, s))))), noisy=("noisy_", "any"),
            peer=("peer", "first")).reset_index()

    ka, kb = keyed(a), keyed(b)
    both = ka.merge(kb, on=keys, suffixes=("_a", "_b")).sort_values(["component", *axes, "variant"])
    labels, whys, los, his, ratios = [], [], [], [], []
    for _, r in both.iterrows():
        lo, ratio, hi = r["p20_b"] / r["p80_a"], r["ms_b"] / r["ms_a"], r["p80_b"] / r["p20_a"]
        bad = [f"{r['status_' + s]} in {s.upper()}" for s in ("a", "b") if r["status_" + s] != "ok"]
        bad += [f"noisy in {s.upper()}" for s in ("a", "b") if r["status_" + s] == "ok" and r["noisy_" + s]]
        bad += [f"measured {r['times_' + s]} times in {s.upper()}" for s in ("a", "b") if r["times_" + s] > 1]
        if bad:
            label, why = "ambiguous", "; ".join(bad)
        elif lo > 1 + tolerance:
            label, why = "slower", f"all of B / A {lo:.3f}–{hi:.3f} is above {1 + tolerance:g}"
        elif hi < 1 - tolerance:
            label, why = "faster", f"all of B / A {lo:.3f}–{hi:.3f} is below {1 - tolerance:g}"
        elif r["p20_a"] <= r["ms_b"] <= r["p80_a"] and r["p20_b"] <= r["ms_a"] <= r["p80_b"]:
            label, why = "same", "each p50 inside the other's p20–p80"
        elif tolerance > 0 and 1 - tolerance <= lo and hi <= 1 + tolerance:
            label, why = "same", f"all of B / A {lo:.3f}–{hi:.3f} within 1 ± {tolerance:g}"
        else:
            label, why = "ambiguous", f"the intervals overlap in part (B / A {lo:.3f}–{hi:.3f})"
        labels.append(label), whys.append(why), los.append(lo), his.append(hi), ratios.append(ratio)
    both = both.assign(label=labels, why=whys, lo=los, hi=his, ratio=ratios)
    return both, len(ka) - len(both), len(kb) - len(both)


def compare_sweeps(a: pd.DataFrame, b: pd.DataFrame, tolerance: float = 0.0) -> str:
    """Markdown: ``compare_rows`` as a table, each shared row's p50 per launch side by side with
    the ratio B / A, its p20-p80 bounds and its label, then how many rows only one side has."""
    from harness.verdicts import truthy

    both, only_a, only_b = compare_rows(a, b, tolerance)
    axes = [c for c in both.columns if c in component_axes(pd.concat([a, b]))]
    rows = [[r["component"], r["variant"] + (" [peer]" if truthy(r["peer_a"]) else ""), *[fmt(r[x]) for x in axes],
             fmt(r["ms_a"] * 1e3, ".2f"), fmt(r["ms_b"] * 1e3, ".2f"), fmt(r["ratio"], ".3f"),
             f"{fmt(r['lo'], '.3f')}–{fmt(r['hi'], '.3f')}", f"**{r['label']}**", r["why"]]
            for _, r in both.iterrows()]
    counts = ", ".join(f"{int((both['label'] == k).sum())} {k}" for k in COMPARE_LABELS)
    n_ok_a, n_ok_b = int((a["status"] == "ok").sum()), int((b["status"] == "ok").sum())
    head = (f"A: {_sweep_label(a)}, {n_ok_a} ok rows · B: {_sweep_label(b)}, {n_ok_b} ok rows\n\n"
            f"µs per launch (p50); B / A below 1 means B is faster. {len(both)} shared rows; "
            f"{only_a} only in A, {only_b} only in B. Labelled from the p20–p80 intervals"
            f"{f' with a tolerance of ±{tolerance:g}' if tolerance else ''}: {counts}.\n\n")
    return head + md_table(["component", "variant", *axes, "A µs", "B µs", "B / A", "B / A p20–p80 bounds",
                            "label", "why"], rows) + "\n"


def chain_lengths(df: pd.DataFrame) -> list[int]:
    """Launches per timed sample (timing.chain) of the ok rows, when any sample ran more than one;
    rows stored before the column existed ran one."""
    if "chain" not in df.columns:
        return []
    values = sorted({int(c) for c in df.loc[df["status"] == "ok", "chain"].dropna()})
    return values if any(c > 1 for c in values) else []


# -- plots --------------------------------------------------------------------------------------------
def reproduce_command(overrides: Sequence[Sequence[str]], skip: Sequence[str] = ()) -> str:
    """One multirun command for a set of jobs: every key the jobs set, with the values they took
    (``component=a M=1,8,32``), less ``skip`` (axes their component does not read)."""
    values: dict[str, list[str]] = {}
    for job in overrides:
        for o in job:
            key, _, value = str(o).partition("=")
            if key.startswith("hydra.") or key in skip:
                continue
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    ordered = sorted(values, key=lambda k: not k.startswith("+"))  # +experiment=... first, as one types it
    return "attnbench -m " + " ".join(f"{k}={','.join(values[k])}" for k in ordered)


def _unread_axes(component: str) -> list[str]:
    from harness import registry

    try:
        return sorted(set(registry.axes()) - set(registry.get(component).axis_names))
    except (KeyError, ValueError):
        return []


def _pinned(df: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    from harness.verdicts import same_value

    for axis, value in where.items():
        if axis not in df.columns:
            return df.iloc[0:0]
        # as a bool mask: an empty frame's mapped column is an object Series, which would index columns
        df = df[df[axis].map(lambda v, value=value: same_value(value, v)).astype(bool)]
    return df


def plot_declared(plot, rows: pd.DataFrame, component: str, roofline_gbps: float | None,
                  path: pathlib.Path, title: str) -> bool:
    """One `registry.Plot` of ``component`` from the sweep's rows (its own, and those of the
    components it is drawn ``beside``): median per launch with the p20-p80 band. False (nothing
    written) when the pinned rows leave fewer than two values of ``x``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ok = rows[rows["status"] == "ok"]
    own = _pinned(ok[ok["component"] == component], dict(plot.where))
    beside = _pinned(ok[ok["component"].isin(plot.beside)], dict(plot.where))
    if own.empty or plot.x not in own.columns or own[plot.x].nunique() < 2:
        return False
    panels = sorted(own[plot.facet].dropna().unique()) if plot.facet else [None]
    fixed = {plot.x, *([plot.facet] if plot.facet else []), *plot.where}
    series = [a for a in component_axes(own) if a not in fixed and own[a].nunique() > 1]

    def values(grp: pd.DataFrame) -> tuple[Any, Any, Any]:
        grp = grp.sort_values(plot.x)
        if plot.y == "us":
            return grp["ms_p50"] * 1e3, grp["ms_p20"] * 1e3, grp["ms_p80"] * 1e3
        rate = grp["bytes"] / 1e6
        return rate / grp["ms_p50"], rate / grp["ms_p80"], rate / grp["ms_p20"]

    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), dpi=110, squeeze=False)
    for ax, value in zip(axes[0], panels):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
        part = own if plot.facet is None else own[own[plot.facet] == value]
        for key, grp in part.groupby(["variant", *series], dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            grp = grp.sort_values(plot.x)
            peer = bool(grp["peer"].iloc[0]) if "peer" in grp else False
            mid, lo, hi = values(grp)
            line, = ax.plot(grp[plot.x], mid, marker="o", ms=3, ls="--" if peer else "-",
                            label=" ".join(str(k) for k in key) + (" [peer]" if peer else ""))
            ax.fill_between(grp[plot.x], lo, hi, color=line.get_color(), alpha=0.15, lw=0)
        side = beside if plot.facet is None or plot.facet not in beside.columns else beside[beside[plot.facet] == value]
        for (comp, variant), grp in side.groupby(["component", "variant"]):
            if bool(grp["peer"].iloc[0]) if "peer" in grp else False:
                continue
            for key, sub in grp.groupby(series, dropna=False) if series and all(a in grp for a in series) else [((), grp)]:
                mid, _, _ = values(sub.sort_values(plot.x))
                ax.plot(sub.sort_values(plot.x)[plot.x], mid, color="k", ls=":", marker="x", ms=4, lw=1.2,
                        label=f"{comp}/{variant}" + (f" {' '.join(map(str, key if isinstance(key, tuple) else (key,)))}" if series else "") + " (floor)")
        if roofline_gbps and plot.roofline and plot.y == "gbps":
            ax.axhline(roofline_gbps, color="k", ls="-.", lw=1, label=f"copy roofline {roofline_gbps:.0f} GB/s")
        xs = part[plot.x].astype(float)
        if xs.max() / max(xs.min(), 1) >= 16:
            ax.set_xscale("log", base=2)
            ticks = sorted(xs.unique())
            ax.set_xticks(ticks, [f"{int(t) // 1024}K" if t >= 8192 and t % 1024 == 0 else f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ys = values(part)[0]
        if plot.y == "us" and len(ys) and ys.max() / max(ys.min(), 1e-9) >= 10:  # peers 10x slower squash ours
            ax.set_yscale("log")
        ax.set_xlabel(plot.x)
        ax.set_ylabel("µs per launch (p50, p20–p80 band)" if plot.y == "us" else "GB/s (bytes read + written)")
        pins = ", ".join(f"{k}={v}" for k, v in plot.where.items())
        ax.set_title(f"{title}" + (f", {plot.facet}={value}" if plot.facet else "") + (f"\n{pins}" if pins else ""),
                     fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def component_plots(df: pd.DataFrame, component: str, roofline_gbps: float | None, stage: pathlib.Path,
                    title: str) -> list[dict[str, str]]:
    """The figures ``component`` declares (`registry.Plot`), drawn from the sweep's rows, each
    ``{"file", "caption"}``; the GB/s plot against the first varying numeric axis when it declares
    none or none can be drawn from these rows."""
    from harness import registry

    try:
        declared = registry.get(component).plots
    except (KeyError, ValueError):  # a component no longer registered (an old store)
        declared = ()
    out = []
    for i, plot in enumerate(declared):
        name = f"{component}-{i + 1}.png"
        if plot_declared(plot, df, component, roofline_gbps, stage / name, f"{component}: {plot.title or plot.y}"):
            pins = ", ".join(f"{k} = {v}" for k, v in plot.where.items())
            what = "µs per launch" if plot.y == "us" else "GB/s"
            caption = (plot.title or f"{what} against {plot.x}") + (f" ({pins})" if pins else "") + (
                f"; beside it, dotted: {', '.join(plot.beside)} (the floor measured in the same sweep)" if plot.beside else "")
            out.append({"file": name, "caption": caption})
    if not out:
        # nothing declared (or drawable here): GB/s against the first numeric axis that varies, a
        # panel per value of the first categorical one, the copy roofline drawn
        ok = df[(df["component"] == component) & (df["status"] == "ok")]
        varying = [a for a in component_axes(ok) if ok[a].nunique() > 1]
        numeric = [a for a in varying if pd.api.types.is_numeric_dtype(ok[a])]
        facets = [a for a in varying if a not in numeric]
        if numeric:
            guess = registry.Plot(x=numeric[0], y="gbps", facet=facets[0] if facets else None, roofline=True)
            if plot_declared(guess, df, component, roofline_gbps, stage / f"{component}.png", title):
                out.append({"file": f"{component}.png", "caption": f"GB/s against {numeric[0]}"})
    return out


# -- the write-up -------------------------------------------------------------------------------------
def report_dir_name(prov: dict[str, Any], sweep: str) -> str:
    """``<date>-<sweep>-<device>-<HHMMSS>``: the measurement's start (UTC) makes the name unique
    per sweep, so a report published from a fresh machine never meets an older one's name."""
    stamp = str(prov["timestamp_utc"])
    return f"{stamp[:10]}-{sweep}-{prov.get('device_short', prov['backend'])}-{stamp[11:19].replace(':', '')}"


def sweep_verdicts(sweep_dir: pathlib.Path, df: pd.DataFrame, metas: list[dict[str, Any]],
                   also: Sequence[pathlib.Path] = (), rules_now: bool = False) -> dict[str, Any]:
    """The experiment's claims decided over this sweep's rows and those of the ``also`` sweeps it
    draws on: ``{"results": [...], "source": where the rules came from, "draws_on": [...]}``.

    The rules are the ones the jobs stored; a store written before claims were rules gets the
    experiment file's current rules (named by the jobs' ``+experiment=``), and says so."""
    from harness import verdicts

    claims = None if rules_now else store.sweep_claims(sweep_dir)
    source = "stored with the sweep's jobs"
    if claims is None:
        name = next((n for m in metas if (n := verdicts.experiment_of(m.get("overrides", [])))), None)
        claims = []
        if name is not None and (verdicts.EXPERIMENTS / "experiment" / f"{name}.yaml").is_file():
            claims = verdicts.experiment_claims(name, load_fuel(DEFAULT_FUEL))
            source = (f"`experiments/experiment/{name}.yaml` as of this render (asked for with --rules-now: "
                      f"the file's rules now, over rows measured before them)" if rules_now else
                      f"`experiments/experiment/{name}.yaml` as of this render (the sweep's jobs stored no "
                      f"rules: they ran before claims were rules)")
    frames = [df] + [store.load_sweep(pathlib.Path(p)) for p in also]
    rows = pd.concat([f for f in frames if len(f)], ignore_index=True)
    draws_on = []
    for frame in frames[1:]:
        if len(frame):
            first = frame.iloc[0]
            draws_on.append({"sweep": str(first["sweep"]), "dir": str(first["sweep_dir"]),
                             "commit": str(first.get("commit") or "unknown"),
                             "device": str(first.get("device") or "?"),
                             "timestamp": str(first.get("timestamp_utc") or "")})
    results = verdicts.evaluate(claims, rows) if claims else []
    return {"results": results, "source": source, "draws_on": draws_on,
            "table": verdicts.verdict_table(results) if results else "",
            "counts": {v: sum(r["verdict"] == v for r in results) for v in verdicts.VERDICTS}}


def _step_budget(metas: list[dict[str, Any]], fuel: Geometry, stage: pathlib.Path,
                 df: pd.DataFrame, published: pd.DataFrame) -> dict[str, Any] | None:
    """``{"text": the "Where the step goes" markdown, "plots": the plots it wrote, "finding": its
    one-sentence finding, "own": priced from this sweep's rows}`` for a sweep whose experiment
    names a ``step_budget``; None when it names none. Priced from this sweep's own rows when they
    hold every part at every M (one run: every ratio inside it), else from ``published`` (the
    published reports' rows)."""
    from harness import budget

    name = next((str(m["step_budget"]) for m in metas if m.get("step_budget")), "")
    if not name:
        return None
    spec = budget.load_budget(name, fuel)
    rows = df.assign(source="this sweep")
    costs = budget.price(spec, rows, fuel)
    own = budget.complete(costs)
    if own:
        intro = ("This sweep's own rows price the step below: every part at every M was measured in "
                 "this run, so every figure and ratio is from one run.\n\n")
    else:
        rows = budget.on_device(published, spec.device)
        costs = budget.price(spec, rows, fuel)
        card = f" {spec.device.upper()}" if spec.device else ""
        intro = (f"The published{card} reports' rows (`reports/`), not this sweep's, price the step below: "
                 "this is what the measurements so far say of the mission's question.\n\n")
    text, plots = budget.section(spec, rows, fuel, stage, prefix="budget-", costs=costs)
    return {"text": text.replace("\n\n", "\n\n" + intro, 1), "plots": plots, "own": own,
            "finding": budget.finding(spec, costs)}


def summary_paragraph(df: pd.DataFrame, verdict: dict[str, Any], step: dict[str, Any] | None, cpu: bool) -> str:
    """The write-up in one paragraph, computed: what was measured, how the rows came out, how the
    claims were decided (by id), and where the step goes."""
    comps = sorted(df["component"].unique())
    counts = df["status"].value_counts()
    noisy = int((df["noisy"].map(lambda v: str(v).lower() in ("true", "1")) & (df["status"] == "ok")).sum())
    text = (f"This sweep measured {len(comps)} component(s) ({', '.join(comps)}) in {len(df)} rows: "
            f"{int(counts.get('ok', 0))} ok ({noisy} of them noisy), {int(counts.get('skipped', 0))} skipped, "
            f"{int(counts.get('failed', 0))} failed{', on the CPU reference backend (smoke figures)' if cpu else ''}.")
    if verdict["results"]:
        by = {v: [r["id"] for r in verdict["results"] if r["verdict"] == v] for v in ("accepted", "rejected", "inconclusive")}
        text += " Of its claims " + "; ".join(f"{len(ids)} {v} ({', '.join(f'`{i}`' for i in ids)})" if ids else f"0 {v}"
                                              for v, ids in by.items()) + "."
    if step and step["finding"]:
        where = "this sweep's rows" if step["own"] else "the published reports' rows"
        text += f" Priced from {where}, {step['finding']}."
    return text


def _experiment_list(metas: list[dict[str, Any]], key: str) -> list[str]:
    """The experiment's list ``key`` (``reopen_if``, ``next_steps``) as its jobs stored it, else
    as its file says now (a store written before the key existed)."""
    import yaml

    from harness import verdicts

    for m in metas:
        if key in m:
            return [str(t) for t in m[key] or []]
    name = next((n for m in metas if (n := verdicts.experiment_of(m.get("overrides", [])))), None)
    path = verdicts.EXPERIMENTS / "experiment" / f"{name}.yaml"
    if name is None or not path.is_file():
        return []
    return [str(t) for t in (yaml.safe_load(path.read_text()) or {}).get(key) or []]


def render_sweep(sweep_dir: pathlib.Path, out_root: pathlib.Path, template: str = "sweep.md.j2",
                 also: Sequence[pathlib.Path] = (), rules_now: bool = False) -> pathlib.Path:
    """Render one sweep; ``also``: other sweeps whose rows its claims draw on (a roofline, say)."""
    sweep_dir = pathlib.Path(sweep_dir)
    prov = store.read_provenance(sweep_dir)
    if prov is None:
        raise FileNotFoundError(f"sweep: {sweep_dir} has no provenance (not a sweep folder)")
    roof = store.read_roofline(sweep_dir)
    df = store.load_sweep(sweep_dir)
    if df.empty:
        raise FileNotFoundError(f"sweep: {sweep_dir} has no stored rows")
    sweep = str(df["sweep"].iloc[0])
    metas = store.job_metas(sweep_dir)
    claim = store.sweep_claim(sweep_dir)
    out = _report_folder(out_root, report_dir_name(prov, sweep), sweep_dir, prov)
    # Everything is written into a staging folder beside it and moved in at the end: a render that
    # fails half-way (a missing column, a full disk) leaves the report folder as it was.
    out_root.mkdir(parents=True, exist_ok=True)
    stage = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out_root))
    try:
        generated = _render_into(stage, out, sweep_dir, prov, roof, df, sweep, metas, claim, template, also, rules_now)
        out.mkdir(parents=True, exist_ok=True)
        for name in generated:
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _record_generated(out, generated, sweep_dir)
    return out / "README.md"


def _render_into(stage: pathlib.Path, out: pathlib.Path, sweep_dir: pathlib.Path, prov, roof, df, sweep: str,
                 metas, claim: str, template: str, also, rules_now: bool = False) -> list[str]:
    """Write one sweep's report files into ``stage``; ``out`` is where they will live (its
    timeline folder, if any, is read from there). Returns the files written."""
    generated: list[str] = ["README.md", "rows.csv", "provenance.json"]
    done = sweep_progress(sweep_dir)
    jobs_line = (f"{done[0]} of {done[1]} planned job(s) stored" if done and done[0] != done[1]
                 else f"{len(metas)} job(s)")
    cpu = prov["backend"] == "cpu"
    sections = []
    for comp, grp in df.groupby("component", sort=True):
        plots = component_plots(df, comp, roof["gbps"] if roof else None, stage, f"{comp} on {prov['device']} ({sweep})")
        jobs = [m.get("overrides", []) for m in metas if str(m.get("component", comp)) == comp]
        sections.append({"component": comp, "table": results_table(grp, cpu),
                         "reproduce": reproduce_command(jobs, _unread_axes(comp)) if jobs else "",
                         "scaling": scaling_table(grp, roof["gbps"] if roof else None),
                         "plots": plots, "n_ok": int((grp["status"] == "ok").sum()), "n": len(grp)})
        generated += [p["file"] for p in plots]
    df.to_csv(stage / "rows.csv", index=False)
    store.atomic_write_json(stage / "provenance.json", prov)  # the store's own format
    if roof:
        store.atomic_write_json(stage / "roofline.json", roof)
        generated.append("roofline.json")
    verdict = sweep_verdicts(sweep_dir, df, metas, also, rules_now)
    fuel = load_fuel(DEFAULT_FUEL)
    from harness import budget

    # read once: the budget and the headline's spread (rows of variants the code no longer has dropped)
    published = budget.priced_rows([REPO_ROOT / "reports"])
    step_budget = _step_budget(metas, fuel, stage, df, published)
    if step_budget:
        generated += step_budget["plots"]
    reopen_conds = reopen.conditions(prov, roof, df, fuel, _experiment_list(metas, "reopen_if"))
    reopen.write(stage, reopen_conds)
    generated.append(reopen.REOPEN)
    text = _env().get_template(template).render(
        verdict=verdict, reopen_if=reopen.describe(reopen_conds), reopen_file=reopen.REOPEN,
        next_steps=_experiment_list(metas, "next_steps"), step_budget=step_budget["text"] if step_budget else "", headline=headline(df, cpu, published),
        finding=step_budget["finding"] if step_budget and step_budget["own"] else "",
        summary=summary_paragraph(df, verdict, step_budget, cpu), geometry=geometry_table(fuel), accounting=accounting_markdown(fuel),
        fuel_sha=fuel.sha256, fuel_is_measured=prov.get("fuel_sha256") == fuel.sha256,
        sweep=sweep, prov=prov, roof=roof, cpu=cpu, sections=sections, claim=claim,
        problems=problems_table(df), notes=notes_table(df), n_jobs=len(metas), jobs_line=jobs_line, n_rows=len(df),
        timeline=timeline_table(out), timeline_dir=TIMELINE_DIR,
        timeline_plot=(out / TIMELINE_DIR / "timeline.png").is_file(),
        chains=chain_lengths(df), graphs=sorted({bool(g) for g in df.loc[df["status"] == "ok", "graph"]}),
        caches=sorted({str(c) for c in df.loc[df["status"] == "ok", "cache"]}),
        overrides=sorted({" ".join(m.get("overrides", [])) for m in metas}),
        store_path=str(sweep_dir), argv=prov.get("argv", ""),
    )
    (stage / "README.md").write_text(text)
    return generated


def sweep_progress(sweep_dir: pathlib.Path) -> tuple[int, int] | None:
    from harness import sweep as sweep_plan

    return sweep_plan.progress(sweep_dir)


_MANIFEST = ".generated"   # files the last render wrote; hand-written notes and store/ are kept
_SOURCE = ".sweep"         # the sweep folder a report folder was rendered from


def _report_folder(out_root: pathlib.Path, name: str, sweep_dir: pathlib.Path, prov: dict[str, Any]) -> pathlib.Path:
    """``out_root / name``, unless that folder holds another sweep's report (two sweeps started in
    the same second): then ``name-2``, ``name-3``, ... instead of overwriting it."""
    out, n = out_root / name, 1
    while (out / _SOURCE).is_file() and (out / _SOURCE).read_text().strip() != sweep_dir.resolve().name:
        n += 1
        out = out_root / f"{name}-{n}"
    return out


def _record_generated(out: pathlib.Path, generated: list[str], sweep_dir: pathlib.Path) -> None:
    """Remove what an earlier render of this folder wrote and this one did not (a plot of a
    component no longer in the sweep), then record this render's files."""
    manifest = out / _MANIFEST
    if manifest.is_file():
        for stale in set(manifest.read_text().split()) - set(generated):
            (out / stale).unlink(missing_ok=True)
    manifest.write_text("\n".join(sorted(generated)) + "\n")
    (out / _SOURCE).write_text(sweep_dir.resolve().name + "\n")
