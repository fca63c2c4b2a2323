"""A sweep's plan: which jobs it has, where it is stored, which of them are stored already, and
what happened to them (the summary and exit status a script or CI reads).

Before Hydra starts, ``attnbench -m ...`` composes every job (``cli.preflight``) and keys each one
by what decides its result: its resolved config (without the store's location and the prose
claim), the source hash of every variant its component declares, and the commit (with the dirty
flag). The sweep's plan (``plan.json``: the jobs' overrides and keys, in Hydra's job order) goes
into its folder before the first job runs:

- **resume**: the newest sweep folder under the store root with the same plan (same keys) is
  re-used, and a job whose folder already holds rows under its key is not run again; ``--force``
  re-runs every job into that folder (each job's files are replaced atomically). A killed sweep
  (Ctrl-C, SIGKILL, a lost machine) therefore finishes by running the same command again, and
  every job is stored exactly once.
- **one sweep per folder**: ``hydra.sweep.dir=`` naming a folder that holds another plan is an
  error, not a mix of two sweeps.
- **summary**: after the jobs, ok / skipped / failed / noisy rows per component and the jobs stored
  of those planned; the command exits 1 when any stored row failed.

A job learns the sweep's size and start from the environment (``ATTNBENCH_SWEEP_*``, set by the
command before Hydra runs the jobs, so a launcher's worker processes see it too) for its progress
line, and ``ATTNBENCH_FORCE`` for ``--force``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import pathlib
import time
from typing import Any, Sequence

from harness import store

PLAN = "plan.json"
FORCE_ENV = "ATTNBENCH_FORCE"
TOTAL_ENV = "ATTNBENCH_SWEEP_TOTAL"
STARTED_ENV = "ATTNBENCH_SWEEP_STARTED"
RESUMED_ENV = "ATTNBENCH_SWEEP_RESUMED"   # jobs stored before this command ran
# Keys of a job's config that do not change what it measures.
UNKEYED = ("store", "claim")


@functools.lru_cache(maxsize=1)
def _code_version() -> tuple[str, Any]:
    from harness.provenance import git_info

    info = git_info()
    return str(info.get("commit") or "unknown"), info.get("dirty")


def job_key(cfg) -> str:
    """What decides a job's result, hashed: its resolved config (less ``UNKEYED`` and the axes its
    component does not read), the source hash of each of its component's variants, and the commit
    and dirty flag. Two jobs of one sweep that differ only in an axis their component does not read
    (a grid over several components: KDA jobs at every swept context) get one key: the later one
    repeats the earlier and is not run (``Plan.repeats``)."""
    from omegaconf import OmegaConf

    from harness import registry
    from harness.sources import sources_sha

    config = OmegaConf.to_container(cfg, resolve=True)
    comp = registry.get(str(cfg.component.name))
    for key in (*UNKEYED, *(set(registry.axes()) - set(comp.axis_names))):
        config.pop(key, None)
    sources = {v.name: sources_sha([pathlib.Path(comp.folder) / s for s in v.sources]) for v in comp.variants}
    commit, dirty = _code_version()
    payload = json.dumps({"config": config, "sources": sources, "commit": commit, "dirty": dirty},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclasses.dataclass
class Plan:
    """The jobs of one command, in Hydra's job order: ``jobs[i]`` = (overrides, key) of job i."""

    sweep: str
    jobs: list[tuple[list[str], str]]

    @property
    def sha(self) -> str:
        return hashlib.sha256("\n".join(k for _, k in self.jobs).encode()).hexdigest()[:20]

    @property
    def repeats(self) -> dict[int, int]:
        """``{job: the earlier job with its key}`` for every job that repeats another's point."""
        return repeats_of([k for _, k in self.jobs])

    @property
    def distinct(self) -> int:
        """The jobs that run: the planned ones less the repeats."""
        return len(self.jobs) - len(self.repeats)

    def as_json(self) -> dict[str, Any]:
        commit, dirty = _code_version()
        repeats = self.repeats
        return {"sweep": self.sweep, "plan_sha": self.sha, "commit": commit, "dirty": dirty,
                "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "jobs": [{"num": i, "overrides": o, "key": k, **({"repeat_of": repeats[i]} if i in repeats else {})}
                         for i, (o, k) in enumerate(self.jobs)]}


