"""The results store: one folder per sweep, one per job; rows as parquet plus a metadata file.

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
from typing import Any, Iterable

import pandas as pd

# Columns every row has, in this order; component axes follow them.
ROW_COLUMNS = [
    "sweep", "job", "component", "variant", "peer", "backend", "device", "status", "reason",
    "ms_p50", "ms_p20", "ms_p80", "ms_min", "n", "spread", "noisy", "stop_reason",
    "bytes", "flops", "gbps", "gflops", "roofline_gbps", "roofline_fraction",
    "layers", "ms_all_layers", "rel_err", "tolerance", "errors",
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
    rows = list(rows)
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
        os.replace(tmp, job_dir / "rows.parquet")
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write_json(job_dir / "meta.json", meta)
    return job_dir / "rows.parquet"


def sweep_dirs(root: str | pathlib.Path) -> list[pathlib.Path]:
    """Sweeps under ``root`` that stored at least one job's rows, oldest first. A sweep whose
    every job failed before writing rows (its provenance.json only) is not listed."""
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and (p / "provenance.json").is_file() and any(p.glob("*/rows.parquet")))


def find_sweep(root: str | pathlib.Path, name: str) -> pathlib.Path:
    """A sweep by path, folder name, ``latest``, or the newest sweep whose name ends in ``_<name>``."""
    as_path = pathlib.Path(name)
    if (as_path / "provenance.json").is_file():
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
    """All rows of one sweep with the sweep's provenance columns."""
    prov = json.loads((sweep_dir / "provenance.json").read_text())
    frames = []
    for rows_path in sorted(sweep_dir.glob("*/rows.parquet"), key=lambda p: _job_key(p.parent.name)):
        df = pd.read_parquet(rows_path)
        meta_path = rows_path.parent / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        df["overrides"] = " ".join(meta.get("overrides", []))
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


def _job_key(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)
