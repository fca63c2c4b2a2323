"""Publishing: a rendered report's reader files copied into the committed ``reports/``, and its index.

``attnbench report SWEEP`` renders beside the store (``<store root>/reports/<name>/``, ignored by
git); ``attnbench publish REPORT_DIR`` is the explicit step that puts a report in git:

- it copies what a reader needs (``READER_FILES``, the component plots, the timeline summaries a
  tool left under ``timeline*/`` and any other file of the folder its ``FINDINGS.md`` names by
  path) into ``reports/<same name>/``, never a store's parquet, metadata or Hydra files;
- the folder is written under a temporary name and renamed, so it is whole or absent;
- a folder of that name holding a different report (another ``provenance.json``) is refused
  unless ``force``; the same report (a re-render, a new FINDINGS.md) replaces its older copy;
- then ``reports/README.md``, the index, is generated again from every published folder's
  ``provenance.json`` and ``rows.csv`` (``index_markdown``; a test keeps it current).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import pathlib
import shutil
import tempfile
from typing import Any

import pandas as pd

from harness import store
from harness.fuel import REPO_ROOT

REPORTS = REPO_ROOT / "reports"
INDEX = "README.md"
REQUIRED = ("README.md", "rows.csv", "provenance.json")
# Top-level files a reader needs, when the render (or a person) wrote them; plus every *.png there.
READER_FILES = ("README.md", "FINDINGS.md", "rows.csv", "provenance.json", "roofline.json", "reopen.json",
                "gpu_tests.txt")
# Under a folder named timeline* (tools/kda_timeline.py's --out, kept beside a report): its summary,
# plot, per-layer chain table and printed output; the per-CTA and per-tile CSVs stay behind unless
# FINDINGS.md names them.
TIMELINE_PATTERNS = ("summary.csv", "timeline.png", "*_chain.csv", "*_output.txt", "README.txt")
# Never published, whatever a FINDINGS.md says: a results store and the render's own markers.
STORE_NAMES = ("rows.parquet", "meta.json", "multirun.yaml", ".generated", ".sweep")
STORE_DIRS = ("store", ".hydra")
BUDGET = "budget"           # attnbench budget --out reports/budget: the cross-report step budget
NOT_REPORTS = ("templates", BUDGET)


class PublishError(Exception):
    """A refusal, stated in one line."""


# -- what a report folder publishes --------------------------------------------------------------
def is_store_file(rel: pathlib.PurePath) -> bool:
    """A raw store's file (parquet, job metadata, Hydra's dumps, logs) or a render marker: never published."""
    return (rel.name in STORE_NAMES or rel.suffix == ".parquet" or rel.name.endswith(".log")
            or any(part in STORE_DIRS for part in rel.parts[:-1]))


def reader_files(report_dir: pathlib.Path) -> list[pathlib.PurePosixPath]:
    """The paths, relative to ``report_dir``, that ``publish`` copies (sorted)."""
    report_dir = pathlib.Path(report_dir)
    picked: set[pathlib.PurePosixPath] = set()
    for name in READER_FILES:
        if (report_dir / name).is_file():
            picked.add(pathlib.PurePosixPath(name))
    picked |= {pathlib.PurePosixPath(p.name) for p in report_dir.glob("*.png") if p.is_file()}
    files = [pathlib.PurePosixPath(p.relative_to(report_dir).as_posix())
             for p in report_dir.rglob("*") if p.is_file()]
    files = [f for f in files if not is_store_file(f)]
    for f in files:
        if len(f.parts) > 1 and f.parts[0].startswith("timeline") and any(
                fnmatch.fnmatch(f.name, pat) for pat in TIMELINE_PATTERNS):
            picked.add(f)
    findings = report_dir / "FINDINGS.md"
    if findings.is_file():
        text = findings.read_text()
        picked |= {f for f in files if str(f) in text}
    return sorted(picked)


def _read_provenance(folder: pathlib.Path) -> dict[str, Any]:
    return json.loads((folder / "provenance.json").read_text())


def _check_report(report_dir: pathlib.Path) -> None:
    if not report_dir.is_dir():
        raise PublishError(f"publish: {report_dir} is not a folder; allowed: a rendered report folder "
                           f"(attnbench report prints its path)")
    if (report_dir / "provenance.json").is_file() and any(report_dir.glob("*/rows.parquet")):
        raise PublishError(f"publish: {report_dir} is a results store (a sweep), not a report; "
                           f"render it first: attnbench report {report_dir}")
    missing = [n for n in REQUIRED if not (report_dir / n).is_file()]
    if missing:
        raise PublishError(f"publish: {report_dir} lacks {', '.join(missing)}; allowed: a folder "
                           f"rendered by attnbench report")


def _describe(prov: dict[str, Any]) -> str:
    return f"measured {prov.get('timestamp_utc', '?')} at {str(prov.get('commit', 'unknown'))[:7]}"


def publish(report_dir: str | pathlib.Path, reports_root: str | pathlib.Path = REPORTS,
            force: bool = False) -> pathlib.Path:
    """Copy ``report_dir``'s reader files into ``reports_root/<its name>/`` (whole or absent) and
    regenerate the index. Returns the published folder."""
    report_dir = pathlib.Path(report_dir)
    if report_dir.is_file() and report_dir.name == "README.md":
        report_dir = report_dir.parent
    _check_report(report_dir)
    reports_root = pathlib.Path(reports_root)
    dest = reports_root / report_dir.name
    if dest.resolve() == report_dir.resolve():
        raise PublishError(f"publish: {report_dir} is already the published copy; allowed: a rendered "
                           f"report outside {reports_root}")
    new_prov = _read_provenance(report_dir)
    if dest.exists() and not force:
        old_prov = _read_provenance(dest) if (dest / "provenance.json").is_file() else None
        if old_prov != new_prov:
            what = _describe(old_prov) if old_prov else "no provenance.json"
            raise PublishError(f"publish: {dest} holds a different report ({what}; this one "
                               f"{_describe(new_prov)}); pass --force to replace it")
    reports_root.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=reports_root))
    old = None
    try:
        for rel in reader_files(report_dir):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(report_dir / rel, target)
        os.chmod(tmp, 0o755)  # a committed folder (mkdtemp makes it 0700)
        if dest.exists():
            old = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=reports_root))
            os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
    except BaseException:
        if old is not None and (old / dest.name).exists() and not dest.exists():
            os.replace(old / dest.name, dest)
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    write_index(reports_root)
    return dest


# -- the index ----------------------------------------------------------------------------------------
def published(reports_root: str | pathlib.Path = REPORTS) -> list[pathlib.Path]:
    """Published report folders (those with a provenance.json), newest measurement first."""
    root = pathlib.Path(reports_root)
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
               and p.name not in NOT_REPORTS and (p / "provenance.json").is_file()]
    stamped = [(str(_read_provenance(p).get("timestamp_utc", "")), p.name, p) for p in folders]
    return [p for _, _, p in sorted(stamped, reverse=True)]


def _num(value: Any, spec: str) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(v) else format(v, spec)


def _point(row: pd.Series, axes: list[str]) -> str:
    parts = []
    for a in axes:
        v = row[a]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        parts.append(f"{a}={v}")
    return " ".join(parts)


def headlines(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per component (sorted): the fastest of our ok rows (not a peer's) at the component's largest
    point by bytes moved, with its µs per launch, GB/s and fraction of the sweep's roofline."""
    from harness.report import component_axes

    peer = rows["peer"].fillna(False).astype(str).str.lower().isin(("true", "1")) if "peer" in rows else False
    ours = rows[(rows["status"] == "ok") & ~peer & rows["ms_p50"].notna()]
    out = []
    for comp, grp in ours.groupby("component", sort=True):
        biggest = grp[grp["bytes"] == grp["bytes"].max()]
        best = biggest.loc[biggest["ms_p50"].idxmin()]
        axes = component_axes(biggest)
        out.append({"component": str(comp), "variant": str(best["variant"]), "point": _point(best, axes),
                    "us": float(best["ms_p50"]) * 1e3, "gbps": best.get("gbps"),
                    "roofline_pct": float(best["roofline_fraction"]) * 100
                    if best.get("roofline_fraction") == best.get("roofline_fraction") else float("nan"),
                    "noisy": str(best.get("noisy")).lower() in ("true", "1")})
    return out