def repeats_of(keys: Sequence[str]) -> dict[int, int]:
    first: dict[str, int] = {}
    out = {}
    for i, key in enumerate(keys):
        if key in first:
            out[i] = first[key]
        else:
            first[key] = i
    return out


def repeated_job(sweep_dir: pathlib.Path, job_num: int) -> tuple[int | None, int]:
    """(the earlier job whose point job ``job_num`` of the sweep's plan repeats, or None; the job's
    place among the jobs that run, for its progress line)."""
    try:
        plan = read_plan(sweep_dir)
    except ValueError:
        plan = None
    if plan is None:
        return None, job_num
    jobs = plan.get("jobs", [])
    entry = next((j for j in jobs if j.get("num") == job_num), None)
    place = sum("repeat_of" not in j for j in jobs if j.get("num", 0) < job_num)
    return (None if entry is None else entry.get("repeat_of")), place


def read_plan(sweep_dir: pathlib.Path) -> dict[str, Any] | None:
    path = pathlib.Path(sweep_dir) / PLAN
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}); delete it to start that sweep afresh") from None


def write_plan(sweep_dir: pathlib.Path, plan: Plan) -> None:
    store.atomic_write_json(pathlib.Path(sweep_dir) / PLAN, plan.as_json())


def stored_job(job_dir: pathlib.Path, key: str) -> bool:
    """True when ``job_dir`` holds rows written under ``key`` (its meta.json names the key; the rows
    are written before the meta, so a job killed between the two counts as not stored)."""
    meta_path = pathlib.Path(job_dir) / store.META
    if not (pathlib.Path(job_dir) / store.ROWS).is_file() or not meta_path.is_file():
        return False
    try:
        return json.loads(meta_path.read_text()).get("job_key") == key
    except (json.JSONDecodeError, OSError):
        return False


def stored_count(sweep_dir: pathlib.Path, plan: dict[str, Any] | Plan) -> int:
    """Jobs of the plan stored, repeats not counted (they store nothing): a planned key counts
    when a job folder holds rows under it (its own number's folder, or, for a plan whose
    numbering differed from Hydra's, as plans written before that was fixed could, another)."""
    jobs = plan.as_json()["jobs"] if isinstance(plan, Plan) else plan["jobs"]
    wanted = {j["key"] for j in jobs if "repeat_of" not in j}
    stored = set()
    for meta_path in pathlib.Path(sweep_dir).glob(f"*/{store.META}"):
        try:
            key = json.loads(meta_path.read_text()).get("job_key")
        except (json.JSONDecodeError, OSError):
            continue
        if key in wanted and stored_job(meta_path.parent, key):
            stored.add(key)
    return len(stored)


def distinct_count(plan: dict[str, Any] | Plan) -> int:
    jobs = plan.as_json()["jobs"] if isinstance(plan, Plan) else plan["jobs"]
    return sum("repeat_of" not in j for j in jobs)


def progress(sweep_dir: pathlib.Path) -> tuple[int, int] | None:
    """(jobs stored, jobs to run: the planned ones less repeats) of a sweep, or None for a sweep
    stored without a plan."""
    plan = read_plan(sweep_dir)
    return None if plan is None else (stored_count(sweep_dir, plan), distinct_count(plan))


