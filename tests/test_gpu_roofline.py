"""GPU: the roofline kernels through CuPy, byte-exact at several sizes (skipped without a GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import backends, registry, runner

pytestmark = pytest.mark.skipif(not backends.gpu_visible(), reason="no GPU visible (CuPy sees no CUDA device)")

QUICK = SimpleNamespace(warmup=1, min_reps=5, max_reps=20, min_time_ms=0.0, max_noise=1.0,
                        timeout_s=5.0, cache="flush", graph=False)


@pytest.mark.parametrize("component", ["roofline", "roofline_rmw"])
@pytest.mark.parametrize("copy_mib", [1, 3, 64])
def test_cuda_roofline_variants_exact(geometry, component, copy_mib):
    comp = registry.get(component)
    backend = backends.get("cuda")
    for v in comp.variants:
        if v.backend != "cuda":
            continue
        row = runner.measure(comp, v, {"copy_mib": copy_mib}, geometry, backend, QUICK, seed=7, roofline=None)
        assert row["status"] == "ok", f"{v.name}: {row['reason']}"
        assert row["rel_err"] == 0