def _headline_cell(rows: pd.DataFrame, cpu: bool) -> str:
    heads = headlines(rows)
    if not heads:
        return "no ok row of ours"
    cells = []
    for h in heads:
        cells.append(f"{h['component']}: `{h['variant']}` at {h['point']}: {h['us']:.2f} µs/layer, "
                     f"{_num(h['gbps'], '.0f')} GB/s, {_num(h['roofline_pct'], '.1f')}% of roofline"
                     + (" (noisy)" if h["noisy"] else "") + (" (CPU host)" if cpu else ""))
    return "<br>".join(cells)


def _reopen_cell(state: dict[str, Any]) -> str:
    if state["reasons"]:
        return "**reopened**: " + "; ".join(state["reasons"])
    return "no"


INDEX_HEADER = """\
# Published reports

Generated by `python3 -m harness publish --index-only` (and by every `publish`) from each folder's
`provenance.json` and `rows.csv`; do not edit it by hand (`tests/test_committed_reports.py` fails when
it is stale). Newest measurement first.

**Headline.** Per component of the sweep: among our own rows (not a peer's such as fla or torch)
with status ok, those at the sweep's largest point by bytes moved (the largest `bytes`; e.g. the
largest M and the widest state dtype), and of those the fastest (lowest p50). It gives the µs per
launch (per layer; in a `timing.chain` sweep a launch within the chain), the GB/s (bytes read plus
written) and the percentage of the copy roofline measured in that sweep. It is a pointer, not a
summary: a sweep's question and its answer are in its README and FINDINGS.

**Reopened by the fuel.** Whether the committed fuel no longer matches the one a report was
measured with (its fact values, a fact's `established` flag, or for a report that recorded no
values its file): the report's own "Reopen if" lists every condition, and
`python3 -m harness reopen-check --store results` also holds them against newer runs in a store
(another driver or CUDA, a copy roofline moved by more than 5%, a changed kernel source).

A folder holds what a reader needs: `README.md` (setup with commit and command, every row's table,
how to reproduce), `FINDINGS.md` where written, `rows.csv`, `provenance.json`, `roofline.json`,
`reopen.json` (its reopen conditions, where recorded), the
plots, `gpu_tests.txt` where the GPU tests ran, tool summaries it cites (`timeline*/`). The raw stores
stay with the run that made them (`results/`, not in git).

Render a sweep with `python3 -m harness report SWEEP` (it writes `results/reports/<name>/`), then
publish it here with `python3 -m harness publish results/reports/<name>`.

"""


