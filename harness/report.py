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


def headline(df: pd.DataFrame, cpu: bool) -> list[str]:
    """One line per component, computed from the rows: our fastest ok row at its largest point,
    its µs per launch with the p20–p80 range, GB/s and share of this sweep's roofline."""
    from harness.publish import headlines

    lines = []
    for h in headlines(df):
        r = df[(df["component"] == h["component"]) & (df["variant"] == h["variant"]) & (df["status"] == "ok")]
        r = r.loc[(r["ms_p50"] * 1e3 - h["us"]).abs().idxmin()]
        lines.append(f"{h['component']}: `{h['variant']}` at {h['point']} takes **{h['us']:.2f} µs** per launch "
                     f"(p20–p80 {r['ms_p20'] * 1e3:.2f}–{r['ms_p80'] * 1e3:.2f}), {fmt(h['gbps'], '.0f')} GB/s, "
                     f"{fmt(h['roofline_pct'], '.1f')}% of the copy roofline measured in this sweep"
                     + (" (noisy)" if h["noisy"] else "") + (" — CPU host figures" if cpu else ""))
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
def plot_component(df: pd.DataFrame, roofline_gbps: float | None, path: pathlib.Path, title: str) -> bool:
    """GB/s against the first numeric axis that varies, one line per variant (and other varying
    axes), one panel per value of the first categorical axis that varies (state_dtype, say)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = df[df["status"] == "ok"]
    varying = [a for a in component_axes(ok) if ok[a].nunique() > 1]
    numeric = [a for a in varying if pd.api.types.is_numeric_dtype(ok[a])]
    if ok.empty or not numeric:
        return False
    x = numeric[0]
    facets = [a for a in varying if a not in numeric]
    facet = facets[0] if facets else None
    panels = sorted(ok[facet].unique()) if facet else [None]
    series_keys = [a for a in varying if a not in (x, facet)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.4), dpi=110, squeeze=False)
    for ax, value in zip(axes[0], panels):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more variants than the default 10 colours
        part = ok if facet is None else ok[ok[facet] == value]
        for key, grp in part.groupby(["variant", *series_keys], dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            grp = grp.sort_values(x)
            peer = bool(grp["peer"].iloc[0]) if "peer" in grp else False
            ax.plot(grp[x], grp["gbps"], marker="o", ls="--" if peer else "-",
                    label=" ".join(str(k) for k in key) + (" [peer]" if peer else ""))
        if roofline_gbps:
            ax.axhline(roofline_gbps, color="k", ls=":", lw=1, label=f"copy roofline {roofline_gbps:.0f} GB/s")
        if part[x].max() / max(part[x].min(), 1) >= 16:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x)
        ax.set_ylabel("GB/s (bytes read + written)")
        ax.set_title(title + (f", {facet}={value}" if facet else ""), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# -- the write-up -------------------------------------------------------------------------------------
def report_dir_name(prov: dict[str, Any], sweep: str) -> str:
    """``<date>-<sweep>-<device>-<HHMMSS>``: the measurement's start (UTC) makes the name unique
    per sweep, so a report published from a fresh machine never meets an older one's name."""
    stamp = str(prov["timestamp_utc"])
    return f"{stamp[:10]}-{sweep}-{prov.get('device_short', prov['backend'])}-{stamp[11:19].replace(':', '')}"


