"""The parallel launcher's placement (harness/placement.py), on a CPU machine with pretended GPUs
(ATTNBENCH_FAKE_GPUS): every worker claims its own GPU, a worker keeps it, no GPU is held twice,
and a sweep through hydra/launcher=parallel stores each job once with where it ran. The Slurm
launcher's config composes (no cluster here)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest

from harness import placement, store


def _claim(queue):
    try:
        first = placement.bind_worker()
        again = placement.bind_worker()     # a worker keeps its slot across jobs
        queue.put((first["gpu"], again["gpu"], os.environ["CUDA_VISIBLE_DEVICES"]))
        import time
        time.sleep(1.0)                     # hold the slot while the others try
    except RuntimeError as exc:
        queue.put(("refused", str(exc), ""))


def test_each_worker_claims_a_different_gpu_and_one_too_many_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(placement.FAKE_ENV, "3")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert placement.visible_gpus() == ["0", "1", "2"]
    placement.prepare_slots(placement.visible_gpus())
    assert placement.bind_worker() is None                     # the command's own process: never
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(queue,)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    claimed = [g for g in got if g[0] != "refused"]
    refused = [g for g in got if g[0] == "refused"]
    assert sorted(g[0] for g in claimed) == ["0", "1", "2"], got
    assert all(a == b == visible for a, b, visible in claimed)
    assert len(refused) == 1 and "all 3 GPU slots are held" in refused[0][1]


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv(placement.FAKE_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert placement.visible_gpus() == ["2", "5"] and placement.workers("cuda") == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert placement.visible_gpus() == [] and placement.workers("cpu") == max(1, os.cpu_count() or 1)


def test_a_sweep_through_the_parallel_launcher_places_every_job(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNBENCH_COMPONENTS", "tests.fault_component")
    monkeypatch.setenv(placement.FAKE_ENV, "2")
    root = tmp_path / "store"
    res = cli("-m", "component=fault_sum", "M=1,2,3,4", "fault_only=right", "backend=cpu", "timing=quick",
              f"store.root={root}", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2")
    assert res.returncode == 0, res.stderr
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    metas = [json.loads(p.read_text()) for p in folder.glob(f"*/{store.META}")]
    assert sorted(m["point"]["M"] for m in metas) == [1, 2, 3, 4]
    by_pid: dict[int, set] = {}
    for m in metas:
        by_pid.setdefault(m["placement"]["pid"], set()).add(m["placement"]["gpu"])
    assert all(len(gpus) == 1 for gpus in by_pid.values()), by_pid      # a worker keeps its GPU
    gpus = [next(iter(g)) for g in by_pid.values()]
    assert len(set(gpus)) == len(gpus) and set(gpus) <= {"0", "1"}      # no GPU shared by workers
    assert len(by_pid) == 2 and os.getpid() not in by_pid               # the jobs ran in workers
    # jobs on one GPU never overlapped in time
    for gpu in set(gpus):
        spans = sorted((m["started_unix"], m["started_unix"] + m["seconds"]) for m in metas
                       if m["placement"]["gpu"] == gpu)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
    rows = store.load_sweep(folder)
    assert set(rows.loc[rows["variant"] == "right", "placement"].str.match(r"gpu [01] \(slot [01], pid \d+\)")) == {True}


def test_the_slurm_launcher_config_composes():
    from hydra import compose, initialize_config_dir

    from harness.cli import EXPERIMENTS_DIR, register_resolvers
    from harness.config import register_schema

    register_schema()
    register_resolvers()
    with initialize_config_dir(config_dir=str(EXPERIMENTS_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                           "+experiment=kda_decode"], return_hydra_config=True)
        launcher = cfg.hydra.launcher
        assert launcher._target_.endswith("SlurmLauncher")
        assert launcher.gpus_per_task == 1 and launcher.tasks_per_node == 1 and launcher.partition == "gpu"
        par = compose("config", overrides=["hydra/launcher=parallel", "backend=cpu"], return_hydra_config=True)
        assert par.hydra.launcher._target_.endswith("JoblibLauncher") and par.hydra.launcher.n_jobs >= 1
