"""Small synthetic H200 sweeps written through ``harness.store`` (never by hand): rows of the real
kda_decode component with chosen p20 / p50 / p80, for the verdict, compare and reopen tests."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

from harness import store
from harness.fuel import DEFAULT_FUEL, REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "h200_store"
POINT = {"M": 32, "state_dtype": "bf16"}


def row(variant: str, p20: float, p50: float, p80: float, **over: Any) -> dict[str, Any]:
    """One stored row of kda_decode at M = 32, BF16 (``over`` changes any column); times in ms."""
    r = {c: None for c in store.ROW_COLUMNS}
    r.update(sweep="syn", job="0", component="kda_decode", variant=variant, peer=variant.startswith("fla"),
             backend="cuda", device="NVIDIA H200", status="ok", reason="", ms_p20=p20, ms_p50=p50,
             ms_p80=p80, n=100, spread=(p80 - p20) / p50, noisy=False, bytes=64e6, roofline_gbps=4000.0,
             point_axes="M,state_dtype", M=32, state_dtype="bf16", layers=34, rel_err=0.0, graph=True,
             cache="flush", chain=34)
    r.update(over)
    r.update(gbps=r["bytes"] / r["ms_p50"] / 1e6, ms_all_layers=r["ms_p50"] * 34)
    r["roofline_fraction"] = r["gbps"] / r["roofline_gbps"]
    return r


def sweep(root: pathlib.Path, rows: list[dict[str, Any]], name: str = "syn", claims: list | None = None,
          stamp: str = "2026-12-01_10-00-00", meta: dict[str, Any] | None = None, **prov: Any) -> pathlib.Path:
    """A sweep folder under ``root`` holding ``rows`` as one job, with an H200 provenance (the
    fixture store's, at its own commit and time, measured with the current fuel file; ``prov``
    changes any key)."""
    folder = pathlib.Path(root) / f"{stamp}_{name}"
    base = store.read_provenance(store.sweep_dirs(FIXTURES)[0])
    store.write_provenance(folder, {**base, "commit": "c0ffee0" * 6,
                                    "fuel_sha256": hashlib.sha256(DEFAULT_FUEL.read_bytes()).hexdigest(),
                                    "timestamp_utc": f"{stamp[:10]}T{stamp[11:].replace('-', ':')}+00:00", **prov})
    job_meta: dict[str, Any] = {"overrides": [], "point": POINT, **(meta or {})}
    if claims is not None:
        job_meta["claims"] = claims
    store.write_job(folder / "0", [{**r, "sweep": name} for r in rows], job_meta)
    return folder
