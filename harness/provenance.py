"""Provenance: where a number came from. Captured once per sweep and stored with every job.

Git commit, dirty flag (untracked files count) and branch; the device (name, SMs, shared memory
per SM, L2, memory bus); driver (NVML string), CUDA driver/runtime, NVRTC, CuPy, torch, Python;
host and timestamp; a hash of the fuel and of every kernel source. Clocks and throttle reasons
are read before and after each measurement (`clocks`).

On a machine where the checkout is a copy without ``.git`` (the lent GPU host), the commit and
dirty flag come from ``ATTNBENCH_COMMIT`` / ``ATTNBENCH_DIRTY`` set by whoever launched the run.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import os
import pathlib
import platform
import socket
import subprocess
import sys
from typing import Any

from harness.fuel import REPO_ROOT, Geometry

log = logging.getLogger("attnbench")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info() -> dict[str, Any]:
    """Commit, dirty flag and branch of the code that runs.

    ``ATTNBENCH_COMMIT`` (with ``ATTNBENCH_DIRTY`` / ``ATTNBENCH_BRANCH``), when set, wins over the
    checkout's own .git: whoever launches a run on a copied tree knows what was copied, while a
    .git that travels with the copy can be stale (seen on the lent H200: the copy's .git stood at
    an older commit and called the tree dirty). What git says is kept beside it for the record.
    """
    commit = _git("rev-parse", "HEAD")
    git_view = None
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=all") or ""
        changed = [line for line in status.splitlines() if line.strip()]
        git_view = {
            "commit": commit,
            "dirty": bool(changed),
            "dirty_files": len(changed),  # untracked (not ignored) files count as dirty
            "branch": _git("rev-parse", "--abbrev-ref", "HEAD") or "unknown",
            "commit_source": "git",
        }
    env_commit = os.environ.get("ATTNBENCH_COMMIT")
    if env_commit:
        dirty_env = os.environ.get("ATTNBENCH_DIRTY")
        info = {
            "commit": env_commit,
            "dirty": None if dirty_env is None else dirty_env not in ("0", "false", ""),
            "dirty_files": None,
            "branch": os.environ.get("ATTNBENCH_BRANCH", "unknown"),
            "commit_source": "env ATTNBENCH_COMMIT",
        }
        if git_view is not None:
            if git_view["commit"].startswith(env_commit) or env_commit.startswith(git_view["commit"]):
                # The same commit: git knows the full hash and the dirty state first-hand.
                return git_view | {"commit_source": "git (= env ATTNBENCH_COMMIT)"}
            # A stale .git in a copied tree, or a stale variable left in a shell: keep both, and
            # the report shows the mismatch.
            info["git_in_checkout"] = f"{git_view['commit']} (dirty files: {git_view['dirty_files']})"
            log.warning("ATTNBENCH_COMMIT=%s differs from the checkout's git HEAD %s; recording the "
                        "variable (unset it if the checkout is the truth)", env_commit, git_view["commit"])
        return info
    if git_view is not None:
        return git_view
    return {"commit": "unknown", "dirty": None, "dirty_files": None,
            "branch": os.environ.get("ATTNBENCH_BRANCH", "unknown"),
            "commit_source": "none (no .git, no env)"}


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "unknown"))
    except Exception:
        return None


def peer_distributions() -> list[str]:
    """The installed distributions the registered variants say their code runs on or is compiled
    by (``Variant.packages``: fla-core and Triton for fla's kernels, say), in first-seen order."""
    from harness import registry

    names: list[str] = []
    for comp in registry.components().values():
        for v in comp.variants:
            names += [p for p in v.packages if p not in names]
    return names


def peer_versions() -> dict[str, str | None]:
    """Version of each distribution a variant declares, None where it is not installed: a peer row
    is only as reproducible as these. Read from package metadata, never imported (fla pulls in
    torch.cuda and Triton)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in peer_distributions():
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _nvml_handle(device: int):
    """NVML handle of the GPU CuPy calls ``device``: matched by PCI bus id, because NVML's index
    order ignores CUDA_VISIBLE_DEVICES and CUDA's fastest-first ordering."""
    import pynvml

    pynvml.nvmlInit()
    try:
        import cupy

        bus_id = cupy.cuda.runtime.deviceGetPCIBusId(device)
        return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode() if isinstance(bus_id, str) else bus_id)
    except Exception:  # no CuPy (CPU machine) or an NVML without the call: fall back to the index
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(device)


