"""GPU: the DSA layer's CUDA variant (one KernelStep of the families' kernels) against the float64
reference through the runner's own verification (out, lse and the selection on the reference's
sample of streams), for every key_caching strategy and index dtype (fp8: pooled and per token), at
irregular and model shapes. Skipped without
a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel
from kernels.dsa_layer import spec

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()
ONCE = SimpleNamespace(warmup=0, min_reps=1, max_reps=2, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                       cache="flush", graph=False, chain=1)
# irregular: few streams (one CTA cluster of 8 a row, scan tiles past the eligible keys), a context
# just above index_topk (513 pools: the top-k keeps all but one), and 5 streams of 12288 (every
# tail length, M * splits not a multiple of the SMs); model: M = 32 at the 262144 cap
SHAPES = [(3, 2052), (5, 12288), (32, 262144)]
CASES = [(v, kc, dt, M, ctx) for v in registry.get("dsa_layer").variants if v.backend == "cuda"
         for kc in spec.KEY_CACHINGS for dt in spec.INDEX_DTYPES if not (dt == "fp8" and kc == "compress")
         for M, ctx in SHAPES]


@pytest.fixture(scope="module")
def backend():
    return backends.get("cuda")


@pytest.mark.parametrize("variant,key_caching,index_dtype,M,context", CASES,
                         ids=[f"{v.name}-{kc}-{dt}-M{M}-{ctx}" for v, kc, dt, M, ctx in CASES])
def test_cuda_variant_matches_the_reference(backend, variant, key_caching, index_dtype, M, context):
    comp = registry.get("dsa_layer")
    point = {"M": M, "context": context, "key_caching": key_caching, "index_dtype": index_dtype}
    assert comp.check_point(GEOMETRY, point) is None
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    row = runner.measure(comp, variant, point, GEOMETRY, backend, ONCE, seed=19, roofline=None)
    assert row["status"] == "ok", row["reason"]
