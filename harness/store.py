"""The results store: one folder per sweep, one per job; rows as parquet plus a metadata file.

This module is the one owner of every stored file: the runner writes through it and the report,
compare and publish steps read through it; nothing else opens a store's files by name.

Layout (the Hydra output directories, see experiments/hydra/output/store.yaml)::

    <root>/<YYYY-mm-dd_HH-MM-SS>_<sweep>/      a sweep
        provenance.json                         captured once per sweep
        roofline.json                           the copy bandwidth measured once per sweep
        <job>/rows.parquet, <job>/meta.json     one job: its rows and its metadata

Every file is written atomically (write to a temporary name in the same folder, then rename), so
a reader never sees half a table and a failed job leaves no rows behind (Hydra's own .hydra/ and
log files may remain; a sweep with no rows is not listed by `sweep_dirs`).
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import warnings
from typing import Any, Iterable

import pandas as pd

# The rows' layout: 1 (unversioned, until 2026-11-29) had no schema_version, point_axes, ref_sample,
# checks or resident_bytes columns; 2 adds them (a loaded version-1 row gets point_axes from its
# job's meta.json, ref_sample "all", checks "", resident_bytes 0).
SCHEMA_VERSION = 2

# Columns every row has, in this order; component axes follow them (named in ``point_axes``).
ROW_COLUMNS = [
    "schema_version", "sweep", "job", "component", "variant", "peer", "backend", "device", "status", "reason",
    "ms_p50", "ms_p20", "ms_p80", "ms_min", "n", "spread", "noisy", "stop_reason",
    "bytes", "flops", "gbps", "gflops", "roofline_gbps", "roofline_fraction",
    "layers", "ms_all_layers", "rel_err", "tolerance", "errors", "checks", "ref_sample", "point_axes", "resident_bytes",
    "clock", "cache", "graph",
    "sm_clock_mhz_before", "sm_clock_mhz_after", "mem_clock_mhz_before", "mem_clock_mhz_after",
    "throttle_before", "throttle_after",
]
STATUSES = ("ok", "skipped", "failed")

# Provenance keys copied onto every loaded row.
PROVENANCE_COLUMNS = [
    "commit", "dirty", "branch", "device_short", "driver_version", "cuda_driver_version",
    "cuda_runtime_version", "timestamp_utc", "host", "fuel_sha256",
]


def atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: pathlib.Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def rows_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    rows = [{**r, "schema_version": SCHEMA_VERSION} for r in rows]
    for r in rows:
        missing = [c for c in ROW_COLUMNS if c not in r]
        if missing:
            raise ValueError(f"row for {r.get('variant')!r} lacks columns {missing}")
        if r["status"] not in STATUSES:
            raise ValueError(f"status: {r['status']!r}; allowed: {', '.join(STATUSES)}")
    df = pd.DataFrame(rows)
    extra = [c for c in df.columns if c not in ROW_COLUMNS]
    return df[ROW_COLUMNS + extra]


def write_job(job_dir: pathlib.Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> pathlib.Path:
    """Write one job's rows (parquet) and metadata (json), each atomically; rows first so that a
    meta.json never points at missing rows."""
    df = rows_frame(rows)
    job_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".rows.", suffix=".parquet", dir=job_dir)
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, job_dir / ROWS)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write_json(job_dir / META, meta)
    return job_dir / ROWS


def read_job_rows(job_dir: pathlib.Path) -> list[dict[str, Any]]:
    """One stored job's rows as dicts (what run_job returned when it stored them)."""
    return pd.read_parquet(pathlib.Path(job_dir) / ROWS).to_dict("records")


PROVENANCE = "provenance.json"
ROOFLINE = "roofline.json"
META = "meta.json"
ROWS = "rows.parquet"


def _read_json(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def write_provenance(sweep_dir: pathlib.Path, prov: dict[str, Any]) -> None:
    atomic_write_json(pathlib.Path(sweep_dir) / PROVENANCE, prov)


def read_provenance(sweep_dir: pathlib.Path) -> dict[str, Any] | None:
    """The sweep's provenance, or None before its first job captured it."""
    path = pathlib.Path(sweep_dir) / PROVENANCE
    return _read_json(path) if path.is_file() else None


def write_roofline(sweep_dir: pathlib.Path, roof: dict[str, Any]) -> None:
    atomic_write_json(pathlib.Path(sweep_dir) / ROOFLINE, roof)


def read_roofline(sweep_dir: pathlib.Path) -> dict[str, Any] | None:
    """The sweep's measured copy ceiling, or None where none was measured."""
    path = pathlib.Path(sweep_dir) / ROOFLINE
    return _read_json(path) if path.is_file() else None


def job_metas(sweep_dir: pathlib.Path) -> list[dict[str, Any]]:
    """Every stored job's metadata, in job order."""
    paths = sorted(pathlib.Path(sweep_dir).glob(f"*/{META}"), key=lambda p: _job_key(p.parent.name))
    return [_read_json(p) for p in paths]


def sweep_claim(sweep_dir: pathlib.Path) -> str:
    """The experiment's claim: stored in every job's meta.json; stores written before it was
    read it from the first job's Hydra config dump."""
    for meta in job_metas(sweep_dir):
        if "claim" in meta:
            return str(meta["claim"] or "")
    import yaml

    for cfg_path in sorted(pathlib.Path(sweep_dir).glob("*/.hydra/config.yaml")):
        cfg = yaml.safe_load(cfg_path.read_text()) or {}
        return str(cfg.get("claim") or "")
    return ""


def sweep_claims(sweep_dir: pathlib.Path) -> list[dict[str, Any]] | None:
    """The experiment's rules (``claims``) as its jobs stored them in meta.json, or None when no
    job stored any (a store written before claims were rules)."""
    for meta in job_metas(sweep_dir):
        if "claims" in meta:
            return list(meta["claims"] or [])
    return None


def sweep_dirs(root: str | pathlib.Path) -> list[pathlib.Path]:
    """Sweeps under ``root`` that stored at least one job's rows, oldest first. A sweep whose
    every job failed before writing rows (its provenance.json only) is not listed."""
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and (p / PROVENANCE).is_file() and any(p.glob(f"*/{ROWS}")))


