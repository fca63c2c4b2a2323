"""Reopen conditions: what would make a published write-up's findings stale, recorded and checked.

Each report folder records its conditions in ``reopen.json`` when it is rendered (``conditions``):

- ``fuel_geometry``: the sha256 of the fuel's fact values (``geometry_sha256``; comments and
  sources do not count) and each fact's ``established`` flag: a changed value or a flipped flag
  reopens it;
- ``software``: the driver, CUDA driver and CUDA runtime versions the rows were measured with;
- ``copy_bandwidth``: the sweep's measured copy roofline and the fraction it may move by
  (``BANDWIDTH_FRACTION``) before every "% roofline" of the write-up is in question;
- ``kernel_sources``: each measured variant's source hash (the rows' ``source_sha``);
- ``manual``: what the experiment says to re-examine by hand (``reopen_if`` in its YAML); never
  checked by a machine, listed as such.

``check`` holds a folder's conditions against the current fuel and against newer sweeps of the
same device in a store: a newer run measured with another driver or CUDA, a roofline that moved by
more than the fraction, or a variant whose source hash changed reopens the write-up, with the run
that did. A folder published before ``reopen.json`` existed gets the conditions its
``provenance.json``, ``roofline.json`` and ``rows.csv`` imply (``derived``): its fuel by file hash,
exact when that file is the current fuel.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from typing import Any, Sequence

import pandas as pd

from harness import store
from harness.fuel import REPO_ROOT, Geometry

REOPEN = "reopen.json"
BANDWIDTH_FRACTION = 0.05   # a copy roofline moved by more than 5% reopens every "% roofline"
SOFTWARE_KEYS = ("driver_version", "cuda_driver_version", "cuda_runtime_version")


def geometry_sha256(g: Geometry) -> str:
    """The sha256 of the fuel's fact values (key: value, sorted): what the accounting reads."""
    values = {k: f.value for k, f in sorted(g.facts.items())}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def _sources(rows: pd.DataFrame) -> dict[str, str]:
    """``component/variant`` -> the source hash of its ok rows (the first one seen)."""
    if "source_sha" not in rows.columns:
        return {}
    ok = rows[(rows["status"] == "ok") & rows["source_sha"].notna()]
    out: dict[str, str] = {}
    for _, r in ok.iterrows():
        out.setdefault(f"{r['component']}/{r['variant']}", str(r["source_sha"]))
    return dict(sorted(out.items()))


@functools.lru_cache(maxsize=64)
def fuel_in_history(sha256: str | None, path: str = "fuels/glm-5.3-flash/attention.yaml") -> Geometry | None:
    """The fuel whose file hash is ``sha256``, found in the repository's history (the file as some
    commit held it), or None: what a write-up measured with an older fuel was measured against."""
    import subprocess
    import tempfile

    from harness.fuel import FuelError, load_fuel

    if not sha256:
        return None
    try:
        commits = subprocess.run(["git", "log", "--format=%H", "--", path], cwd=REPO_ROOT, capture_output=True,
                                 text=True, timeout=20).stdout.split()
        for commit in commits[:200]:
            blob = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO_ROOT, capture_output=True,
                                  timeout=20).stdout
            if hashlib.sha256(blob).hexdigest() == sha256:
                with tempfile.NamedTemporaryFile(suffix=".yaml") as fh:
                    fh.write(blob)
                    fh.flush()
                    return load_fuel(fh.name)
    except (OSError, subprocess.SubprocessError, FuelError):
        return None
    return None