def sweep_verdicts(sweep_dir: pathlib.Path, df: pd.DataFrame, metas: list[dict[str, Any]],
                   also: Sequence[pathlib.Path] = ()) -> dict[str, Any]:
    """The experiment's claims decided over this sweep's rows and those of the ``also`` sweeps it
    draws on: ``{"results": [...], "source": where the rules came from, "draws_on": [...]}``.

    The rules are the ones the jobs stored; a store written before claims were rules gets the
    experiment file's current rules (named by the jobs' ``+experiment=``), and says so."""
    from harness import verdicts

    claims = store.sweep_claims(sweep_dir)
    source = "stored with the sweep's jobs"
    if claims is None:
        name = next((n for m in metas if (n := verdicts.experiment_of(m.get("overrides", [])))), None)
        claims = []
        if name is not None and (verdicts.EXPERIMENTS / "experiment" / f"{name}.yaml").is_file():
            claims = verdicts.experiment_claims(name, load_fuel(DEFAULT_FUEL))
            source = (f"`experiments/experiment/{name}.yaml` as of this render (the sweep's jobs stored no "
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


def _step_budget(metas: list[dict[str, Any]], fuel: Geometry, stage: pathlib.Path) -> tuple[str, str] | None:
    """(the "Where the step goes" markdown, its plot's file name) for a sweep whose experiment names
    a ``step_budget``, priced from the published reports' rows; None when it names none."""
    from harness import budget

    name = next((str(m["step_budget"]) for m in metas if m.get("step_budget")), "")
    if not name:
        return None
    spec = budget.load_budget(name, fuel)
    costs = budget.price(spec, budget.published_rows(REPO_ROOT / "reports"), fuel)
    plot = f"budget-{spec.name}.png"
    has_plot = budget.plot_budget(spec, costs, stage / plot)
    text = budget.markdown(spec, costs, plot if has_plot else None)
    intro = ("The published H200 reports' rows (`reports/`), not this sweep's, price the step below: "
             "this is what the measurements so far say of the mission's question.\n\n")
    return text.replace("\n\n", "\n\n" + intro, 1), plot


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
                 also: Sequence[pathlib.Path] = ()) -> pathlib.Path:
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
        generated = _render_into(stage, out, sweep_dir, prov, roof, df, sweep, metas, claim, template, also)
        out.mkdir(parents=True, exist_ok=True)
        for name in generated:
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _record_generated(out, generated, sweep_dir)
    return out / "README.md"


def _render_into(stage: pathlib.Path, out: pathlib.Path, sweep_dir: pathlib.Path, prov, roof, df, sweep: str,
                 metas, claim: str, template: str, also) -> list[str]:
    """Write one sweep's report files into ``stage``; ``out`` is where they will live (its
    timeline folder, if any, is read from there). Returns the files written."""
    generated: list[str] = ["README.md", "rows.csv", "provenance.json"]
    done = sweep_progress(sweep_dir)
    jobs_line = (f"{done[0]} of {done[1]} planned job(s) stored" if done and done[0] != done[1]
                 else f"{len(metas)} job(s)")
    cpu = prov["backend"] == "cpu"
    sections = []
    for comp, grp in df.groupby("component", sort=True):
        plot_name = f"{comp}.png"
        has_plot = plot_component(grp, roof["gbps"] if roof else None, stage / plot_name,
                                  f"{comp} on {prov['device']} ({sweep})")
        sections.append({"component": comp, "table": results_table(grp, cpu),
                         "scaling": scaling_table(grp, roof["gbps"] if roof else None),
                         "plot": plot_name if has_plot else None,
                         "n_ok": int((grp["status"] == "ok").sum()), "n": len(grp)})
        if has_plot:
            generated.append(plot_name)
    df.to_csv(stage / "rows.csv", index=False)
    store.atomic_write_json(stage / "provenance.json", prov)  # the store's own format
    if roof:
        store.atomic_write_json(stage / "roofline.json", roof)
        generated.append("roofline.json")
    verdict = sweep_verdicts(sweep_dir, df, metas, also)
    fuel = load_fuel(DEFAULT_FUEL)
    step_budget = _step_budget(metas, fuel, stage)
    if step_budget and (stage / step_budget[1]).is_file():
        generated.append(step_budget[1])
    reopen_conds = reopen.conditions(prov, roof, df, fuel, _experiment_list(metas, "reopen_if"))
    reopen.write(stage, reopen_conds)
    generated.append(reopen.REOPEN)
    text = _env().get_template(template).render(
        verdict=verdict, reopen_if=reopen.describe(reopen_conds), reopen_file=reopen.REOPEN,
        next_steps=_experiment_list(metas, "next_steps"), step_budget=step_budget[0] if step_budget else "", headline=headline(df, cpu), geometry=geometry_table(fuel), accounting=accounting_markdown(fuel),
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