def find_sweep(root: str | pathlib.Path, name: str) -> pathlib.Path:
    """A sweep by path, folder name, ``latest``, or the newest sweep whose name ends in ``_<name>``."""
    as_path = pathlib.Path(name)
    if (as_path / PROVENANCE).is_file():
        return as_path
    sweeps = sweep_dirs(root)
    if not sweeps:
        raise FileNotFoundError(f"sweep: no sweeps under {root}")
    if name == "latest":
        return sweeps[-1]
    matches = [s for s in sweeps if s.name == name or s.name.endswith("_" + name)]
    if not matches:
        names = sorted({s.name.split("_", 2)[-1] for s in sweeps})
        raise FileNotFoundError(f"sweep: no sweep {name!r} under {root}; allowed: latest, {', '.join(names)}")
    return matches[-1]


def load_sweep(sweep_dir: pathlib.Path) -> pd.DataFrame:
    """All rows of one sweep with the sweep's provenance columns (older rows brought to the
    current schema's columns)."""
    sweep_dir = pathlib.Path(sweep_dir)
    prov = read_provenance(sweep_dir) or {}
    frames = []
    for rows_path in sorted(sweep_dir.glob(f"*/{ROWS}"), key=lambda p: _job_key(p.parent.name)):
        meta_path = rows_path.parent / META
        try:
            df = pd.read_parquet(rows_path)
            meta = _read_json(meta_path) if meta_path.is_file() else {}
        except Exception as exc:  # one corrupt job must not hide every other job of the store
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            warnings.warn(f"store: skipping job {rows_path.parent} (unreadable: {first[:200]})", stacklevel=2)
            continue
        df["overrides"] = " ".join(meta.get("overrides", []))
        if "schema_version" not in df.columns:  # version 1
            df["schema_version"] = 1
            df["point_axes"] = ",".join(meta.get("point", {}))
            df["ref_sample"] = "all"
            df["checks"] = ""
            df["resident_bytes"] = 0
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=ROW_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    for key in PROVENANCE_COLUMNS:
        out[key] = prov.get(key)
    out["sweep_dir"] = str(sweep_dir)
    return out


def load(root: str | pathlib.Path = "results") -> pd.DataFrame:
    """Every stored job under ``root`` as one DataFrame, each row with its provenance columns."""
    frames = [load_sweep(s) for s in sweep_dirs(root)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ROW_COLUMNS)


def _v1_point_axes(columns: list[str]) -> list[str]:
    """A version-1 table's point axes: its writer put every row's fixed columns first (ending at
    ``throttle_after``), then ``source_sha`` and ``chain`` where that version had them, then the
    point; loading added ``overrides`` and the provenance after them."""
    if "throttle_after" not in columns:
        return []
    after = columns[columns.index("throttle_after") + 1:]
    after = after[:after.index("overrides")] if "overrides" in after else after
    return [c for c in after if c not in ("source_sha", "chain")]


def read_rows_table(path: str | pathlib.Path) -> pd.DataFrame:
    """A published report's ``rows.csv`` (what ``load_sweep`` returned when it was rendered),
    brought to the current schema's columns like a stored version-1 row."""
    df = pd.read_csv(path)
    if "schema_version" not in df.columns:
        df["schema_version"] = 1
        df["point_axes"] = ",".join(_v1_point_axes(list(df.columns)))
        df["ref_sample"] = "all"
        df["checks"] = ""
        df["resident_bytes"] = 0
    return df


def point_axes(df: pd.DataFrame) -> list[str]:
    """The point axes these rows name (``point_axes``), in first-seen order."""
    if "point_axes" not in df.columns:
        return []
    seen: list[str] = []
    for value in df["point_axes"].dropna().unique():
        for name in str(value).split(","):
            if name and name not in seen and name in df.columns:
                seen.append(name)
    return seen


def _job_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)
