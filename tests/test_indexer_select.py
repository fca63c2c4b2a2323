"""indexer_select on the CPU: the NumPy emulation of select_fused.cu's logic (64-bit keys, the
per-CTA threshold buffer with its shrinks, select_kth's digit passes, the merge) against
reference.topk on random, tied, few-eligible, all -inf and special (NaN, +inf, -0 / +0) rows, in
any append order and at every slice count; the launch plan; the reference and the byte count; and
both CPU variants through the runner."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.verify import IndexSet, compare
from kernels.dsa_indexer import reference as rules
from kernels.dsa_indexer import scan_spec, select_model as model, select_spec as spec

QUICK = SimpleNamespace(warmup=0, min_reps=1, max_reps=1, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)
CHECK = IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=False)   # the component's


def _row(kind: str, C: int, k: int, rng) -> tuple[np.ndarray, int]:
    """(scores [C] float32, eligible) of one kind; scores past eligible are -inf, as the scan's."""
    elig = C - int(rng.integers(0, 4))
    if kind == "random":
        s = rng.standard_normal(C).astype(np.float32)
    elif kind == "ties":             # 3 levels: the k-th falls inside one that spans every slice
        s = ((rng.integers(0, 3, C) - 1) * 0.5).astype(np.float32)
    elif kind == "few_eligible":
        s = rng.standard_normal(C).astype(np.float32)
        elig = int(rng.integers(1, k)) if k > 1 else 0
    elif kind == "all_inf":
        s, elig = np.zeros(C, np.float32), 0
    elif kind == "special":          # NaN counts as -inf, +inf is chosen first and written -1, -0 == +0
        s = rng.standard_normal(C).astype(np.float32)
        for value, n in ((np.nan, 40), (np.inf, 5), (-0.0, 60), (0.0, 60), (-np.inf, 20)):
            s[rng.integers(0, C, n)] = value
    elif kind == "ascending":        # the best keys last: every slice's buffer refills to the end
        s = np.sort(rng.standard_normal(C).astype(np.float32))
    elif kind == "descending":       # the best keys first: the threshold is high at once
        s = np.sort(rng.standard_normal(C).astype(np.float32))[::-1].copy()
    else:
        raise ValueError(kind)
    s[elig:] = -np.inf
    return s, elig


def _judge(out: np.ndarray, scores: np.ndarray, k: int) -> None:
    ref = {"indices": rules.topk(scores.astype(np.float64), k)[None], "scores": scores.astype(np.float64)[None]}
    c = compare("indices", out[None], ref, CHECK)
    assert c.ok, c.detail