def clocks(device: int = 0) -> dict[str, Any]:
    """SM and memory clocks (MHz) and the active clock-event (throttle) reasons, via NVML."""
    try:
        nv, h = _nvml_handle(device)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return {
            "sm_clock_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_clock_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            "throttle_reasons": hex(int(reasons_fn(h))),
            "temperature_c": int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        }
    except Exception as exc:  # NVML absent (CPU machine) or not permitted: say so, don't guess
        return {"sm_clock_mhz": None, "mem_clock_mhz": None, "throttle_reasons": None,
                "temperature_c": None, "nvml_error": f"{type(exc).__name__}: {exc}"[:200]}


# NVML clock-event reasons that slow a measurement down (nvml.h nvmlClocksEventReason*); idle,
# application-clock settings, sync boost and display clocks are not counted.
SLOWDOWN_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}


def slowdowns(*reasons: str | None) -> list[str]:
    """The slowdown reasons set in any of NVML's reason masks (hex strings as ``clocks`` gives)."""
    mask = 0
    for r in reasons:
        if r:
            mask |= int(str(r), 16)
    return [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]


def device_info(backend) -> dict[str, Any]:
    if backend.name == "cpu":
        return {
            "device": f"CPU reference backend ({platform.processor() or platform.machine()})",
            "device_short": "cpu",
            "cpu_count": os.cpu_count(),
        }
    cp = backend.cp
    p = backend.props
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    info: dict[str, Any] = {
        "device": name,
        "device_short": name.replace("NVIDIA", "").strip().split()[0].lower(),
        "arch": backend.arch(),
        "sm_count": int(p["multiProcessorCount"]),
        "smem_per_sm_bytes": int(p["sharedMemPerMultiprocessor"]),
        "smem_per_block_optin_bytes": int(p.get("sharedMemPerBlockOptin", 0)),
        "l2_bytes": int(p["l2CacheSize"]),
        "memory_bus_bits": int(p.get("memoryBusWidth", 0)),
        "memory_bytes": int(cp.cuda.runtime.memGetInfo()[1]),
        "cuda_driver_version": int(cp.cuda.runtime.driverGetVersion()),
        "cuda_runtime_version": int(cp.cuda.runtime.runtimeGetVersion()),
    }
    try:
        info["nvrtc_version"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except Exception as exc:
        info["nvrtc_version"] = f"unavailable: {exc}"[:100]
    try:
        nv, _ = _nvml_handle(backend.device_id)
        drv = nv.nvmlSystemGetDriverVersion()
        info["driver_version"] = drv.decode() if isinstance(drv, bytes) else str(drv)
    except Exception as exc:
        info["driver_version"] = f"unavailable: {exc}"[:100]
    return info


def file_hashes(paths: list[pathlib.Path]) -> dict[str, str]:
    out = {}
    for p in sorted(paths):
        rel = p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p
        out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def kernel_source_hashes() -> dict[str, str]:
    """Every source that shapes a number: kernel families, the harness (timing, verification,
    the L2 flush kernel) and the experiment configs, so a row can be traced to the exact code even
    where the checkout has no .git."""
    files = []
    for folder in ("kernels", "harness", "experiments"):
        root = REPO_ROOT / folder
        files += [p for p in root.rglob("*") if p.suffix in (".cu", ".cuh", ".py", ".yaml") and p.is_file()]
    return file_hashes(files)


def capture(backend, geometry: Geometry) -> dict[str, Any]:
    """Everything about the run that does not change between jobs of one sweep."""
    prov: dict[str, Any] = {
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "backend": backend.name,
        "backend_label": backend.label,
        "device_index": getattr(backend, "device_id", 0),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "cupy": _version("cupy") if backend.name == "cuda" else None,
        "hydra": _version("hydra"),
        "peer_versions": peer_versions(),
        "fuel_path": os.path.relpath(geometry.path, REPO_ROOT),
        "fuel_sha256": geometry.sha256,
        "kernel_sources": kernel_source_hashes(),
        "argv": " ".join(sys.argv[1:]),
    }
    prov.update(git_info())
    prov.update(device_info(backend))
    return prov
