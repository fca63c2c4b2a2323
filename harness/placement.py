"""Where a job runs when a launcher spreads a sweep over several workers.

``hydra/launcher=parallel`` (experiments/hydra/launcher/parallel.yaml: Hydra's joblib launcher)
runs the jobs in worker processes, as many as there are visible GPUs (or CPU cores for the CPU
backend). Joblib hands every worker the same environment, so each worker claims one GPU itself
before anything initialises CUDA: the command lists the visible GPUs and makes a folder of slot
locks (``ATTNBENCH_SLOTS``, ``ATTNBENCH_SLOT_DIR``); a worker's first job takes the first free slot
with an exclusive ``flock`` held for the worker's life and sets ``CUDA_VISIBLE_DEVICES`` to that
GPU alone, so the job's ``backend.device=0`` is that GPU. A worker runs one job at a time and no
two workers hold the same slot, so no GPU runs two jobs at once. Jobs run in the command's own
process (the basic launcher) are never rebound.

``submitit_slurm`` (experiments/hydra/launcher/slurm.yaml) asks Slurm for one GPU per task, and
Slurm sets ``CUDA_VISIBLE_DEVICES``: no slots are needed there.

Which GPU a job ran on goes into its meta.json and rows (``placement``), so a sweep's provenance
shows it. Visible GPUs are counted without initialising CUDA in the command (nvidia-smi), and
``ATTNBENCH_FAKE_GPUS=N`` pretends N GPUs for tests of the placement on a CPU machine.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Any

SLOTS_ENV = "ATTNBENCH_SLOTS"         # comma-separated GPU ids, one slot each
SLOT_DIR_ENV = "ATTNBENCH_SLOT_DIR"   # where the slot locks live
MAIN_PID_ENV = "ATTNBENCH_MAIN_PID"   # the command's process: its jobs are never rebound
FAKE_ENV = "ATTNBENCH_FAKE_GPUS"

_held: dict[str, Any] = {}            # this process's slot: {"slot", "gpu", "fd"}


def visible_gpus() -> list[str]:
    """The GPU ids jobs may use: ``CUDA_VISIBLE_DEVICES`` when set, else every GPU nvidia-smi
    lists (none without a driver); ``ATTNBENCH_FAKE_GPUS=N`` gives 0..N-1."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        return [str(i) for i in range(int(fake))]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


def workers(backend: str = "auto") -> int:
    """How many jobs the parallel launcher runs at once: one per visible GPU, else (the CPU
    reference backend) one per core."""
    gpus = visible_gpus()
    if gpus and backend != "cpu":
        return len(gpus)
    return max(1, os.cpu_count() or 1)


def prepare_slots(gpus: list[str]) -> pathlib.Path:
    """Export the slots for this command's workers (one lock file per GPU in a fresh folder)."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="attnbench-slots-"))
    for i in range(len(gpus)):
        (folder / f"slot-{i}.lock").touch()
    os.environ[SLOTS_ENV] = ",".join(gpus)
    os.environ[SLOT_DIR_ENV] = str(folder)
    os.environ[MAIN_PID_ENV] = str(os.getpid())
    return folder


def bind_worker() -> dict[str, Any] | None:
    """In a launcher's worker process, before CUDA is initialised: claim a free slot (kept for
    the process's life) and make its GPU the only visible one. Returns the placement (slot, GPU,
    pid), or None in the command's own process or where no slots were exported. Raises
    RuntimeError when every slot is held (more workers than GPUs)."""
    gpus = [g for g in os.environ.get(SLOTS_ENV, "").split(",") if g]
    folder = os.environ.get(SLOT_DIR_ENV)
    if not gpus or not folder or os.environ.get(MAIN_PID_ENV) == str(os.getpid()):
        return None
    if not _held:
        for slot, gpu in enumerate(gpus):
            fd = os.open(pathlib.Path(folder) / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _held.update(slot=slot, gpu=gpu, fd=fd)
            break
        else:
            raise RuntimeError(f"placement: all {len(gpus)} GPU slots are held by other workers; "
                               f"allowed: at most {len(gpus)} workers (hydra.launcher.n_jobs)")
    os.environ["CUDA_VISIBLE_DEVICES"] = _held["gpu"]
    return placement()


def placement() -> dict[str, Any]:
    """What this process runs on, for the job's meta and rows."""
    out: dict[str, Any] = {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if _held:
        out.update(slot=_held["slot"], gpu=_held["gpu"])
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID"):
        if key in os.environ:
            out[key.lower()] = os.environ[key]
    return out


def describe(p: dict[str, Any]) -> str:
    """One line for a row: ``gpu 3 (slot 3, pid 1234)`` or ``CUDA_VISIBLE_DEVICES=... (pid ...)``."""
    if "gpu" in p:
        return f"gpu {p['gpu']} (slot {p['slot']}, pid {p['pid']})"
    return f"CUDA_VISIBLE_DEVICES={p.get('cuda_visible_devices')} (pid {p['pid']})"
