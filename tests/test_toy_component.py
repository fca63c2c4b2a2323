"""A component defined only in tests/ (tests/toy_component.py: its axes, its resident input, its
reference over a sample of streams, an index-set output, one CPU variant) goes through the whole
path with no change under harness/: swept with -m, verified, stored, reported and compared."""

from __future__ import annotations

import numpy as np
import pytest

from harness import registry, store
from harness.fuel import REPO_ROOT

PLUGIN = {"ATTNBENCH_COMPONENTS": "tests.toy_component"}


@pytest.fixture()
def toy_cli(cli, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_COMPONENTS", PLUGIN["ATTNBENCH_COMPONENTS"])
    return cli


def test_toy_component_is_swept_verified_stored_reported_and_compared(toy_cli, tmp_path):
    root, out = tmp_path / "store", tmp_path / "reports"
    for sweep in ("toy_a", "toy_b"):
        res = toy_cli("-m", "component=toy_gather", "M=2,3", "context=1024", "toy_rows=6", "backend=cpu",
                      "timing=quick", f"sweep={sweep}", f"store.root={root}")
        assert res.returncode == 0, res.stderr
    rows = store.load_sweep(store.find_sweep(root, "toy_a"))
    assert sorted(rows["M"]) == [2, 3] and set(rows["status"]) == {"ok"}, rows[["M", "status", "reason"]]
    by_m = rows.set_index("M")
    # M = 3: the reference ran on a sample and the row says which; M = 2: on every stream.
    assert by_m.loc[3, "ref_sample"] == "streams 0, 2 of 3" and by_m.loc[2, "ref_sample"] == "all"
    assert "best: index set" in by_m.loc[3, "checks"] and "out: rel_err <= 1.0e-05" in by_m.loc[3, "checks"]
    assert set(rows["point_axes"]) == {"M,context,toy_rows"}
    assert (rows["toy_rows"] == 6).all() and (rows["context"] == 1024).all()
    assert (rows["resident_bytes"] == 1024 * 64 * 4).all()  # the table, counted once per row

    res = toy_cli("report", "toy_a", "--root", str(root), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (folder,) = list(out.iterdir())
    text = (folder / "README.md").read_text()
    assert "toy_gather" in text and "toy_rows" in text
    for ms in rows["ms_p50"]:
        assert f"{ms * 1e3:.2f}" in text

    res = toy_cli("compare", "toy_a", "toy_b", "--root", str(root))
    assert res.returncode == 0, res.stderr
    assert "2 shared rows; 0 only in A, 0 only in B" in res.stdout


@pytest.mark.parametrize("args,message", [
    (["context=1001"], "context: 1001 is not a multiple of the pool size"),
    (["toy_rows=1"], "toy_rows: 1 is out of range; allowed: integers 2..64"),
    (["context=4", "toy_rows=8"], "toy_rows: 8 > context=4"),
])
def test_the_toy_components_own_rules_give_one_line(toy_cli, tmp_path, args, message):
    root = tmp_path / "store"
    res = toy_cli("component=toy_gather", *args, "backend=cpu", f"store.root={root}")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and message in lines[0], res.stderr
    assert not root.exists()


def test_without_the_plugin_the_component_and_its_axis_are_unknown(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNBENCH_COMPONENTS", raising=False)
    res = cli("component=toy_gather", "backend=cpu", f"store.root={tmp_path / 'store'}")
    assert res.returncode == 2 and "component: unknown value 'toy_gather'" in res.stderr


def test_a_wrong_resident_size_or_a_wrong_member_fails_the_row(geometry, monkeypatch):
    """The toy's variant passes; the same launch with one wrong index-set member fails, and a
    resident input that does not match its declared size fails before anything is timed."""
    import dataclasses
    from types import SimpleNamespace

    from harness import backends, runner

    monkeypatch.setenv("ATTNBENCH_COMPONENTS", PLUGIN["ATTNBENCH_COMPONENTS"])
    import tests.toy_component as toy  # noqa: F401  (registers toy_gather)

    comp = registry.get("toy_gather")
    quick = SimpleNamespace(warmup=0, min_reps=3, max_reps=5, min_time_ms=0.0, max_noise=1.0,
                            timeout_s=5.0, cache="auto", graph=False, chain=1)
    point = {"M": 3, "context": 256, "toy_rows": 5}
    good = comp.variants[0]
    row = runner.measure(comp, good, point, geometry, backends.CpuBackend(), quick, seed=3, roofline=None)
    assert row["status"] == "ok", row["reason"]

    class WrongMember(toy._HostGather):
        def __call__(self):
            super().__call__()
            scores = self.table[self.rows[-1]].sum(axis=1, dtype=np.float64)
            self.best[-1] = [np.argmax(scores), np.argmin(scores)]  # keeps the best, adds the worst

    wrong = dataclasses.replace(good, name="wrong_member", build=lambda g, p, i, b: WrongMember(i))
    row = runner.measure(comp, wrong, point, geometry, backends.CpuBackend(), quick, seed=3, roofline=None)
    assert row["status"] == "failed" and "best" in row["reason"] and row["n"] == 0

    bad_size = dataclasses.replace(comp, resident=(dataclasses.replace(comp.resident[0], nbytes=lambda g, p: 1),))
    row = runner.measure(bad_size, good, point, geometry, backends.CpuBackend(), quick, seed=3, roofline=None)
    assert row["status"] == "failed" and "declared 1" in row["reason"]


def test_the_plugin_module_lives_outside_the_harness_and_kernels():
    path = REPO_ROOT / "tests" / "toy_component.py"
    assert path.is_file()
    harness_files = " ".join(p.read_text() for p in (REPO_ROOT / "harness").glob("*.py"))
    assert "toy_gather" not in harness_files and "toy_rows" not in harness_files