def choose_sweep_dir(root: pathlib.Path, plan: Plan, explicit: pathlib.Path | None) -> tuple[pathlib.Path, bool]:
    """Where the sweep goes and whether it resumes one already there. ``explicit`` (a
    ``hydra.sweep.dir=`` of the command line) must be new or hold this same plan; otherwise the
    newest folder under ``root`` with this plan, else a new dated folder. Raises ValueError with
    a one-line message for a folder that holds another sweep."""
    if explicit is not None:
        theirs = read_plan(explicit)
        if theirs is not None and theirs.get("plan_sha") != plan.sha:
            raise ValueError(f"hydra.sweep.dir: {explicit} holds another sweep ({theirs.get('sweep')!r}, "
                             f"{len(theirs.get('jobs', []))} jobs, plan {theirs.get('plan_sha')}); allowed: a new "
                             f"folder, or the command that made that one")
        if theirs is None and explicit.is_dir() and any(explicit.glob(f"*/{store.ROWS}")):
            raise ValueError(f"hydra.sweep.dir: {explicit} holds jobs stored without a plan; allowed: a new folder")
        return explicit, theirs is not None
    if root.is_dir():
        for candidate in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
            try:
                theirs = read_plan(candidate)
            except ValueError:
                continue
            if theirs is not None and theirs.get("plan_sha") == plan.sha:
                return candidate, True
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    return root / f"{stamp}_{plan.sweep}", False


def export_env(total: int, force: bool, resumed: int) -> None:
    os.environ[TOTAL_ENV] = str(total)
    os.environ[RESUMED_ENV] = str(resumed)
    os.environ[STARTED_ENV] = repr(time.time())
    if force:
        os.environ[FORCE_ENV] = "1"
    else:
        os.environ.pop(FORCE_ENV, None)


def forced() -> bool:
    return os.environ.get(FORCE_ENV, "") not in ("", "0")


def progress_line(job_num: int) -> str:
    """``job 3/8, 41 s elapsed, ~68 s left`` (the estimate from the jobs this command ran so far;
    jobs a resume skips take no time), or '' outside a planned sweep."""
    total = int(os.environ.get(TOTAL_ENV, "0") or 0)
    if total <= 0:
        return ""
    elapsed = time.time() - float(os.environ.get(STARTED_ENV, repr(time.time())))
    done = max(job_num - int(os.environ.get(RESUMED_ENV, "0") or 0), 0)
    left = f", ~{elapsed / done * (total - job_num):.0f} s left" if done else ""
    return f"job {job_num + 1}/{total}, {elapsed:.0f} s elapsed{left}"


def summary(rows, planned: int | None, stored: int | None) -> tuple[str, bool]:
    """A plain-text table of the rows' outcomes per component, and whether any row failed."""
    lines = []
    if planned is not None:
        lines.append(f"jobs: {stored} of {planned} stored")
    if rows is None or len(rows) == 0:
        lines.append("no rows stored")
        return "\n".join(lines), False
    width = max(len("component"), *(len(str(c)) for c in rows["component"].unique()))
    lines.append(f"{'component':<{width}}  {'ok':>5} {'skipped':>8} {'failed':>7} {'noisy':>6}")
    any_failed = False
    for comp, group in rows.groupby("component", sort=True):
        counts = group["status"].value_counts()
        failed = int(counts.get("failed", 0))
        any_failed |= failed > 0
        noisy = int((group["noisy"].astype(bool) & (group["status"] == "ok")).sum())
        lines.append(f"{comp:<{width}}  {int(counts.get('ok', 0)):>5} {int(counts.get('skipped', 0)):>8} "
                     f"{failed:>7} {noisy:>6}")
    for _, row in rows[rows["status"] == "failed"].head(10).iterrows():
        lines.append(f"  failed: {row['component']}/{row['variant']} (job {row.get('job')}): {str(row['reason'])[:160]}")
    return "\n".join(lines), any_failed


def first_error_line(exc: BaseException) -> str:
    """The line of an exception's message that says what broke: a compiler log's first ``error``
    line (NVRTC / nvcc logs start with the file name), else its first line."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")


def is_out_of_memory(exc: BaseException) -> bool:
    """CuPy's OutOfMemoryError, torch's OutOfMemoryError, a CUDA allocation error or MemoryError:
    the point does not fit this device, which is a skipped row, not a broken variant."""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if isinstance(seen, MemoryError) or "OutOfMemory" in name or "out of memory" in str(seen).lower() \
                or "cudaErrorMemoryAllocation" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def planned_sweeps(root: pathlib.Path) -> Sequence[pathlib.Path]:
    """Every folder under ``root`` with a plan, oldest first (for listings)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / PLAN).is_file())
