"""GPU: every CUDA variant of kpool_compress (ours and the torch peer) and dsa_expand against the
float64 / exact references, through the runner's own verification (the components' checks, on
the reference's sample of streams), at irregular and model shapes, every tail (M >= 4 streams sit
at four positions), the dense rule and small top-k widths; and the compress kernel with a grid
far smaller than its work (many grid-stride iterations a thread). Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.cuda import KernelCall
from harness.fuel import load_fuel

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()
ONCE = SimpleNamespace(warmup=0, min_reps=1, max_reps=2, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                       cache="flush", graph=False, chain=1)
COMPRESS_POINTS = [
    {"M": 1, "context": 8192},
    {"M": 3, "context": 1028},        # P = 257: a ragged last CTA
    {"M": 7, "context": 65540},       # irregular M and context, every tail
    {"M": 32, "context": 262144},     # the model point: 2 GiB of keys and 2 GiB of gates
]
EXPAND_POINTS = [
    {"M": 5, "context": 1024, "topk": 2048},      # dense: every stream below index_topk
    {"M": 4, "context": 2048, "topk": 2048},      # dense up to the boundary (t = 2047)
    {"M": 6, "context": 2052, "topk": 2048},      # sparse from the boundary on, every tail
    {"M": 7, "context": 8196, "topk": 64},        # a small top-k: W = 128
    {"M": 32, "context": 262144, "topk": 2048},   # the model point
    {"M": 64, "context": 1048576, "topk": 2048},
]
CASES = ([("kpool_compress", v, p) for v in registry.get("kpool_compress").variants if v.backend == "cuda"
          for p in COMPRESS_POINTS]
         + [("dsa_expand", v, p) for v in registry.get("dsa_expand").variants if v.backend == "cuda"
            for p in EXPAND_POINTS])


@pytest.fixture(scope="module")
def backend():
    return backends.get("cuda")


@pytest.mark.parametrize("component,variant,point", CASES,
                         ids=[f"{c}-{v.name}-" + "-".join(f"{k}{x}" for k, x in p.items()) for c, v, p in CASES])
def test_cuda_variant_matches_the_reference(backend, component, variant, point):
    comp = registry.get(component)
    assert comp.check_point(GEOMETRY, point) is None
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    row = runner.measure(comp, variant, point, GEOMETRY, backend, ONCE, seed=17, roofline=None)
    assert row["status"] == "ok", row["reason"]


def test_compress_with_a_tiny_grid_loops_over_everything(backend):
    """Two CTAs for 7 x 2049 pools: each thread runs ~450 grid-stride iterations (its channel
    group fixed), and the result is still exact to the tolerance everywhere."""
    comp = registry.get("kpool_compress")
    point = {"M": 7, "context": 8196}
    inputs, ref = runner._case(comp, GEOMETRY, point, 29, None, backend)
    launch = comp.variant("compress_cuda").build(GEOMETRY, point, inputs, backend)
    k = launch.kernels[0]
    launch.kernels[0] = KernelCall(k.fn, 2, k.threads, k.smem, k.args)
    launch.poison()
    launch()
    bad = [c.describe() for c in runner.checked(comp, point, launch.outputs(), ref,
                                                runner.reference_streams(comp, GEOMETRY, point)) if not c.ok]
    assert not bad, bad


def test_expand_writes_every_slot_even_when_every_pool_is_minus_one(backend):
    comp = registry.get("dsa_expand")
    point = {"M": 4, "context": 8192, "topk": 2048}
    inputs, _ = runner._case(comp, GEOMETRY, point, 31, None, backend)
    inputs["pools"][:] = -1
    ref = comp.reference(GEOMETRY, point, inputs)
    launch = comp.variant("expand_cuda").build(GEOMETRY, point, inputs, backend)
    launch.poison()
    launch()
    out = launch.outputs()["selection"]
    assert np.array_equal(out, ref["selection"])
    assert (out[:, :2048] == -1).all() and (out[1, 2048:2051] == [8188, 8189, 8190]).all()