def conditions(prov: dict[str, Any], roof: dict[str, Any] | None, rows: pd.DataFrame, geometry: Geometry,
               manual: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The machine-checkable reopen conditions of rows measured under ``prov`` with ``roof``, plus
    the manual ones. ``geometry`` is the current fuel: when it is the file the rows were measured
    with, its fact values and flags are recorded; otherwise that file is looked up in the
    repository's history by its hash, and only its hash is known where it is not found."""
    measured = geometry if prov.get("fuel_sha256") == geometry.sha256 else fuel_in_history(prov.get("fuel_sha256"))
    out: list[dict[str, Any]] = [{
        "kind": "fuel_geometry", "fuel_sha256": prov.get("fuel_sha256"),
        "geometry_sha256": geometry_sha256(measured) if measured else None,
        "established": {k: f.established for k, f in sorted(measured.facts.items())} if measured else None,
    }]
    if any(prov.get(k) is not None for k in SOFTWARE_KEYS):  # a CPU sweep records no driver
        out.append({"kind": "software", "device_short": prov.get("device_short"),
                    **{k: prov.get(k) for k in SOFTWARE_KEYS}})
    if roof and roof.get("gbps"):
        out.append({"kind": "copy_bandwidth", "gbps": float(roof["gbps"]), "fraction": BANDWIDTH_FRACTION,
                    "variant": roof.get("variant")})
    sources = _sources(rows)
    if sources:
        out.append({"kind": "kernel_sources", "sources": sources})
    out += [{"kind": "manual", "text": str(t)} for t in manual]
    return out


def derived(folder: pathlib.Path, geometry: Geometry) -> list[dict[str, Any]]:
    """Conditions for a folder published without ``reopen.json``, from its published files."""
    folder = pathlib.Path(folder)
    prov = json.loads((folder / "provenance.json").read_text())
    roof_path = folder / "roofline.json"
    roof = json.loads(roof_path.read_text()) if roof_path.is_file() else None
    return conditions(prov, roof, store.read_rows_table(folder / "rows.csv"), geometry)


def recorded(folder: pathlib.Path, geometry: Geometry) -> tuple[list[dict[str, Any]], bool]:
    """(the folder's conditions, whether it recorded them itself)."""
    path = pathlib.Path(folder) / REOPEN
    if path.is_file():
        return json.loads(path.read_text())["conditions"], True
    return derived(folder, geometry), False


def write(folder: pathlib.Path, conds: list[dict[str, Any]]) -> None:
    store.atomic_write_json(pathlib.Path(folder) / REOPEN, {"conditions": conds})


# -- checking -----------------------------------------------------------------------------------------
def check_fuel(conds: list[dict[str, Any]], geometry: Geometry) -> list[str]:
    """Why the current fuel reopens these conditions (empty: it does not)."""
    reasons = []
    for c in conds:
        if c["kind"] != "fuel_geometry":
            continue
        if c.get("geometry_sha256") is None:
            if c.get("fuel_sha256") != geometry.sha256:
                reasons.append(f"fuel file changed (sha256 {str(c.get('fuel_sha256'))[:12]} → {geometry.sha256[:12]}; "
                               f"its fact values were not recorded)")
            continue
        if c["geometry_sha256"] != geometry_sha256(geometry):
            reasons.append(f"fuel geometry changed (values sha256 {c['geometry_sha256'][:12]} → "
                           f"{geometry_sha256(geometry)[:12]})")
        was = c.get("established") or {}
        for key, fact in sorted(geometry.facts.items()):
            if key in was and was[key] != fact.established:
                reasons.append(f"fuel fact {key} is now {'established' if fact.established else 'open'} "
                               f"(was {'established' if was[key] else 'open'})")
    return reasons


def _when(prov: dict[str, Any]) -> str:
    return str(prov.get("timestamp_utc") or "")


def check_runs(conds: list[dict[str, Any]], measured: dict[str, Any], sweeps: Sequence[pathlib.Path]) -> list[str]:
    """Why newer sweeps (measured after the write-up's provenance ``measured``, on its device)
    reopen these conditions."""
    by_kind = {c["kind"]: c for c in conds}
    software = by_kind.get("software", {})
    reasons: list[str] = []
    for sweep_dir in sweeps:
        prov = store.read_provenance(sweep_dir) or {}
        if _when(prov) <= _when(measured) or prov.get("device_short") != measured.get("device_short"):
            continue
        run = f"{pathlib.Path(sweep_dir).name} at {str(prov.get('commit') or 'unknown')[:7]}"
        for key in SOFTWARE_KEYS:
            if software.get(key) is not None and prov.get(key) is not None and str(prov[key]) != str(software[key]):
                reasons.append(f"{key} {software[key]} → {prov[key]} ({run})")
        bw = by_kind.get("copy_bandwidth")
        roof = store.read_roofline(sweep_dir)
        if bw and roof and roof.get("gbps"):
            moved = float(roof["gbps"]) / bw["gbps"] - 1
            if abs(moved) > bw["fraction"]:
                reasons.append(f"copy bandwidth {bw['gbps']:.0f} → {float(roof['gbps']):.0f} GB/s "
                               f"({moved:+.1%}, more than ±{bw['fraction']:.0%}; {run})")
        src = by_kind.get("kernel_sources")
        if src:
            for name, sha in _sources(store.load_sweep(sweep_dir)).items():
                if name in src["sources"] and src["sources"][name] != sha:
                    reasons.append(f"{name} source {src['sources'][name]} → {sha} ({run})")
    return list(dict.fromkeys(reasons))  # the same change seen by several newer runs: once


def check(folder: pathlib.Path, geometry: Geometry, sweeps: Sequence[pathlib.Path] = ()) -> dict[str, Any]:
    """A published folder's reopen state: ``{"reasons": [...], "manual": [...], "recorded": bool}``."""
    conds, own = recorded(folder, geometry)
    prov = json.loads((pathlib.Path(folder) / "provenance.json").read_text())
    reasons = check_fuel(conds, geometry) + check_runs(conds, prov, sweeps)
    return {"reasons": reasons, "manual": [c["text"] for c in conds if c["kind"] == "manual"], "recorded": own}


def describe(conds: list[dict[str, Any]]) -> list[str]:
    """One line per condition, for a write-up's "Reopen if" section."""
    lines = []
    for c in conds:
        k = c["kind"]
        if k == "fuel_geometry":
            lines.append("the fuel's fact values change (values sha256 "
                         f"`{str(c.get('geometry_sha256'))[:12]}`) or a fact's `established` flag flips"
                         if c.get("geometry_sha256") else f"the fuel file changes (sha256 `{str(c.get('fuel_sha256'))[:12]}`)")
        elif k == "software":
            lines.append("a newer run on this device has another driver or CUDA (" +
                         ", ".join(f"{key} {c.get(key)}" for key in SOFTWARE_KEYS) + ")")
        elif k == "copy_bandwidth":
            lines.append(f"a newer run's copy roofline moves by more than ±{c['fraction']:.0%} from "
                         f"{c['gbps']:.0f} GB/s")
        elif k == "kernel_sources":
            n = len(c["sources"])
            lines.append(f"a measured variant's source changes ({n} hash{'es' if n > 1 else ''} recorded in `{REOPEN}`)")
        elif k == "manual":
            lines.append(f"(manual) {c['text']}")
    return lines
