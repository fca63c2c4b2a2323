"""GPU: every CUDA variant of indexer_scan and indexer_stream (both key layouts, bf16 and fp8 keys,
bf16 queries; fp8 keys with fp8 queries, where scan_mma_e4m3, scan_wgmma_e4m3 and torch_bmm run and
the rest say why not) against the reference, through the runner's own verification (on the
reference's sample of streams), at irregular and model shapes; our own scan designs held to 1e-5
(scan_wgmma_e4m3 to 5e-3: FP8 wgmma accumulation; the component's tolerance admits torch's BF16
rounding); and streams with few or no eligible candidates.
Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel
from kernels.dsa_indexer import scan_spec

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()
ONCE = SimpleNamespace(warmup=0, min_reps=1, max_reps=2, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                       cache="flush", graph=False, chain=1)
OURS_TOLERANCE = 1e-5   # FP32 accumulation of exact products: ~1e-7 (scan_spec.checks)
# scan_wgmma_e4m3: Hopper's FP8 wgmma accumulates with reduced internal precision (DeepSeek-V3
# report §3.3.2: about 14 bits kept on H800), each of its 4 k-steps a sum of 32 products: expected
# ~1e-4 norm-wise; 5e-3 leaves room for truncation bias and still fails any wrong q / key byte
# (O(1) errors) and stays under the component's 1e-2 (SCAN_NOTES "wgmma e4m3").
VARIANT_TOLERANCE = {"scan_wgmma_e4m3": 5e-3}
SHAPES = [
    {"M": 1, "context": 1028, "pooling": "per_token"},        # one stream, a ragged last tile
    {"M": 3, "context": 8204, "pooling": "pooled"},           # C = 2051: not a multiple of 16 or 64
    {"M": 5, "context": 12300, "pooling": "per_token"},       # every tail, reference on a sample
    {"M": 32, "context": 262144, "pooling": "pooled"},        # the model point, pooled keys
    {"M": 32, "context": 262144, "pooling": "per_token"},     # the model point, 2 GiB of keys
]
# (key_dtype, query_dtype): fp8 queries only beside fp8 keys (no variant multiplies bf16 keys by
# e4m3 queries; the BF16-query designs refuse fp8 queries: scan_variants._refuse_fp8_queries)
DTYPES = [("bf16", "bf16"), ("fp8", "bf16"), ("fp8", "fp8")]
POINTS = [{**shape, "key_dtype": kd, "key_layout": lay, "query_dtype": qd} for shape in SHAPES
          for lay in scan_spec.KEY_LAYOUTS for kd, qd in DTYPES]
CASES = [(c, v) for c in ("indexer_scan", "indexer_stream") for v in registry.get(c).variants if v.backend == "cuda"]


def _id(p):
    return f"M{p['M']}-{p['context']}-{p['pooling']}-{p['key_dtype']}-{p['key_layout']}-q{p['query_dtype']}"


def _skip_floor_at_fp8_queries(component, qdtype):
    if component == "indexer_stream" and qdtype == "fp8":
        pytest.skip("the floor never reads q: its bf16-query cases cover it")


@pytest.fixture(scope="module")
def backend():
    return backends.get("cuda")


@pytest.mark.parametrize("point", POINTS, ids=_id)
@pytest.mark.parametrize("component,variant", CASES, ids=[f"{c}-{v.name}" for c, v in CASES])
def test_cuda_variant_matches_the_reference(backend, component, variant, point):
    _skip_floor_at_fp8_queries(component, point["query_dtype"])
    comp = registry.get(component)
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    row = runner.measure(comp, variant, point, GEOMETRY, backend, ONCE, seed=17, roofline=None)
    assert row["status"] == "ok", row["reason"]
    if component == "indexer_scan" and not variant.peer:
        tol = VARIANT_TOLERANCE.get(variant.name, OURS_TOLERANCE)
        assert row["rel_err"] <= tol, f"{variant.name}: rel_err {row['rel_err']:.3e} > {tol:.0e}"


@pytest.mark.parametrize("layout,dtype,qdtype", [(lay, kd, qd) for lay in scan_spec.KEY_LAYOUTS for kd, qd in DTYPES])
@pytest.mark.parametrize("component,variant", CASES, ids=[f"{c}-{v.name}" for c, v in CASES])
def test_streams_with_few_or_no_eligible_candidates(backend, component, variant, layout, dtype, qdtype):
    """eligible = 0 (everything -inf / 0), 5 (inside the first tile), 17 (one past a tile), C - 1:
    every kernel reads only below it and writes every element."""
    _skip_floor_at_fp8_queries(component, qdtype)
    comp = registry.get(component)
    point = {"M": 4, "context": 4100, "pooling": "per_token", "key_dtype": dtype, "key_layout": layout,
             "query_dtype": qdtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs, _ = runner._case(comp, GEOMETRY, point, 29, None, backend)
    inputs["eligible"][:] = [0, 5, 17, 4099]
    ref = comp.reference(GEOMETRY, point, inputs)
    launch = variant.build(GEOMETRY, point, inputs, backend)
    launch.poison()
    launch()
    bad = [c.describe() for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok]
    assert not bad, bad
