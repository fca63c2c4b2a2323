"""GPU: the toy component's resident table is generated on the device and read there, its
reference reads two streams' rows back, and its index-set output is judged with its tie rule
(what the sparse MLA arena and the top-k selection will rely on). Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")


def test_resident_input_is_built_on_the_device_and_shared(monkeypatch):
    monkeypatch.setenv("ATTNBENCH_COMPONENTS", "tests.toy_component")
    import tests.toy_component  # noqa: F401

    import cupy

    geometry = load_fuel()
    comp = registry.get("toy_gather")
    backend = backends.get("cuda")
    quick = SimpleNamespace(warmup=1, min_reps=5, max_reps=20, min_time_ms=0.0, max_noise=1.0,
                            timeout_s=5.0, cache="auto", graph=False, chain=3)
    point = {"M": 8, "context": 1 << 16, "toy_rows": 16}
    shared: dict = {}
    row = runner.measure(comp, comp.variant("cupy_gather"), point, geometry, backend, quick, seed=5,
                         roofline=None, shared=shared)
    assert row["status"] == "ok", row["reason"]
    assert row["ref_sample"] == "streams 0, 7 of 8" and row["chain"] == 3
    table = shared["inputs"].resident["table"]
    assert isinstance(table, cupy.ndarray) and table.nbytes == (1 << 16) * 64 * 4
