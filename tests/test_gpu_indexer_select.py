"""GPU: every CUDA variant of indexer_select (fused_mma, scan_then_topk) against reference.topk of
the float64 scan through the runner's own verification, at irregular and model shapes, bf16 and
fp8; and on degenerate rows built on the device: streams with few or no eligible candidates
(-1 slots, all -inf), and tied streams (every key one of 3, so each score level spans every
slice and the lower-index rule decides the set), judged strictly (members first, then -1).
Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel
from harness.verify import IndexSet, compare

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()
ONCE = SimpleNamespace(warmup=0, min_reps=1, max_reps=2, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                       cache="flush", graph=False, chain=1)
COMP = registry.get("indexer_select")
STRICT = IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=True)
SHAPES = [
    {"M": 1, "context": 1028, "pooling": "per_token"},        # C = 1028 < k = 2048: -1 slots, one slice
    {"M": 3, "context": 8204, "pooling": "pooled"},           # C = 2051: a ragged last tile, k = 512
    {"M": 5, "context": 12300, "pooling": "per_token"},       # every tail, reference on a sample
    {"M": 1, "context": 262144, "pooling": "per_token"},      # one stream: the merge's most slices
    {"M": 64, "context": 65536, "pooling": "pooled"},         # more streams than a wave's slices
    {"M": 32, "context": 262144, "pooling": "pooled"},        # the model point, 512 of 65536 pools
    {"M": 32, "context": 262144, "pooling": "per_token"},     # the model point, 2048 of 262144 tokens
]
POINTS = [{**shape, "key_dtype": dt, "key_layout": "cand_dim"} for shape in SHAPES for dt in ("bf16", "fp8")]
CASES = [v for v in COMP.variants if v.backend == "cuda"]


def _id(p):
    return f"M{p['M']}-{p['context']}-{p['pooling']}-{p['key_dtype']}"


@pytest.fixture(scope="module")
def backend():
    return backends.get("cuda")


@pytest.mark.parametrize("point", POINTS, ids=_id)
@pytest.mark.parametrize("variant", CASES, ids=lambda v: v.name)
def test_cuda_variant_matches_the_reference(backend, variant, point):
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    row = runner.measure(COMP, variant, point, GEOMETRY, backend, ONCE, seed=17, roofline=None)
    assert row["status"] == "ok", row["reason"]


def _run_strict(backend, variant, point, inputs):
    ref = COMP.reference(GEOMETRY, point, inputs)
    launch = variant.build(GEOMETRY, point, inputs, backend)
    launch.poison()
    launch()
    out = launch.outputs()["indices"]
    streams = COMP.reference_streams(GEOMETRY, point)
    if streams is not None:
        out = out[list(streams)]
    c = compare("indices", out, ref, STRICT)
    assert c.ok, c.detail


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("variant", CASES, ids=lambda v: v.name)
def test_streams_with_few_or_no_eligible_candidates(backend, variant, dtype):
    """eligible = 0 (all -inf: every slot -1), 5 (inside the first tile), 17 (one past a tile), and
    C - 1: -1 slots where fewer than k are eligible, nothing read or chosen past eligible."""
    point = {"M": 4, "context": 8192, "pooling": "per_token", "key_dtype": dtype, "key_layout": "cand_dim"}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs, _ = runner._case(COMP, GEOMETRY, point, 29, None, backend)
    inputs["eligible"][:] = [0, 5, 17, 8191]
    _run_strict(backend, variant, point, inputs)


@pytest.mark.parametrize("shape", [{"M": 4, "context": 65536, "pooling": "per_token"},
                                   {"M": 32, "context": 262144, "pooling": "pooled"}],
                         ids=lambda s: f"M{s['M']}-{s['context']}-{s['pooling']}")
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("variant", CASES, ids=lambda v: v.name)
def test_tied_streams_follow_the_lower_index_rule(backend, variant, dtype, shape):
    """Every key of a stream is one of its first 3 (cand c holds key c % 3, fp8 scales likewise):
    3 exactly equal score levels, each across every slice, so the k-th falls inside one (or the
    top level is taken whole) and only the lower-index rule gives the reference's set. Equal key
    bytes give bit-equal scores in every tile row (the same MMAs in the same order)."""
    point = {**shape, "key_dtype": dtype, "key_layout": "cand_dim"}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs, _ = runner._case(COMP, GEOMETRY, point, 31, None, backend)
    cp = backend.cp
    keys = inputs.resident["keys"]
    C = keys.shape[1]
    pick = cp.arange(C) % 3
    with backend.stream:
        keys[...] = keys[:, pick]
        if dtype == "fp8":
            scales = inputs.resident["key_scales"]
            scales[...] = scales[:, pick]
    backend.stream.synchronize()
    _run_strict(backend, variant, point, inputs)