def index_markdown(reports_root: str | pathlib.Path = REPORTS) -> str:
    """The index of ``reports_root``: one row per published folder, newest first."""
    from harness.report import md_table

    from harness import reopen
    from harness.fuel import DEFAULT_FUEL, load_fuel

    geometry = load_fuel(DEFAULT_FUEL)
    lines = []
    for folder in published(reports_root):
        prov = _read_provenance(folder)
        rows = store.read_rows_table(folder / "rows.csv")
        sweep = str(rows["sweep"].iloc[0]) if len(rows) and "sweep" in rows else folder.name
        commit = str(prov.get("commit") or "unknown")
        commit = commit[:7] + (" (dirty)" if prov.get("dirty") else "") + (" (dirty: unknown)" if prov.get("dirty") is None else "")
        link = f"[`{folder.name}`]({folder.name}/README.md)"
        if (folder / "FINDINGS.md").is_file():
            link += f" · [FINDINGS]({folder.name}/FINDINGS.md)"
        lines.append([str(prov.get("timestamp_utc", ""))[:16].replace("T", " "), f"`{sweep}`",
                      str(prov.get("device", prov.get("device_short", prov.get("backend", "?")))),
                      f"`{commit}`", _headline_cell(rows, prov.get("backend") == "cpu"),
                      _reopen_cell(reopen.check(folder, geometry)), link])
    table = md_table(["measured (UTC)", "sweep", "device", "commit", "headline", "reopened by the fuel", "report"], lines)
    budget = pathlib.Path(reports_root) / BUDGET / "README.md"
    where = (f"**Where the decode step goes** across these reports (KDA, sparse MLA and the indexer per "
             f"step at each M, every figure with its report): [`{BUDGET}/README.md`]({BUDGET}/README.md), "
             f"generated by `python3 -m harness budget --out reports/{BUDGET}`.\n\n") if budget.is_file() else ""
    return INDEX_HEADER + where + (table if lines else "No report is published yet.") + "\n"


def write_index(reports_root: str | pathlib.Path = REPORTS) -> pathlib.Path:
    path = pathlib.Path(reports_root) / INDEX
    store.atomic_write_bytes(path, index_markdown(reports_root).encode())
    os.chmod(path, 0o644)  # a committed file, readable like the rest (mkstemp makes it 0600)
    return path
