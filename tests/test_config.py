"""Bad overrides exit non-zero with one line naming the key and what is allowed, and write nothing;
good ones run, as single jobs and as multiruns."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness import store
from harness.verify import Exact
from harness.fuel import REPO_ROOT

CPU_QUICK = ("backend=cpu", "timing=quick", "copy_mib=1")


@pytest.mark.parametrize("args,key,allowed", [
    (["M=0"], "M:", "1..4096"),
    (["context=-5"], "context:", "integers 1.."),
    (["component=nope"], "component:", "kda_decode"),
    (["variant=nope"], "variant:", "copy_v16"),
    # an axis the job's component does not read is still checked against its declaration
    (["selection=sparse"], "selection:", "grouped, scattered, dense"),
    (["context=0"], "context:", "integers 1.."),
    (["backend=gpu"], "backend:", "auto, cpu, cuda"),
    (["state_dtype=fp16"], "state_dtype:", "bf16, fp32"),
    (["timing.max_noise=2"], "timing.max_noise:", "numbers 0..1"),
    (["timing.chain=-1"], "timing.chain:", "integers 0..256"),
    (["variants=[nope]"], "variants:", "numpy_copy"),
    (["variants=[numpy_copy]", "variant=numpy_copy"], "variants:", "variant=all"),
    (["variants=[numpy_copy,numpy_copy]"], "variants:", "each variant once"),
    # another component's variant alone leaves this job's component nothing to run
    (["variants=[ref_scan]"], "variants:", "none of ref_scan is a variant of component roofline"),
    (["M=abc"], "M:", "Integer"),
    (["+experiment=nope"], "experiment:", "roofline"),
    (["M=8,16"], "M:", "-m"),
    (["-m", "M=8,0"], "M:", "1..4096"),
])
def test_bad_override_is_one_line_and_writes_nothing(cli, tmp_path, args, key, allowed):
    root = tmp_path / "store"
    res = cli(*args, f"store.root={root}", *CPU_QUICK[:1])
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert key in lines[0] and allowed in lines[0], lines[0]
    assert not root.exists(), "a rejected job must not write anything"


def test_single_job_stores_rows_and_provenance(cli, tmp_path):
    root = tmp_path / "store"
    res = cli(*CPU_QUICK, f"store.root={root}", "sweep=single")
    assert res.returncode == 0, res.stderr
    sweep = store.find_sweep(root, "single")
    df = store.load_sweep(sweep)
    assert list(df["variant"]) == ["numpy_copy"]
    row = df.iloc[0]
    assert row["status"] == "ok" and row["backend"] == "cpu" and row["rel_err"] == 0
    assert row["bytes"] == 2 * (1 << 20) and row["gbps"] > 0 and row["ms_p50"] > 0
    assert row["ms_p20"] <= row["ms_p50"] <= row["ms_p80"]
    assert row["roofline_gbps"] > 0 and row["roofline_fraction"] == pytest.approx(row["gbps"] / row["roofline_gbps"])
    prov = store.read_provenance(sweep)
    # values the job could get wrong, each against an independent reading
    import hashlib
    import platform
    import subprocess

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    if head:
        assert prov["commit"] == head
    assert prov["backend"] == "cpu" and prov["python"] == platform.python_version()
    copy_cu = REPO_ROOT / "kernels" / "roofline" / "copy.cu"
    assert prov["kernel_sources"]["kernels/roofline/copy.cu"] == hashlib.sha256(copy_cu.read_bytes()).hexdigest()[:16]
    assert row["commit"] == prov["commit"] and row["fuel_sha256"] == prov["fuel_sha256"]
    assert row["schema_version"] == store.SCHEMA_VERSION and row["point_axes"] == "copy_mib"
    assert row["source_sha"] == "" and row["checks"] == "dst: " + Exact().describe()  # numpy_copy compiles nothing


def test_multirun_runs_one_job_per_value(cli, tmp_path):
    root = tmp_path / "store"
    res = cli("-m", "copy_mib=1,2,4", "backend=cpu", "timing=quick", f"store.root={root}", "sweep=multi")
    assert res.returncode == 0, res.stderr
    sweep = store.find_sweep(root, "multi")
    metas = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/meta.json"))]
    assert sorted(m["overrides"][0] for m in metas) == ["copy_mib=1", "copy_mib=2", "copy_mib=4"]
    df = store.load(root)
    assert len(df) == 3 and set(df["status"]) == {"ok"}
    assert isinstance(df, pd.DataFrame) and {"commit", "device_short", "driver_version"} <= set(df.columns)


def test_a_sweep_over_components_lists_each_ones_variants(cli, tmp_path):
    """variants=[...] over component=a,b names variants of either; each job runs its own."""
    root = tmp_path / "store"
    res = cli("-m", "component=roofline,sparse_gather", "variants=[numpy_copy,numpy_gather]", "copy_mib=1", "M=1",
              "context=4096", "backend=cpu", "timing=quick", f"store.root={root}", "sweep=pair")
    assert res.returncode == 0, res.stderr
    df = store.load(root)
    assert sorted(zip(df["component"], df["variant"])) == [("roofline", "numpy_copy"), ("sparse_gather", "numpy_gather")]
    assert set(df["status"]) == {"ok"}


def test_experiment_sweeper_params_sweep(cli, tmp_path):
    root = tmp_path / "store"
    res = cli("-m", "+experiment=quickstart", "backend=cpu", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    df = store.load(root)
    assert sorted(df["copy_mib"].unique().tolist()) == [4, 16, 64]
    assert set(df["sweep"]) == {"quickstart"}


EXPERIMENTS = sorted(p.stem for p in (REPO_ROOT / "experiments" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs_on_the_cpu_backend(cli, tmp_path, experiment):
    """Each committed experiment composes and runs its multirun on the CPU backend, shrunk to M = 1,
    1 MiB copies and the smallest swept context; every job stores rows, each ok or skipped with its reason (an experiment that
    lists only CUDA variants skips here). Keeps configs that only run on the H200 from rotting."""
    root = tmp_path / "store"
    res = cli("-m", f"+experiment={experiment}", "backend=cpu", "timing.warmup=0", "timing.min_reps=1",
              "timing.max_reps=3", "M=1", "copy_mib=1", "context=8192", f"store.root={root}")
    assert res.returncode == 0, res.stderr[-2000:]
    sweep = store.find_sweep(root, experiment)
    jobs = [p for p in sweep.iterdir() if (p / "meta.json").is_file()]
    df = store.load_sweep(sweep)
    assert jobs and len(df) >= len(jobs)
    assert set(df["status"]) <= {"ok", "skipped"}, df[["variant", "status", "reason"]]
    assert (df.loc[df["status"] == "skipped", "reason"].str.len() > 0).all()
