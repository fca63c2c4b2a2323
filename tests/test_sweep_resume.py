"""Sweeps that survive: faults become rows and the exit status says so; a sweep interrupted
(SIGINT) or killed (SIGKILL) and run again stores each job exactly once; a sweep folder holds one
sweep; --force re-runs. CPU backend, test components outside kernels/ (tests/fault_component.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness import store, sweep
from harness.fuel import REPO_ROOT

PLUGINS = "tests.fault_component"


@pytest.fixture()
def fault_cli(cli, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_COMPONENTS", PLUGINS)
    return cli


def _sweep_dirs(root):
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def test_each_fault_is_a_row_the_sweep_goes_on_and_exits_1(fault_cli, tmp_path):
    root = tmp_path / "store"
    res = fault_cli("-m", "component=fault_sum", "M=2,3", "backend=cpu", "timing=quick", f"store.root={root}")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    (folder,) = _sweep_dirs(root)
    rows = store.load_sweep(folder)
    assert len(rows) == 10 and sorted(rows["M"].unique()) == [2, 3]
    by = {v: g for v, g in rows.groupby("variant")}
    assert set(by["right"]["status"]) == {"ok"} and by["right"]["ms_p50"].notna().all()
    assert set(by["wrong_output"]["status"]) == {"failed"} and by["wrong_output"]["ms_p50"].isna().all()
    assert all("out:" in r for r in by["wrong_output"]["reason"])
    # the compiler's first error line, not its first line (a warning)
    assert set(by["compile_error"]["reason"]) == {
        'CompileException: fault_sum.cu(7): error: identifier "undefined_symbol" is undefined'}
    assert set(by["out_of_memory"]["status"]) == {"skipped"}
    assert all(r.startswith("out of memory (cpu): OutOfMemoryError") for r in by["out_of_memory"]["reason"])
    assert set(by["broken_supports"]["status"]) == {"failed"}
    assert all(r.startswith("supports: KeyError: ") for r in by["broken_supports"]["reason"])
    assert "jobs: 2 of 2 stored" in res.stderr
    table = [ln.split() for ln in res.stderr.splitlines() if ln.startswith("fault_sum ")]
    # ok, skipped, failed (noisy depends on the host's timer)
    assert [r[:4] for r in table] == [["fault_sum", "2", "2", "6"]], res.stderr


def test_a_sweep_without_failed_rows_exits_0(fault_cli, tmp_path):
    res = fault_cli("-m", "component=fault_sum", "M=2", "fault_only=right,out_of_memory", "backend=cpu",
                    "timing=quick", f"store.root={tmp_path}")
    assert res.returncode == 0, res.stderr
    assert "jobs: 2 of 2 stored" in res.stderr


def _start(args, root, sleep_s):
    env = dict(os.environ, ATTNBENCH_COMPONENTS=PLUGINS, FAULT_SLEEP_S=str(sleep_s),
               PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "harness", "-m", *args, f"store.root={root}"], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_rows(root, count, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        stored = list(root.glob(f"*/*/{store.META}"))
        if len(stored) >= count:
            return
        if proc.poll() is not None:
            raise AssertionError(f"sweep ended early: {proc.communicate()[1]}")
        time.sleep(0.05)
    raise AssertionError("no rows appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_an_interrupted_sweep_run_again_stores_each_job_once(fault_cli, tmp_path, sig):
    root = tmp_path / "store"
    args = ["component=fault_sum", "M=1,2,3,4", "fault_only=right", "backend=cpu", "timing=quick"]
    proc = _start(args, root, sleep_s=1.0)
    _wait_for_rows(root, 1, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        last = err.strip().splitlines()[-1]
        assert last.startswith("attnbench: interrupted: ") and "jobs stored under" in last, err
        assert "Traceback" not in err, err
    else:
        assert proc.returncode == -signal.SIGKILL
    (folder,) = _sweep_dirs(root)
    before = {p.parent.name for p in folder.glob(f"*/{store.META}")}
    assert 1 <= len(before) < 4

    res = fault_cli("-m", *args, f"store.root={root}")
    assert res.returncode == 0, res.stderr
    assert f"resuming {folder}: {len(before)} of 4 jobs stored, {4 - len(before)} to run" in res.stderr
    assert _sweep_dirs(root) == [folder]            # the same folder, not a second sweep
    rows = store.load_sweep(folder)
    rows = rows[rows["variant"] == "right"]          # the other variants are skipped rows (fault_only)
    assert sorted(rows["M"]) == [1, 2, 3, 4] and set(rows["status"]) == {"ok"}, rows[["job", "M"]]
    assert "jobs: 4 of 4 stored" in res.stderr
    # the jobs stored before the interruption were not measured again
    assert (res.stdout + res.stderr).count("stored already") == len(before)


def test_force_reruns_and_a_folder_holds_one_sweep(fault_cli, tmp_path):
    root, folder = tmp_path / "store", tmp_path / "store" / "mine"
    base = ["-m", "component=fault_sum", "fault_only=right", "backend=cpu", "timing=quick",
            f"store.root={root}", f"hydra.sweep.dir={folder}"]
    assert fault_cli(*base, "M=1,2").returncode == 0
    keys = {j["num"]: j["key"] for j in sweep.read_plan(folder)["jobs"]}
    res = fault_cli(*base, "M=1,2", "--force")
    assert res.returncode == 0 and "(--force: all of them again)" in res.stderr, res.stderr
    assert "stored already" not in res.stdout + res.stderr
    assert {j["num"]: j["key"] for j in sweep.read_plan(folder)["jobs"]} == keys
    assert (store.load_sweep(folder)["variant"] == "right").sum() == 2
    assert (res.stdout + res.stderr).count("job 1/2") == 1

    other = fault_cli(*base, "M=3")
    lines = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(lines) == 1, other.stderr
    assert lines[0].startswith(f"attnbench: hydra.sweep.dir: {folder} holds another sweep"), lines


def test_a_grid_over_two_components_runs_each_distinct_point_once(fault_cli, tmp_path):
    """roofline reads no M: its jobs at M = 2 and 3 are one point, run once; fault_sum reads no
    copy_mib but it has one value here. 4 planned jobs, 3 run, each stored once."""
    root = tmp_path / "store"
    res = fault_cli("-m", "component=fault_sum,roofline", "M=2,3", "copy_mib=1", "fault_only=right",
                    "backend=cpu", "timing=quick", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    (folder,) = _sweep_dirs(root)
    plan = sweep.read_plan(folder)
    repeats = {j["num"]: j["repeat_of"] for j in plan["jobs"] if "repeat_of" in j}
    assert len(plan["jobs"]) == 4 and len(repeats) == 1, plan
    (num, first), = repeats.items()
    assert plan["jobs"][num]["overrides"] != plan["jobs"][first]["overrides"]
    assert all("component=roofline" in plan["jobs"][n]["overrides"] for n in (num, first))
    rows = store.load_sweep(folder)
    assert sorted(rows.groupby("component")["job"].nunique().items()) == [("fault_sum", 2), ("roofline", 1)]
    assert "1 of 4 jobs repeat an earlier job's point" in res.stderr and "jobs: 3 of 3 stored" in res.stderr
    assert f"job {num} repeats job {first}'s point (roofline reads none of M" in res.stdout + res.stderr
    assert sweep.progress(folder) == (3, 3)


def test_the_plan_numbers_jobs_as_hydra_does_when_the_command_line_sweeps_beside_the_experiment(cli, tmp_path):
    """quickstart sweeps copy_mib in its own params; a key the command line sweeps comes after it
    in Hydra's job order, whatever its place on the line: job N's folder holds the plan's job N."""
    root = tmp_path / "store"
    res = cli("-m", "timing.max_reps=3,4", "+experiment=quickstart", "backend=cpu", "timing.warmup=0",
              "timing.min_reps=1", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    (folder,) = _sweep_dirs(root)
    plan = sweep.read_plan(folder)
    assert len(plan["jobs"]) == 6 and "jobs: 6 of 6 stored" in res.stderr, res.stderr
    for job in plan["jobs"]:
        meta = json.loads((folder / str(job["num"]) / store.META).read_text())
        assert meta["job_key"] == job["key"], (job, meta["overrides"])
    assert [j["overrides"][-2:] for j in plan["jobs"][:2]] == [["copy_mib=4", "timing.max_reps=3"],
                                                               ["copy_mib=4", "timing.max_reps=4"]]


def test_job_keys_follow_what_decides_a_result(tmp_path):
    """The key changes with the point and with the code, not with the store's location."""
    from hydra import compose, initialize_config_dir

    from harness.cli import EXPERIMENTS_DIR
    from harness.config import register_schema

    register_schema()
    with initialize_config_dir(config_dir=str(EXPERIMENTS_DIR), version_base="1.3"):
        a = sweep.job_key(compose("config", overrides=["component=roofline", "copy_mib=8"]))
        b = sweep.job_key(compose("config", overrides=["component=roofline", "copy_mib=16"]))
        c = sweep.job_key(compose("config", overrides=["component=roofline", "copy_mib=8", f"store.root={tmp_path}"]))
    assert a != b and a == c


def test_fault_classification():
    from tests.fault_component import CompileException, OutOfMemoryError

    assert sweep.is_out_of_memory(OutOfMemoryError("x")) and sweep.is_out_of_memory(MemoryError())
    assert sweep.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not sweep.is_out_of_memory(ValueError("bad shape"))
    wrapped = RuntimeError("building the arena")
    wrapped.__cause__ = OutOfMemoryError("y")
    assert sweep.is_out_of_memory(wrapped)
    assert sweep.first_error_line(CompileException("a.cu(1): warning: w\na.cu(2): error: e")) == "a.cu(2): error: e"
    assert sweep.first_error_line(ValueError("first\nsecond")) == "first"