@pytest.mark.parametrize("kind", ["random", "ties", "few_eligible", "all_inf", "special", "ascending", "descending"])
@pytest.mark.parametrize("S", [1, 3, 8])
@pytest.mark.parametrize("R", [model.ROUND_TILES, model.ROUND_TILES_LONG])
def test_model_matches_reference_topk(kind, S, R):
    """Small k so the buffers fill and shrink many times; random append order within every round;
    R: the tiles a warp scores between count checks (fused_mma's 2, fused_mma_r16's 16)."""
    # a fixed seed per case (hash() of a str changes with every process: the buffer-full path was
    # exercised or not depending on the run)
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{S}-{R}".encode()))
    # (20000, 64): several 16-tile rounds a slice, so the long rounds shrink mid-slice too
    for C, k in ((1500, 7), (3001, 64), (777, 300), (4096, 1), (20000, 64)):
        scores, elig = _row(kind, C, k, rng)
        tiles = -(-(-(-C // model.TILE)) // S)
        trace: dict = {}
        out = model.select_row(scores, elig, k, -(-(-(-C // model.TILE)) // tiles), tiles, rng, trace, R)
        _judge(out, scores, k)
        if kind != "special":   # a +inf pick is written -1 where it falls among the members
            assert np.all(out[:np.count_nonzero(out >= 0)] >= 0), "members first, then -1"
        rounds = -(-(-(-tiles // model.WARPS)) // R)   # count checks a slice
        if kind == "random" and k <= 64 and S <= 3 and rounds > 2:
            assert trace["shrinks"] > S, "the buffer-full path was not exercised"


def test_model_at_the_model_point_writes_s_by_k_candidates():
    """2048 of 262144 at M = 32's plan: 12 slices, the top-k exact, 12 x 2048 keys reach memory."""
    rng = np.random.default_rng(5)
    C, k = 262144, 2048
    S, tiles = model.plan(32, C, k, 132, 3)
    assert (S, tiles) == (12, 1366)
    scores = rng.standard_normal(C).astype(np.float32)
    trace: dict = {}
    out = model.select_row(scores, C, k, S, tiles, None, trace)
    _judge(out, scores, k)
    assert trace["written"] == S * k


def test_ordered_keys_sort_as_the_rule():
    """ordered() is monotone over floats with -0 == +0; the key's low word puts the lower index first;
    key_index inverts it and writes +inf picks as -1."""
    vals = np.array([-np.inf, -3.0e38, -1.0, -1e-40, -0.0, 0.0, 1e-40, 2.0, 3.0e38, np.inf], np.float32)
    o = model.ordered(vals)
    assert np.all(np.diff(o.astype(np.int64)) >= 0) and o[4] == o[5]
    assert np.all(np.diff(o.astype(np.int64))[np.arange(len(vals) - 1) != 4] > 0)
    keys = model.make_keys(np.array([1.0, 1.0, np.inf], np.float32), np.array([7, 3, 9]))
    assert keys[1] > keys[0], "equal scores: the lower index is the larger key"
    assert model.key_index(keys).tolist() == [7, 3, -1]
    assert not model.live(np.array([np.nan, -np.inf], np.float32)).any()
    assert model.live(np.array([np.inf, -0.0, -3.0e38], np.float32)).all()


@pytest.mark.parametrize("spread", ["distinct", "shared_high_words"])
def test_select_kth_leaves_exactly_k(spread):
    """Exactly k keys are >= T; keys equal in their score word need the index word's passes."""
    rng = np.random.default_rng(11)
    for n, k in ((100, 1), (100, 99), (5000, 2048), (4224, 2048)):
        idx = rng.permutation(1 << 20)[:n]
        if spread == "distinct":
            keys = model.make_keys(rng.standard_normal(n).astype(np.float32), idx)
        else:
            keys = model.make_keys(np.full(n, 0.75, np.float32), idx)
        T, passes = model.select_kth(keys, k)
        assert int((keys >= np.uint64(T)).sum()) == k
        if spread == "shared_high_words":
            assert passes > 4


def test_plan_fills_the_gpu_within_the_merge():
    for M, C, k in ((32, 262144, 2048), (32, 65536, 512), (1, 262144, 2048), (64, 1028, 2048), (5, 33, 512)):
        S, tiles = model.plan(M, C, k, 132, 3)
        ntiles = -(-C // model.TILE)
        assert 1 <= S <= model.MERGE_MAX_SLICES and S * k * 8 <= model.MERGE_SMEM_MAX
        assert (S - 1) * tiles < ntiles <= S * tiles, "every slice holds a tile"
        assert M * S <= max(M, 132 * 3)
    for R in (model.ROUND_TILES, model.ROUND_TILES_LONG):   # a shrink to k leaves room for a round
        assert model.capacity(2048, R) - model.head(R) >= 2048
    assert model.capacity(2048, model.ROUND_TILES_LONG) * 8 * 3 <= 228 << 10   # 3 CTAs an SM still fit


def test_kernel_constants_agree_with_the_model():
    src = (model.HERE / model.SOURCE).read_text()
    assert "#define SEL_HEAD_OF(R) (SEL_WARPS * (R) * MMA_TILE_KEYS)" in src
    assert "#define SEL_HEAD SEL_HEAD_OF(SEL_ROUND_TILES)" in src
    assert "if (count > cap - SEL_HEAD_OF(R)) shrink(buf, k, st);" in src
    assert (model.ROUND_TILES, model.ROUND_TILES_LONG) == (2, 16)
    assert "SEL_FUSED_KERNELS(, SEL_ROUND_TILES)" in src and "SEL_FUSED_KERNELS(_r16, SEL_ROUND_TILES_LONG)" in src
    assert "#define MMA_TILE_KEYS 16" in (model.HERE / "scan_mma_tile.cuh").read_text()
    assert model.define("SEL_THREADS") == 32 * model.WARPS


@pytest.fixture(scope="module")
def comp():
    return registry.get("indexer_select")


def test_reference_is_topk_of_the_scans_reference(geometry, comp):
    point = {"M": 5, "context": 8192, "pooling": "pooled", "key_dtype": "bf16", "key_layout": "cand_dim"}
    inputs, ref = runner._case(comp, geometry, point, 3, None, backends.CpuBackend())
    scores = scan_spec.reference(geometry, point, inputs)["scores"]
    k = spec.k_selected(geometry, point)
    assert k == geometry.indexer.index_topk // geometry.indexer.kpool
    assert np.array_equal(ref["scores"], scores)
    assert np.array_equal(ref["indices"], np.stack([rules.topk(r, k) for r in scores]))


def test_bytes_are_the_keys_and_the_indices(geometry, comp):
    point = {"M": 32, "context": 262144, "pooling": "per_token", "key_dtype": "bf16", "key_layout": "cand_dim"}
    scan = scan_spec.bytes_moved(geometry, point)
    assert spec.bytes_moved(geometry, point) == scan - 32 * 262144 * 4 + 32 * 2048 * 4


@pytest.mark.parametrize("variant", ["ref_select", "model_fused"])
@pytest.mark.parametrize("point", [
    {"M": 5, "context": 8192, "pooling": "pooled", "key_dtype": "bf16", "key_layout": "cand_dim"},
    {"M": 3, "context": 4100, "pooling": "per_token", "key_dtype": "fp8", "key_layout": "cand_dim"},
    {"M": 2, "context": 1028, "pooling": "per_token", "key_dtype": "bf16", "key_layout": "dim_cand"},
], ids=lambda p: f"M{p['M']}-{p['context']}-{p['pooling']}-{p['key_dtype']}-{p['key_layout']}")
def test_cpu_variants_through_the_runner(geometry, comp, variant, point):
    row = runner.measure(comp, comp.variant(variant), point, geometry, backends.CpuBackend(), QUICK, seed=7,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]


def test_cuda_variants_refuse_what_they_cannot_run(geometry, comp):
    point = {"M": 1, "context": 8192, "pooling": "per_token", "key_dtype": "bf16", "key_layout": "dim_cand"}
    for name in ("fused_mma", "scan_then_topk"):
        assert "dim_cand" in comp.variant(name).supports(geometry, point)
    short = {**point, "context": 1028, "key_layout": "cand_dim"}     # C = 1028 < k = 2048
    assert comp.variant("fused_mma").supports(geometry, short) is None
    assert "k <= C" in comp.variant("scan_then_topk").supports(geometry, short)
