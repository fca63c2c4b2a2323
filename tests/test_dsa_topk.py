"""The DSA top-k component on the CPU: the score rows of every kind, the reference against a plain
sort, the NumPy emulation of topk_radix.cu's multi-CTA logic (histogram digits, cluster merges, the
equal-key quota split, the index-order take, buffer overflow) against reference.topk on random,
tied, few-eligible, all -inf and non-finite rows, the counts, the CPU variants through the runner,
the resident design's emulation (topk_resident.cu: the (j, t, s) element mapping, the packed tie
scan, the counter claims in any order) likewise, the one-CTA and split designs' emulations
(topk_onecta.cuh's select; topk_split.cu's slices, candidates, final select and ring), and the
IndexSet check failing a wrong member and a
tie resolved the other way."""

from __future__ import annotations

import re
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.verify import IndexSet, compare
from kernels.dsa_indexer import reference as rules
from kernels.dsa_indexer import topk_model, topk_spec as spec, topk_variants

QUICK = SimpleNamespace(warmup=0, min_reps=2, max_reps=3, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)
STRICT = IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=True)


def _point(**kw):
    return {"M": 5, "context": 8192, "pooling": "per_token", "topk": 2048, "score_rows": "random", **kw}


def _sorted_rule(scores: np.ndarray, k: int) -> np.ndarray:
    """The rule by a plain Python sort: (-score, index), NaN as -inf, non-finite picks -1."""
    s = [(-np.inf if np.isnan(x) else float(x)) for x in scores]
    order = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
    members = [i for i in order if np.isfinite(s[i])]
    return np.array(members + [-1] * (k - len(members)), np.int32)


def _rows(kind: str, C: int, k: int, rng) -> np.ndarray:
    """Degenerate and ordinary rows for the emulation: float32 [C]."""
    if kind == "random":
        return rng.standard_normal(C).astype(np.float32)
    if kind == "ties":              # few values, zeros of both signs among them
        return rng.choice(np.array([-1.0, -0.0, 0.0, 0.5, 2.0], np.float32), C, p=[.2, .2, .2, .2, .2])
    if kind == "few_eligible":
        row = np.full(C, -np.inf, np.float32)
        e = int(rng.integers(0, k))
        row[rng.choice(C, e, replace=False)] = rng.standard_normal(e)
        return row
    if kind == "all_minus_inf":
        return np.full(C, -np.inf, np.float32)
    if kind == "non_finite":       # NaN as -inf, +inf chosen first and then -1, extremes
        vals = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, -1e-45, 1.0], np.float32)
        return rng.choice(vals, C)
    if kind == "sorted":
        return np.sort(rng.standard_normal(C).astype(np.float32))
    if kind == "one_level":         # every score equal: the lowest k indices
        return np.full(C, 0.5, np.float32)
    raise ValueError(kind)


KINDS = ("random", "ties", "few_eligible", "all_minus_inf", "non_finite", "sorted")


@pytest.mark.parametrize("kind", KINDS)
def test_reference_is_the_plain_sort_rule(kind):
    rng = np.random.default_rng(7)
    for C, k in ((50, 7), (300, 64), (33, 40)):
        row = _rows(kind, C, k, rng)
        assert np.array_equal(rules.topk(row.astype(np.float64), k), _sorted_rule(row, k)), (kind, C, k)


def test_keys_preserve_order_and_fold_the_special_values():
    x = np.sort(np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3)
    x = np.concatenate([[-3.4e38], x, [3.4e38]]).astype(np.float32)
    key = topk_model.keys(x)
    assert (np.diff(key.astype(np.int64)) >= 0).all() and key.min() > 0
    special = topk_model.keys(np.array([-0.0, 0.0, -np.inf, np.nan, -np.nan, np.inf], np.float32))
    assert special[0] == special[1] == 0x80000000
    assert special[2] == special[3] == special[4] == 0
    assert special[5] == topk_model.KEY_POSINF and special[5] >> 21 == topk_model.BIN_POSINF
    assert topk_model.keys(np.array([3.4e38], np.float32))[0] < topk_model.KEY_POSINF
    assert topk_model.keys(np.array([-3.4e38], np.float32))[0] >> 21 >= 4   # bins 1..3 hold no key


@pytest.mark.parametrize("bound", [False, True], ids=["radix", "bound"])
@pytest.mark.parametrize("cap", [4, 3072], ids=["cap4-overflow", "cap3072"])
@pytest.mark.parametrize("cs", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", KINDS)
def test_the_radix_emulation_gives_the_reference_set(kind, cs, cap, bound):
    """Several rows per case, irregular lengths (C % 4 != 0, slices of unequal length, empty
    slices when C < 4 cs), k from 1 to C (k > 2 x 512 cs: no bound): the emulation's row is the
    reference's exactly, members first and then -1, no slot left unwritten; radix_cluster's logic
    and dsa_topk_bound's (counts over the keys >= the lower bound)."""
    rng = np.random.default_rng(zlib.crc32(repr((kind, cs, cap, bound)).encode()))  # hash() of a str varies by process
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (4096, 1), (999, 999), (20000, 64), (30000, 700)):
        row = _rows(kind, C, k, rng)
        out, _ = topk_model.select_row(row, k, cs, cap, bound)
        ref = rules.topk(row.astype(np.float64), k)
        res = compare("indices", out[None], {"indices": ref[None], "scores": row[None].astype(np.float64)}, STRICT)
        assert res.ok, (kind, C, k, res.describe())


def test_the_emulation_takes_a_partial_quota_in_index_order_across_ctas():
    """A level of equal scores straddles the k-th and every slice: the lower ranks take all their
    equal keys, one CTA a part (the lowest indices), the higher ones none."""
    rng = np.random.default_rng(1)
    C, k, cs = 8000, 500, 4
    row = rng.integers(0, 10, C).astype(np.float32)        # ~800 a level: the top level is the k-th
    out, trace = topk_model.select_row(row, k, cs, 3072)
    assert trace.partial, trace
    c = trace.partial[0]
    assert all(q > 0 for q in trace.quota[:c]) and all(q == 0 for q in trace.quota[c + 1:])
    assert sum(trace.quota) == k and np.array_equal(np.sort(out), np.sort(rules.topk(row.astype(np.float64), k)))
    assert np.array_equal(np.sort(out), np.flatnonzero(row == 9)[:k])


def test_the_emulation_overflows_the_buffer_on_sorted_rows_and_stays_exact():
    rng = np.random.default_rng(2)
    row = np.sort(rng.standard_normal(262144).astype(np.float32))
    out, trace = topk_model.select_row(row, 2048, 8, 3072)
    assert trace.overflow[-1] and not any(trace.overflow[:-1])   # the top keys all live in the last slice
    assert set(out.tolist()) == set(range(262144 - 2048, 262144))


@pytest.mark.parametrize("kind", spec.SCORE_ROW_KINDS)
@pytest.mark.parametrize("pooling", ["pooled", "per_token"])
def test_score_rows_of_each_kind(geometry, kind, pooling):
    point = _point(score_rows=kind, pooling=pooling, context=32768, M=6)
    C, k = spec.n_candidates(geometry, point), spec.k_selected(geometry, point)
    scores = spec.make_inputs(geometry, point, np.random.default_rng(3))["scores"]
    assert scores.dtype == np.float32 and scores.shape == (6, C)
    for m in range(6):
        e = spec.eligible(geometry, point, m)
        assert e == ((32768 - m % 4) // 4 if pooling == "pooled" else 32768 - m % 4)
        row = scores[m]
        assert np.isneginf(row[e:]).all()
        finite = row[np.isfinite(row)]
        assert not np.isnan(row).any() and not (row == 0).any()
        if kind == "few_eligible":
            assert len(finite) < k and (m != 0 or len(finite) == 0)
            continue
        assert len(finite) == e
        if kind == "sorted":
            assert (np.diff(finite) >= 0).all()
        if kind == "ties":
            kth = np.sort(finite)[::-1][k - 1]
            above, equal = int((finite > kth).sum()), int((finite == kth).sum())
            assert above < k < above + equal, "the k-th level straddles the boundary"
            assert len(np.unique(finite)) < 64
        if kind == "random":
            assert abs(finite.mean()) < 0.05 and abs(finite.std() - 1) < 0.05


def test_counts_and_the_model_point(geometry):
    point = _point(M=32, context=262144, pooling="pooled")
    assert spec.n_candidates(geometry, point) == 65536 and spec.k_selected(geometry, point) == 512
    assert spec.k_selected(geometry, {**point, "topk": 8192}) == 2048     # index_topk counted in pools
    per_token = {**point, "pooling": "per_token"}
    assert spec.n_candidates(geometry, per_token) == 262144 and spec.k_selected(geometry, per_token) == 2048
    assert spec.bytes_moved(geometry, per_token) == 32 * 262144 * 4 + 32 * 2048 * 4
    assert spec.flops(geometry, per_token) == 0
    assert registry.get("dsa_topk").layers(geometry) == geometry.n_dsa_layers


def test_point_rules_are_one_line(geometry):
    assert "whole number of pools" in spec.check_point(geometry, _point(pooling="pooled", topk=2050))
    assert "allowed: topk <= 8192" in spec.check_point(geometry, _point(context=8192, topk=16384))
    assert spec.check_point(geometry, _point()) is None


def test_reference_samples_streams_only_for_large_rows(geometry):
    assert spec.reference_streams(geometry, _point(M=64, context=8192)) is None
    assert spec.reference_streams(geometry, _point(M=32, context=262144)) == [0, 10, 21, 31]
    point = _point(M=3, context=8192)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(4))
    ref = spec.reference(geometry, point, inputs)
    assert ref["indices"].shape == (3, 2048) and ref["scores"].dtype == np.float64
    assert np.array_equal(ref["indices"][1], _sorted_rule(inputs["scores"][1], 2048))


@pytest.mark.parametrize("variant", ["ref_topk", "model_radix", "model_bound", "model_resident", "model_onecta",
                                     "model_split", "model_union", "model_union_own", "model_union_own_regions",
                                     "model_union_early3",
                                     "model_union_early4"])
@pytest.mark.parametrize("kind", spec.SCORE_ROW_KINDS)
def test_cpu_variants_pass_through_the_runner(geometry, variant, kind):
    comp = registry.get("dsa_topk")
    point = _point(score_rows=kind, pooling="pooled", context=16388, M=3)   # C = 4097: C % 4 != 0
    row = runner.measure(comp, comp.variant(variant), point, geometry, backends.CpuBackend(), QUICK, seed=5,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["bytes"] == spec.bytes_moved(geometry, point)


def test_the_check_fails_a_wrong_member_and_a_tie_taken_the_other_way(geometry):
    comp = registry.get("dsa_topk")
    point = _point(score_rows="ties", M=2)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(6))
    ref = spec.reference(geometry, point, inputs)
    (check,) = comp.checks(point).values()
    out = ref["indices"].copy()
    rng = np.random.default_rng(0)
    out[0] = rng.permutation(out[0])              # any order passes
    assert compare("indices", out, ref, check).ok
    s = ref["scores"][0]
    chosen = set(ref["indices"][0].tolist())
    kth = min(s[i] for i in chosen)
    # a tie resolved the other way: drop the highest-index member at the k-th score, take the
    # lowest-index candidate of that score left out
    tied_in = max(i for i in chosen if s[i] == kth)
    tied_out = next(i for i in range(len(s)) if s[i] == kth and i not in chosen)
    swapped = out.copy()
    swapped[0][swapped[0] == tied_in] = tied_out
    res = compare("indices", swapped, ref, check)
    assert not res.ok and "lower_index keeps the lower index" in res.detail, res.describe()
    wrong = out.copy()
    loser = next(i for i in range(len(s)) if np.isfinite(s[i]) and s[i] < kth)   # never chosen
    wrong[0][0] = loser
    res = compare("indices", wrong, ref, check)
    assert not res.ok and f"wrong member {loser}" in res.detail, res.describe()
    poisoned = out.copy()
    poisoned[1][5] = topk_model.POISON
    assert compare("indices", poisoned, ref, check).unwritten == 1


def test_few_eligible_rows_need_their_minus_one_slots(geometry):
    point = _point(score_rows="few_eligible", M=3)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(8))
    ref = spec.reference(geometry, point, inputs)
    (check,) = registry.get("dsa_topk").checks(point).values()
    assert (ref["indices"][0] == -1).all(), "row 0 has no eligible candidate"
    out = ref["indices"].copy()
    out[2] = out[2][::-1]                          # -1 slots anywhere: still the same row
    assert compare("indices", out, ref, check).ok
    out[2][out[2] == -1] = np.flatnonzero(np.isneginf(ref["scores"][2]))[:int((out[2] == -1).sum())]
    assert not compare("indices", out, ref, check).ok   # a -inf candidate in a -1 slot


@pytest.mark.parametrize("M,expect", [(1, 8), (8, 8), (16, 8), (17, 8), (32, 8), (33, 4), (64, 4), (66, 2),
                                      (132, 1), (4096, 1)])
def test_cluster_pick_fills_the_sms(M, expect):
    assert topk_variants.pick_cluster(M, 132) == expect


@pytest.mark.parametrize("M,C,expect", [(32, 262144, 8), (32, 262143, 4), (32, 65536, 4), (32, 16384, 4),
                                        (1, 1048576, 8), (1, 8192, 4), (64, 65536, 4), (66, 8192, 2),
                                        (132, 65536, 1)])
def test_the_length_pick_caps_short_rows_at_four(M, C, expect):
    assert topk_variants.pick_cluster_len(M, C, 132) == expect


@pytest.mark.parametrize("kind", ["random", "ties", "sorted", "few_eligible"])
def test_the_emulation_at_the_length_pick_gives_the_reference_set(kind):
    """The cluster sizes radix_cluster_len and radix_lean launch at the experiment's M = 32 shapes
    (scaled down in C, the pick taken at the full length): the emulation's row is the reference's."""
    rng = np.random.default_rng(11)
    for C_full, C, k in ((262144, 4096, 2048), (65536, 4000, 512), (16384, 1024, 512)):
        cs = topk_variants.pick_cluster_len(32, C_full, 132)
        row = _rows(kind, C, k, rng)
        out, _ = topk_model.select_row(row, k, cs, topk_variants.radix_define("DSA_TOPK_CAP"))
        ref = rules.topk(row.astype(np.float64), k)
        res = compare("indices", out[None], {"indices": ref[None], "scores": row[None].astype(np.float64)}, STRICT)
        assert res.ok, (kind, C_full, cs, res.describe())


@pytest.mark.parametrize("C,k,cs", [(262144, 2048, 4), (262144, 2048, 8), (65536, 512, 4), (65536, 2048, 4)])
def test_the_bound_is_below_the_kth_key_and_fits_the_buffer(C, k, cs):
    """dsa_topk_bound at the model points (random rows): tlb <= T (at least k keys >= it), tlb > 0
    (a bound at all), and every CTA's keys >= tlb fit its 3072 entries (no overflow re-reads)."""
    rng = np.random.default_rng(C + k + cs)
    row = rng.standard_normal(C).astype(np.float32)
    key = topk_model.keys(row)
    out, trace = topk_model.select_row(row, k, cs, topk_variants.radix_define("DSA_TOPK_CAP"), bound=True)
    assert trace.tlb > 0 and int((key >= trace.tlb).sum()) >= k and trace.tlb <= trace.T
    assert not any(trace.overflow), ((key >= trace.tlb).sum(), cs)
    assert np.array_equal(np.sort(out), np.sort(rules.topk(row.astype(np.float64), k)))


def test_the_bound_groups_and_its_degenerate_rows():
    # 2 x 512 x cs / R >= k lane groups' pairs, R a power of two <= 32
    assert topk_model.bound_group_lanes(2048, 4) == 2 and topk_model.bound_group_lanes(2048, 8) == 4
    assert topk_model.bound_group_lanes(512, 4) == 8 and topk_model.bound_group_lanes(64, 8) == 32
    assert topk_model.bound_group_lanes(3000, 4) == 1
    assert topk_model.bound_group_lanes(8192, 4) == 0 and topk_model.bound_group_lanes(4097, 4) == 0
    # an all -inf row, and a row whose finite keys sit in one thread's group: no bound (tlb 0)
    _, trace = topk_model.select_row(np.full(8192, -np.inf, np.float32), 512, 4, 3072, bound=True)
    assert trace.tlb == 0
    row = np.full(8192, -np.inf, np.float32)
    row[:3] = 1.0
    out, trace = topk_model.select_row(row, 512, 4, 3072, bound=True)
    assert trace.tlb == 0 and sorted(out[:3].tolist()) == [0, 1, 2] and (out[3:] == -1).all()


def test_the_launcher_reads_the_kernel_declarations():
    assert topk_variants.radix_define("DSA_TOPK_THREADS") == 512
    assert topk_variants.radix_define("DSA_TOPK_CAP") >= 2048
    text = (topk_variants.HERE / topk_variants.RADIX_SOURCE).read_text()
    for cs in topk_variants.CLUSTER_SIZES:
        assert f"DSA_TOPK_KERNEL({cs})" in text
    for kernel in ("radix", "lean", "bound"):                                  # every kernel a size
        assert f"dsa_topk_{kernel}_c##CS" in text


def test_gpu_variants_skip_with_a_reason_here(geometry):
    comp = registry.get("dsa_topk")
    ties = _point(score_rows="ties")
    assert "tie_break" in comp.variant("flashinfer_topk").supports(geometry, ties)
    if not backends.gpu_visible():
        for name in ("torch_topk", "flashinfer_topk_lower"):
            assert comp.variant(name).supports(geometry, _point())


# ---- topk_resident.cu: the row held on chip ----------------------------------------------------


def _strict_ok(out, row, k):
    ref = rules.topk(row.astype(np.float64), k)
    return compare("indices", out[None], {"indices": ref[None], "scores": row[None].astype(np.float64)}, STRICT)


@pytest.mark.parametrize("cs", [1, 2, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_the_resident_emulation_gives_the_reference_set(kind, cs):
    """Irregular lengths (C % 4 != 0, empty slices when C < 4 cs, partial chunks), k from 1 to
    past C; the ranks claim their output slots in a random order (the kernel's atomics give any):
    the emulation's row is the reference's exactly, members first, then -1, no slot unwritten."""
    rng = np.random.default_rng([KINDS.index(kind), cs])
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (999, 999), (5000, 6000), (20000, 64), (30001, 700)):
        row = _rows(kind, C, min(k, C), rng)         # (few_eligible: fewer than min(k, C) finite)
        out, _ = topk_model.select_row_resident(row, k, cs, rng.permutation(cs))
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, cs, res.describe())


def test_the_resident_tie_prefix_is_index_order_over_the_strided_mapping():
    """Thread t holds elements 4 (t + 1024 j) + s: its values are not an index range, so the lowest
    indices among the ties must come from the (chunk, thread, s) ranks. One level of equal scores
    over a whole 65536 row (k = 8192: 4096 ties a chunk, the 16-bit fields full to 4096), and a
    level straddling the slices of a cluster of 4 (one rank takes a part): the lowest k indices."""
    row = np.full(65536, 0.5, np.float32)
    out, trace = topk_model.select_row_resident(row, 8192, 1)
    assert trace.quota == [8192] and trace.ties == [65536]
    assert np.array_equal(np.sort(out), np.arange(8192))
    rng = np.random.default_rng(5)
    row = rng.integers(0, 4, 262144).astype(np.float32)          # ~65536 a level: the top one straddles
    k = 24000                                                     # rank 0 all (~16384), rank 1 a part
    out, trace = topk_model.select_row_resident(row, k, 4, [3, 1, 0, 2])
    assert 0 < trace.quota[0] == trace.ties[0] and 0 < trace.quota[1] < trace.ties[1] and trace.quota[2:] == [0, 0]
    assert np.array_equal(np.sort(out), np.flatnonzero(row == 3)[:k])
    # a tie level scattered so that one thread's ties sit in several chunks and skip threads
    row = np.zeros(65536, np.float32) - 1.0
    tied = np.array([4 * (7 + 1024 * j) + s for j in (0, 3, 9, 15) for s in (1, 3)] + [4 * 8 + 2, 4 * 6 + 0])
    row[tied] = 2.0
    out, _ = topk_model.select_row_resident(row, 5, 1)
    assert np.array_equal(np.sort(out), np.sort(tied)[:5])


def test_the_resident_emulation_on_the_model_rows():
    """The model points' shapes at full length: random 512 of 65536 (1 CTA), 2048 of 262144 (4 CTAs),
    and a sorted 262144 row whose members all sit in the last slice."""
    rng = np.random.default_rng(9)
    for C, k, kind in ((65536, 512, "random"), (262144, 2048, "random"), (262144, 2048, "sorted")):
        row = _rows(kind, C, k, rng)
        cs = topk_variants.pick_resident(C)
        out, _ = topk_model.select_row_resident(row, k, cs, rng.permutation(cs))
        assert _strict_ok(out, row, k).ok, (C, k, kind)


@pytest.mark.parametrize("C,one,wide", [(1, 1, 1), (4097, 1, 1), (32768, 1, 1), (32769, 1, 2), (65536, 1, 2),
                                        (65537, 2, 4), (131072, 2, 4), (131073, 4, 4), (262144, 4, 4),
                                        (262145, None, None), (1048576, None, None)])
def test_the_resident_pick(C, one, wide):
    assert topk_variants.pick_resident(C) == one and topk_variants.pick_resident_wide(C) == wide
    if one:
        L = (-(-C // one) + 3) & ~3
        assert L <= topk_model.RES_SLICE and one * L >= C


def test_the_resident_variants_refuse_rows_past_four_slices(geometry):
    comp = registry.get("dsa_topk")
    long_row = _point(M=1, context=1048576, pooling="per_token")
    for name in ("resident", "resident_wide", "model_resident"):
        reason = comp.variant(name).supports(geometry, long_row)
        assert reason and "262144 candidates" in reason and "1048576" in reason and "\n" not in reason
        assert comp.variant(name).supports(geometry, _point(M=32, context=262144, pooling="per_token")) is None


def test_the_resident_launcher_reads_the_kernel_declarations():
    d = topk_variants.resident_define
    assert d("DSA_TOPK_RES_THREADS") == topk_model.RES_THREADS == 1024
    assert d("DSA_TOPK_RES_SLICE") == topk_model.RES_SLICE == 4 * 1024 * (d("DSA_TOPK_RES_REG_CHUNKS")
                                                                          + d("DSA_TOPK_RES_SMEM_CHUNKS"))
    assert d("DSA_TOPK_RES_REG_CHUNKS") + d("DSA_TOPK_RES_SMEM_CHUNKS") == topk_model.RES_CHUNKS
    # one CTA an SM: the H200's opt-in limit a block (227 KiB) and the SM's 228 KiB less 1 KiB reserved
    assert d("DSA_TOPK_RES_SMEM_BYTES") <= 232448
    text = (topk_variants.HERE / topk_variants.RESIDENT_SOURCE).read_text()
    for cs in topk_variants.RESIDENT_SIZES:
        assert f"DSA_TOPK_RES_KERNEL({cs}," in text


# ---- topk_onecta.cu: one CTA a row, the threshold bin buffered ----------------------------------


@pytest.mark.parametrize("cap", [4, 2560], ids=["cap4-overflow", "cap2560"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_onecta_emulation_gives_the_reference_set(kind, cap):
    """Irregular lengths (C % 4 != 0), k from 1 to past C, every row kind (ties with -0 / +0 at the
    k-th, few eligible, all -inf, NaN / +inf / extremes, sorted), the buffer overflowing (cap 4) or
    not; the counter's claims in a random order: the emulation's row is the reference's exactly,
    members first, then -1, no slot unwritten or written twice."""
    rng = np.random.default_rng(zlib.crc32(repr(("onecta", kind, cap)).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (4096, 1), (999, 999), (5000, 6000), (20000, 64),
                 (30001, 700)):
        row = _rows(kind, C, min(k, C), rng)
        out, _ = topk_model.select_row_onecta(row, k, cap, rng)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, cap, res.describe())


def test_the_onecta_paths_are_exercised():
    """Each path of the kernel on a row built for it: direct members and a one-key threshold (random),
    a partial take of a tie level in index order, the buffer overflowing (one level over the row:
    the lowest k indices), +inf at the threshold (every slot -1), fewer nonzero keys than k (b0 = 0)."""
    rng = np.random.default_rng(3)
    row = rng.standard_normal(65536).astype(np.float32)
    out, t = topk_model.select_row_onecta(row, 512, 2560, rng)
    assert not t.overflow and t.direct > 0 and t.E == t.Q == 1 and _strict_ok(out, row, 512).ok
    row = rng.integers(0, 8, 20000).astype(np.float32)        # ~2500 a level: the top level straddles k
    out, t = topk_model.select_row_onecta(row, 3000, 2560, rng)
    assert t.partial and 0 < t.Q < t.E and _strict_ok(out, row, 3000).ok
    row = np.full(65536, 0.5, np.float32)
    out, t = topk_model.select_row_onecta(row, 2048, 2560, rng)
    assert t.overflow and t.partial and np.array_equal(np.sort(out), np.arange(2048))
    row = np.full(4096, np.inf, np.float32)
    row[::2] = 1.0
    out, t = topk_model.select_row_onecta(row, 100, 2560, rng)
    assert t.T == topk_model.KEY_POSINF and (out == -1).all()
    row = np.full(4096, -np.inf, np.float32)
    row[[5, 77, 4000]] = [1.0, np.inf, -2.0]
    out, t = topk_model.select_row_onecta(row, 64, 2560, rng)
    assert t.b0 == 0 and sorted(out[:2].tolist()) == [5, 4000] and (out[2:] == -1).all()


@pytest.mark.parametrize("C,k", [(65536, 512), (65536, 2048), (262144, 2048), (16384, 512)])
def test_the_onecta_threshold_bin_fits_the_buffer_at_the_model_points(C, k):
    """N(0, 1) rows at the model points: the 12-bit threshold bin holds well under the 2560 entries
    (no overflow re-reads on the timed rows), and the emulation gives the reference set."""
    rng = np.random.default_rng(C + k)
    row = rng.standard_normal(C).astype(np.float32)
    cap = topk_variants.onecta_define("ONE_CAP")
    out, t = topk_model.select_row_onecta(row, k, cap, rng)
    assert not t.overflow and t.buffered < 0.8 * cap, t
    assert _strict_ok(out, row, k).ok


def test_the_onecta_launcher_reads_the_kernel_declarations():
    d = topk_variants.onecta_define
    assert d("ONE_THREADS") == 1024 and d("ONE_NB0") == 4096 == topk_model.ONE_DIGITS[0][1]
    assert d("ONE_BIN_POSINF") == topk_model.ONE_BIN_POSINF == topk_model.KEY_POSINF >> 20
    assert (d("ONE_NB1"), d("ONE_NB2")) == (topk_model.ONE_DIGITS[1][1], topk_model.ONE_DIGITS[2][1])


@pytest.mark.parametrize("C", [1, 4100, 65536, 70001])
def test_the_onecta_batches_visit_every_element_once_and_prefetch_ahead(C):
    """topk_onecta.cu's batch mapping, re-done in NumPy from the kernel's formulas (one_batches,
    one_index; vec when C % 4 == 0): every element of the row is some (batch, thread, j) exactly
    once, and pass 1's prefetches of batch b + ONE_AHEAD touch every 128-byte line of that batch."""
    d = topk_variants.onecta_define
    T, vecs, ahead = d("ONE_THREADS"), d("ONE_VECS"), d("ONE_AHEAD")
    nkeys = 4 * vecs
    vec = C % 4 == 0
    n = C // 4 if vec else C
    step = (vecs if vec else nkeys) * T
    tid = np.arange(T)[:, None]
    j = np.arange(nkeys)[None, :]
    seen, lines_of, fetched = [], {}, set()
    for bi, base in enumerate(range(0, n, step)):
        e = 4 * (base + (j >> 2) * T + tid) + (j & 3) if vec else base + j * T + tid
        e = e[e < C]
        seen.append(e)
        lines_of[bi] = set((4 * e // 128).tolist())
        for b in ([1, 2] if bi == 0 else []) + [bi + ahead]:     # the kernel's two prefetch loops
            u = np.arange(vecs)[None, :]
            i = b * step + u * T * (1 if vec else 4) + tid * (1 if vec else 4)
            i = i[i < n]
            fetched |= set((i * (16 if vec else 4) // 128).tolist())
    allseen = np.concatenate(seen)
    assert len(allseen) == C and np.array_equal(np.sort(allseen), np.arange(C))
    for bi in range(1, len(lines_of)):
        assert lines_of[bi] <= fetched, bi


# ---- topk_split.cu: P CTAs a row, candidates, the row's last CTA selects ------------------------


@pytest.mark.parametrize("cap", [4, 2560], ids=["cap4-overflow", "cap2560"])
@pytest.mark.parametrize("P", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", (*KINDS, "one_level"))
def test_the_split_emulation_gives_the_reference_set(kind, P, cap):
    """Every row kind (one level, ties with -0 / +0 at the k-th, few eligible, all -inf, NaN / +inf
    / extremes, sorted), irregular lengths (C % 4 != 0, empty slices when C < 4 P), slices shorter
    than k (k up to past C), the buffers overflowing (cap 4) or not, the counters' claims in a
    random order: the row is the reference's exactly, members first, then -1, no slot unwritten."""
    rng = np.random.default_rng(zlib.crc32(repr(("split", kind, P, cap)).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (999, 999), (5000, 6000), (20000, 64), (30001, 700)):
        row = _rows(kind, C, min(k, C), rng)
        out, _ = topk_model.select_row_split(row, k, P, cap, rng)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, P, cap, res.describe())


def test_the_split_paths_are_exercised():
    """Each path on a row built for it: random (no overflow, one key at the final threshold); a tie
    level cut inside every slice and again in stage 2 (the row re-read in index order: the lowest
    indices, all of slice 0); a slice whose threshold is +inf (kept as a key in stage 1, -1 in the
    end); fewer nonzero keys than k in every slice (b0 = 0); one level over the whole row (every
    slice's bin overflows its buffer)."""
    rng = np.random.default_rng(13)
    row = rng.standard_normal(65536).astype(np.float32)
    out, t = topk_model.select_row_split(row, 512, 4, 2560, rng)
    assert not any(s.overflow for s in t.slices) and not t.final.overflow and t.final.E == t.final.Q == 1
    assert _strict_ok(out, row, 512).ok
    row = rng.integers(0, 2, 40000).astype(np.float32)       # ~5000 of level 1 a slice of 10000
    out, t = topk_model.select_row_split(row, 3000, 4, 2560, rng)
    assert all(s.partial for s in t.slices) and t.final.partial and t.final.E == 4 * 3000
    assert np.array_equal(np.sort(out), np.flatnonzero(row == 1)[:3000])
    row = np.full(4096, 1.0, np.float32)
    row[:1024:2] = np.inf                                      # 512 +inf keys, all in slice 0
    out, t = topk_model.select_row_split(row, 300, 4, 2560, rng)
    assert t.slices[0].T == topk_model.KEY_POSINF and t.slices[0].partial and (out == -1).all()
    row = np.full(8192, -np.inf, np.float32)
    row[[3, 2500, 6000, 8191]] = [1.0, np.inf, -2.0, 0.0]
    out, t = topk_model.select_row_split(row, 64, 4, 2560, rng)
    assert all(s.b0 == 0 for s in t.slices) and t.final.b0 == 0
    assert sorted(out[:3].tolist()) == [3, 6000, 8191] and (out[3:] == -1).all()
    row = np.full(65536, 0.5, np.float32)
    out, t = topk_model.select_row_split(row, 2048, 4, 2560, rng)
    assert all(s.overflow and s.partial for s in t.slices) and t.final.partial
    assert np.array_equal(np.sort(out), np.arange(2048))


def test_split2_takes_a_partial_tie_level_from_the_bin_buffer():
    """topk_split2.cu's s2_select (buffered_ties) takes a partial level from bin b0's buffer, not
    from the row: on rows quantized as the DSA layer's (a few hundred levels, most rows cut one at
    the k-th) every stage's partial level comes from the buffer and the set is the reference's,
    the lowest indices of the cut level; the buffer overflowing (one level over the row), the take
    falls back to the index-order one and is still exact."""
    rng = np.random.default_rng(29)
    for C, k, P in ((65536, 512, 4), (40000, 2048, 4), (9000, 700, 3)):
        row = (rng.integers(-200, 200, C) / 64.0).astype(np.float32)
        for buffered in (False, True):
            out, t = topk_model.select_row_split(row, k, P, 2560, rng, buffered_ties=buffered)
            assert _strict_ok(out, row, k).ok, (C, k, P, buffered)
            stages = [*t.slices, t.final]
            assert any(s.partial for s in stages)
            assert all(s.from_buffer == (buffered and s.partial and not s.overflow) for s in stages)
            if buffered:
                assert t.final.from_buffer
    row = np.full(65536, 0.5, np.float32)
    out, t = topk_model.select_row_split(row, 2048, 4, 2560, rng, buffered_ties=True)
    assert all(s.overflow and s.partial and not s.from_buffer for s in t.slices)
    assert np.array_equal(np.sort(out), np.arange(2048))


def test_the_split_emulation_sees_an_unwritten_candidate():
    """A candidate slot stage 1 leaves unwritten keeps the poison (key 0xAAAAAAAA, a poison index):
    here the slot of the row's best score, so the final set misses it and the check fails: the
    emulation can fail, as the kernel can."""
    rng = np.random.default_rng(17)
    row = rng.standard_normal(4000).astype(np.float32)
    best = int(np.argmax(row))
    real = topk_model._one_select

    def lossy(key, k, cap, rng, drop, value, ties, *buffered):
        out, trace = real(key, k, cap, rng, drop, value, ties, *buffered)
        if not drop:
            out[out == best] = topk_model.POISON               # that member not written
        return out, trace
    topk_model._one_select = lossy
    try:
        out, _ = topk_model.select_row_split(row, 100, 4, 2560, rng)
    finally:
        topk_model._one_select = real
    assert not _strict_ok(out, row, 100).ok


@pytest.mark.parametrize("M,C,k,expect", [(32, 262144, 2048, 4), (32, 65536, 512, 4), (64, 262144, 2048, 2),
                                          (8, 262144, 2048, 11), (1, 1048576, 2048, 16), (1, 8192, 2048, 2),
                                          (33, 65536, 2048, 4), (66, 8192, 512, 2), (132, 8192, 512, 1),
                                          (140, 4096, 64, 1), (1, 4096, 4096, 1)])
def test_the_split_pick(M, C, k, expect):
    P = topk_model.pick_split(M, C, k, 132)
    assert P == expect and (M * P <= 132 or P == 1)


@pytest.mark.parametrize("C,k,P", [(262144, 2048, 4), (65536, 512, 4), (65536, 2048, 4), (262144, 2048, 2),
                                   (262144, 2048, 11)])
def test_the_split_threshold_bins_fit_the_buffer_at_the_model_points(C, k, P):
    """N(0, 1) rows at the sweep's points and picks: every slice's threshold bin and stage 2's (over
    the candidates) hold well under the 2560 entries (no overflow re-reads on the timed rows)."""
    rng = np.random.default_rng(C + k + P)
    row = rng.standard_normal(C).astype(np.float32)
    cap = topk_variants.onecta_define("ONE_CAP")
    out, t = topk_model.select_row_split(row, k, P, cap, rng)
    assert all(s.buffered < 0.8 * cap for s in t.slices) and t.final.buffered < 0.8 * cap, t
    assert _strict_ok(out, row, k).ok


def _ring_pass(ring, n4, T, vecs, rb, pass1):
    """One SplitSrc::batches pass of every thread over n4 float4, re-done in NumPy from the kernel's
    formulas (rb batches of vecs float4 a thread in the ring): ring[slot, tid] holds the float4
    index a cp.async put there (-1: none); returns, per batch, the [vecs, T] float4 indices the
    pass read (-1 past the source), checking each read slot holds that batch's float4 and that
    wait_group(rb - 1) leaves only later batches pending."""
    step = vecs * T
    nb = -(-n4 // step)
    held = not pass1 and nb <= rb
    tid = np.arange(T)
    committed, reads = 0, []

    def issue(b):
        nonlocal committed
        for u in range(vecs):
            i = b * step + u * T + tid
            ok = i < n4
            ring[(b % rb) * vecs + u, tid[ok]] = i[ok]
        committed += 1
    if not held:
        for b in range(rb):
            issue(b)
    for b in range(nb):
        if not held:
            assert committed - (rb - 1) == b + 1, "wait_group(rb - 1) completes groups 0 .. b"
        got = np.full((vecs, T), -1)
        for u in range(vecs):
            i = b * step + u * T + tid
            got[u] = np.where(i < n4, ring[(b % rb) * vecs + u], -1)
            assert (got[u][i < n4] == i[i < n4]).all(), (b, u)   # the slot holds this batch's float4
        reads.append(got)
        if not held:
            issue(b + rb)
    return reads


@pytest.mark.parametrize("n", [4, 4100, 16384, 32768, 32772, 65536, 70000])
def test_the_split_ring_reads_every_float4_once_in_each_pass(n):
    """The ring (SPLIT_RING_BATCHES batches of SPLIT_VECS float4 a thread): pass 1 and two later
    passes (pass 2 and an overflow re-read) each read every float4 of the source exactly once, from
    the slot its copy went to; a source of at most that many batches is read from the ring again
    without a copy (32768 keys: the slices of 512 of 65536 at M = 32)."""
    T = topk_variants.onecta_define("ONE_THREADS")
    vecs, rb = topk_variants.split_define("SPLIT_VECS"), topk_variants.split_define("SPLIT_RING_BATCHES")
    assert topk_variants.split_define("SPLIT_RING_BYTES") == rb * vecs * T * 16
    n4 = n // 4
    ring = np.full((rb * vecs, T), -1)
    for pass1 in (True, False, False):
        reads = _ring_pass(ring, n4, T, vecs, rb, pass1)
        seen = np.concatenate([r.ravel() for r in reads])
        seen = seen[seen >= 0]
        assert np.array_equal(np.sort(seen), np.arange(n4))
    assert (-(-(32768 // 4) // (vecs * T)) <= rb) and (-(-(32772 // 4) // (vecs * T)) > rb)


@pytest.mark.parametrize("n", [1, 4097, 16385, 70001])
def test_the_split_scalar_path_halves_cover_the_slice_once(n):
    """C % 4 != 0: SplitSrc gives one_select onecta's scalar batches (key j at base + j T + tid, 16
    keys) as two batches of 8 at base and base + 8 T: every element of the slice is some (half,
    thread, j) exactly once, and one_index of the half's base gives that element."""
    d = topk_variants.onecta_define
    # ONE_KEYS = 4 ONE_VECS and SPLIT_KEYS = 4 SPLIT_VECS (expressions: read their factors)
    T, keys16, keys8 = d("ONE_THREADS"), 4 * d("ONE_VECS"), 4 * topk_variants.split_define("SPLIT_VECS")
    assert keys16 == 2 * keys8 == 16
    tid = np.arange(T)[:, None]
    j = np.arange(keys8)[None, :]
    seen = []
    for base in range(0, n, keys16 * T):                       # one_batches' scalar step
        for half in (base, base + keys8 * T):
            e = half + j * T + tid                              # one_index(false, half, j)
            seen.append(e[e < n])
    allseen = np.concatenate(seen)
    assert len(allseen) == n and np.array_equal(np.sort(allseen), np.arange(n))


def test_the_split_launcher_reads_the_kernel_declarations():
    ring = topk_variants.split_define("SPLIT_RING_BYTES")
    # one CTA an SM: the ring, onecta's 45,200 B of static shared memory and a word, under the
    # H200's 227 KiB a block
    assert ring + 45216 <= 232448
    text = (topk_variants.HERE / topk_variants.SPLIT_SOURCE).read_text()
    assert "struct OneShared" not in text and '#include "topk_onecta.cuh"' in text   # onecta's code, not a copy


# ---- topk_split2.cu: radix_split's decisions with a cheaper pass 2 and bin search ---------------


@pytest.mark.parametrize("nb", [4096, 1024])
def test_the_split2_bin_search_gives_one_finds_answer(nb):
    """s2_find (2 barriers: warp totals published, every warp scanning them) finds the same bin and
    count above as one_find's block scan, on sparse, dense, one-bin and empty histograms and at
    every kk from 1 past the total (topk_model.find_two_barriers emulates its thread and warp
    ownership: a slip in the descending order or the warp prefix shows as a different bin)."""
    rng = np.random.default_rng(nb)
    hists = [rng.integers(0, 5, nb) * (rng.random(nb) < p) for p in (0.002, 0.05, 0.5, 1.0)]
    one = np.zeros(nb, np.int64)
    one[nb - 37] = 3000
    edge = np.zeros(nb, np.int64)
    edge[[0, 3, 4, nb - 1]] = [5, 1, 2, 1]                     # thread 1023's bins 0..3, thread 0's top bin
    hists += [one, edge, np.zeros(nb, np.int64)]
    for h in hists:
        total = int(h.sum())
        kks = {1, 2, total, total + 1, max(1, total // 2)} | set(rng.integers(1, total + 2, 40).tolist())
        for kk in sorted(kk for kk in kks if kk >= 1):            # kk >= 1 in every call
            assert topk_model.find_two_barriers(h, kk) == topk_model._find_desc(h, kk), (int(h.sum()), kk)


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("n", [1, 5, 4096, 8192, 16384, 22528, 32768, 32772, 65536, 70001])
def test_the_split2_source_mapping_covers_the_source_once(n, pairs):
    """S2Src: over every batch, thread and key j, the positions below n are 0 .. n - 1 exactly once
    (each hit's reload names the key the batch counted); the ring slot a key is re-read from is the
    one issue(b) filled with its float4; a batch's slots are distinct from the other in-flight
    batches' (b .. b + 3); a source of at most 4 batches (32768 scores, 16384 pairs: 8192
    candidates at M = 32 take 2) stays whole in the ring."""
    T = topk_variants.onecta_define("ONE_THREADS")
    d = lambda name: topk_variants.split_define(name, "split2")   # noqa: E731
    vecs, rb = d("S2_VECS"), d("S2_RING_BATCHES")
    assert d("S2_RING_BYTES") == rb * vecs * T * 16
    pos, ring, src_slot = topk_model.split2_positions(n, pairs, T, vecs, rb)
    per = 2 if pairs else 4
    valid = pos < n
    assert np.array_equal(np.sort(pos[valid]), np.arange(n))
    assert (pos // per == src_slot).all()
    # issue(b) puts source float4 b step + u T + t at ring ((b % rb) vecs + u) T + t
    b = np.arange(pos.shape[0])[:, None, None]
    u = (src_slot - b * vecs * T) // T
    assert ((u >= 0) & (u < vecs)).all() and (ring == ((b % rb) * vecs + u) * T + (src_slot % T)).all()
    for b0 in range(pos.shape[0]):                                # in flight together: b0 .. b0 + rb - 1
        live = ring[b0:b0 + rb].reshape(-1)
        assert len(np.unique(live)) == len(live) // per
    held = pos.shape[0] <= rb
    assert held == (n <= (rb * vecs * T * per))
    if held:
        assert len(np.unique(ring)) == ring.size // per          # every batch its own slots


def test_the_split2_launcher_reads_the_kernel_declarations():
    d = lambda name: topk_variants.split_define(name, "split2")   # noqa: E731
    assert d("S2_RING_BYTES") + 45216 <= 232448                   # one CTA an SM, as radix_split
    text = (topk_variants.HERE / topk_variants.SPLIT2_SOURCE).read_text()
    header = (topk_variants.HERE / "topk_select.cuh").read_text()
    assert "dsa_topk_split2(" in text and '#include "topk_select.cuh"' in text and '#include "topk_onecta.cuh"' in header
    assert "struct OneShared" not in text                           # onecta's shared layout, not a copy
    with pytest.raises(ValueError, match="allowed"):
        topk_variants.make_split_build(design="split3")
    comp = registry.get("dsa_topk")
    assert comp.variant("radix_split2").sources == (topk_variants.SPLIT2_SOURCE,)


@pytest.mark.parametrize("pairs,n,k", [(False, 16384, 512), (False, 65536, 2048), (True, 8192, 2048),
                                       (False, 4100, 0), (True, 2048, 512)])
def test_the_split2_pass2_hit_loop_fills_each_slot_once(pairs, n, k):
    """s2_select's pass 2, emulated per warp and lane: two masks a lane (members above bin b0, keys
    of bin b0), one packed warp scan and one counter claim a warp (warps claiming in a random
    order), then each lane's loop over its set bits in increasing j writing member slots pm.. and
    buffer slots pb..: the members fill [0, #members) and the buffer [0, #bin) each exactly once,
    every slot with the position of a key of its class (the payload reload gives)."""
    T = topk_variants.onecta_define("ONE_THREADS")
    rng = np.random.default_rng(n + k)
    key = topk_model.keys(rng.standard_normal(n).astype(np.float32)).astype(np.int64)
    key[rng.random(n) < 0.01] = 0                                  # -inf / NaN: never a hit
    b0 = int(np.sort(key)[-k] >> 20) if k else 0                   # the k-th key's bin (k = 0: b0 = 0)
    pos, _, _ = topk_model.split2_positions(n, pairs, T)
    kb = np.where(pos < n, key[np.minimum(pos, n - 1)], 0)       # [batch, thread, j]
    member = (kb >> 20) > b0
    inbin = (kb != 0) & ((kb >> 20) == b0)
    slots_m, slots_b = np.full(n, -1), np.full(n, -1)
    cnt = nbuf = 0
    for b in range(pos.shape[0]):
        for w in rng.permutation(T // 32):                          # warps claim in any order
            lanes = slice(32 * w, 32 * w + 32)
            nm, nbn = member[b, lanes].sum(axis=1), inbin[b, lanes].sum(axis=1)
            pm = cnt + np.cumsum(nm) - nm                            # warp base + exclusive scan
            pb = nbuf + np.cumsum(nbn) - nbn
            cnt, nbuf = cnt + int(nm.sum()), nbuf + int(nbn.sum())
            for lane in range(32):
                t = 32 * w + lane
                for j in np.flatnonzero(member[b, t] | inbin[b, t]):   # __ffs order
                    p = int(pos[b, t, j])
                    if member[b, t, j]:
                        slots_m[p], pm[lane] = pm[lane], pm[lane] + 1
                    else:
                        slots_b[p], pb[lane] = pb[lane], pb[lane] + 1
    is_m = (key >> 20) > b0
    is_b = (key != 0) & ((key >> 20) == b0)
    assert np.array_equal(np.sort(slots_m[is_m]), np.arange(int(is_m.sum()))) and (slots_m[~is_m] == -1).all()
    assert np.array_equal(np.sort(slots_b[is_b]), np.arange(int(is_b.sum()))) and (slots_b[~is_b] == -1).all()
    assert cnt == int(is_m.sum()) and nbuf == int(is_b.sum())
    assert (k == 0) == (nbuf == 0) and cnt < (k or n)               # the buffer path runs where b0 > 0


# ---- topk_split2.cu's dsa_topk_sample: a sampled bound, one pass, the select over the buffer ----


@pytest.mark.parametrize("smp_cap", [16, 4096], ids=["cap16-fallback", "cap4096"])
@pytest.mark.parametrize("P", [1, 3, 4])
@pytest.mark.parametrize("kind", (*KINDS, "one_level"))
def test_the_sample_emulation_gives_the_reference_set(kind, P, smp_cap):
    """Every row kind at irregular lengths, slices shorter than k, the buffer too small (the
    fallback over the slice) or not: the row is the reference's exactly, members first, then -1."""
    rng = np.random.default_rng(zlib.crc32(repr(("sample", kind, P, smp_cap)).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (5000, 6000), (20000, 64), (30001, 700)):
        row = _rows(kind, C, min(k, C), rng)
        out, _, _ = topk_model.select_row_sample(row, k, P, 2560, smp_cap, rng)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, P, smp_cap, res.describe())


def test_the_sample_paths_are_exercised():
    """Each stage-1 path on a row built for it: random (the buffer serves: hits between k and the
    cap); every key -inf but a few (t_est = 1: the buffer holds every nonzero key, fewer than k);
    a tie level cut at the k-th inside every slice (the buffer serves, the partial take re-reads
    the slice in index order); ascending rows (every slice still buffered: the sample spans it);
    one level over the row (the hits pass the cap: the fallback)."""
    rng = np.random.default_rng(29)
    cap = topk_variants.split_define("SMP_CAP", "sample")
    row = rng.standard_normal(65536).astype(np.float32)
    out, t, _ = topk_model.select_row_sample(row, 512, 4, 2560, cap, rng)
    assert all(s.buffered and 512 <= s.hits <= cap for s in t) and _strict_ok(out, row, 512).ok
    row = np.full(8192, -np.inf, np.float32)
    row[[3, 2500, 6000, 8191]] = [1.0, np.inf, -2.0, 0.0]
    out, t, _ = topk_model.select_row_sample(row, 64, 4, 2560, cap, rng)
    assert all(s.t_est == 1 and s.buffered and s.hits <= 1 for s in t)
    assert sorted(out[:3].tolist()) == [3, 6000, 8191] and (out[3:] == -1).all()
    row = rng.integers(0, 40, 40000).astype(np.float32)       # ~250 keys a level a slice of 10000
    out, t, _ = topk_model.select_row_sample(row, 1000, 4, 2560, cap, rng)
    assert all(s.buffered and s.select.partial for s in t) and _strict_ok(out, row, 1000).ok
    row = np.sort(rng.standard_normal(262144).astype(np.float32))
    out, t, _ = topk_model.select_row_sample(row, 2048, 4, 2560, cap, rng)
    assert all(s.buffered for s in t) and _strict_ok(out, row, 2048).ok
    row = np.full(65536, 0.5, np.float32)
    out, t, _ = topk_model.select_row_sample(row, 2048, 4, 2560, cap, rng)
    assert not any(s.buffered for s in t) and np.array_equal(np.sort(out), np.arange(2048))


@pytest.mark.parametrize("C,k,M", [(262144, 2048, 32), (65536, 512, 32), (65536, 2048, 32), (262144, 2048, 64),
                                   (1048576, 2048, 1)])
def test_the_sample_buffer_holds_the_hits_at_the_model_points(C, k, M):
    """On N(0, 1) rows at the sweep's points and radix_sample's P: every slice's hits are at least k
    and fit the buffer, so the sampled path serves and the fallback is never paid there."""
    cap = topk_variants.split_define("SMP_CAP", "sample")
    P = topk_model.pick_split(M, C, k, topk_variants.H200_SMS)
    rng = np.random.default_rng(C + k + M)
    for _ in range(3):
        row = rng.standard_normal(C).astype(np.float32)
        for lo, hi in topk_model.split_slices(C, P):
            key = topk_model.keys(row[lo:hi]).astype(np.int64)
            hits = int((key >= topk_model.sample_bound(key, k)).sum())
            assert k <= hits <= cap, (C, k, M, P, hits)


# ---- topk_split2.cu's dsa_topk_share: no select in stage 1, the final from the share groups ------


@pytest.mark.parametrize("caps", [(16, 20480), (4096, 20480), (4096, 3000)], ids=["fallback", "served", "level3"])
@pytest.mark.parametrize("P", [1, 3, 4])
@pytest.mark.parametrize("kind", (*KINDS, "one_level"))
def test_the_share_emulation_gives_the_reference_set(kind, P, caps):
    """Every row kind at irregular lengths, slices shorter than k, the buffer too small (a slice's k
    best in place of its groups), the union too big for the final's shared memory (the row itself)
    or neither: the row is the reference's exactly, members first, then -1."""
    smp_cap, union_cap = caps
    rng = np.random.default_rng(zlib.crc32(repr(("share", kind, P, caps)).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (5000, 6000), (20000, 64), (30001, 700)):
        row = _rows(kind, C, min(k, C), rng)
        out, _ = topk_model.select_row_share(row, k, P, 2560, smp_cap, union_cap, rng)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, P, caps, res.describe())


def _quantized_rows(C: int, rng) -> list[np.ndarray]:
    """The DSA layer's quantized scores (integer keys and queries, small-integer weights: a few keys
    at most a level, so most rows cut a level at the k-th) and a 50-level row: float32 [C] each."""
    keys_ = np.floor(rng.random((C, 32), dtype=np.float32) * 7) - 3
    q = rng.integers(-3, 4, (8, 32)).astype(np.float32)
    w = (rng.choice([-1, 1], 8) * rng.integers(1, 65, 8) * 2.0 ** -12).astype(np.float32)
    return [(np.maximum(keys_ @ q.T, 0) @ w).astype(np.float32), rng.integers(0, 50, C).astype(np.float32)]


def test_the_share_tie_take_from_the_union_is_the_rows():
    """Quantized scores (the DSA layer's integer keys and queries, small-integer weights: a few
    keys at most a level, so most rows cut a level at the k-th) and few-level rows, with every
    slice served or none (a buffer of 16: the slices' k best, lower index first): the final's tie
    take from the union alone gives the reference's set, at partial tie levels."""
    rng = np.random.default_rng(47)
    partial = 0
    for trial in range(6):
        C, k = 65536, 512
        rows = _quantized_rows(C, rng)
        for row in rows:
            for smp_cap in (4096, 16):
                out, tr = topk_model.select_row_share(row, k, 4, 2560, smp_cap, 20480, rng)
                partial += tr.final.partial
                assert tr.level in (1, 2) and _strict_ok(out, row, k).ok, (trial, smp_cap, tr.level)
    assert partial >= 6, partial                   # the union's take ran, not only whole levels


def _share_caps():
    d = lambda name: topk_variants.split_define(name, "share")   # noqa: E731
    return d("SMP_CAP"), d("SMP_DYN_BYTES") // 8


def test_the_share_levels_are_exercised():
    """Each path on a row built for it: random (level 1: the share groups hold the row's k best);
    ascending (the last slice holds them all, more than its share: level 2 from both groups); the
    same at 11 slices, whose groups pass the final's shared memory (level 3: the row); every key
    -inf but a few (every bound 1: level 1 with fewer than k); one level over the row (no slice
    served: each hands on its k best, level 1 with no bound to test)."""
    rng = np.random.default_rng(43)
    smp_cap, union_cap = _share_caps()
    row = rng.standard_normal(262144).astype(np.float32)
    out, tr = topk_model.select_row_share(row, 2048, 4, 2560, smp_cap, union_cap, rng)
    assert tr.level == 1 and all(s[3] for s in tr.slices) and _strict_ok(out, row, 2048).ok
    srt = np.sort(row)
    out, tr = topk_model.select_row_share(srt, 2048, 4, 2560, smp_cap, union_cap, rng)
    assert tr.level == 2 and _strict_ok(out, srt, 2048).ok
    out, tr = topk_model.select_row_share(srt, 2048, 11, 2560, smp_cap, union_cap, rng)
    assert tr.level == 3 and _strict_ok(out, srt, 2048).ok
    row = np.full(8192, -np.inf, np.float32)
    row[[3, 2500, 6000, 8191]] = [1.0, np.inf, -2.0, 0.0]
    out, tr = topk_model.select_row_share(row, 64, 4, 2560, smp_cap, union_cap, rng)
    assert tr.level == 1 and all(s[0] == 1 and s[1] == 1 for s in tr.slices)
    assert sorted(out[:3].tolist()) == [3, 6000, 8191] and (out[3:] == -1).all()
    row = np.full(65536, 0.5, np.float32)
    out, tr = topk_model.select_row_share(row, 2048, 4, 2560, smp_cap, union_cap, rng)
    assert tr.level == 1 and not any(s[3] for s in tr.slices) and np.array_equal(np.sort(out), np.arange(2048))


@pytest.mark.parametrize("C,k,M", [(262144, 2048, 32), (65536, 512, 32), (65536, 2048, 32), (262144, 2048, 64),
                                   (262144, 2048, 8), (1048576, 2048, 1)])
def test_the_share_final_reads_about_k_over_P_a_slice_at_the_model_points(C, k, M):
    """On N(0, 1) rows at the sweep's points and radix_share's P: every slice served and level 1
    gave the row, from share groups that together hold well under the P k candidates the split
    designs hand on (under half of them where P >= 4)."""
    smp_cap, union_cap = _share_caps()
    P = topk_model.pick_split(M, C, k, topk_variants.H200_SMS)
    rng = np.random.default_rng(C + k + M + 1)
    for _ in range(3):
        row = rng.standard_normal(C).astype(np.float32)
        out, tr = topk_model.select_row_share(row, k, P, 2560, smp_cap, union_cap, rng)
        handed = sum(s[4] for s in tr.slices)
        assert tr.level == 1 and all(s[3] for s in tr.slices), (C, k, M, P, tr.level)
        assert handed < (P * k // 2 if P >= 4 else P * k), (C, k, M, P, handed)
        assert _strict_ok(out, row, k).ok


def test_the_share_launcher_reads_the_kernel_declarations():
    d = lambda name: topk_variants.split_define(name, "share")   # noqa: E731
    assert d("SHR_DATA") == d("SMP_CAP") + 2 and d("SHR_SEG") == d("SHR_DATA") + 2
    assert registry.get("dsa_topk").variant("radix_share").sources == (topk_variants.SPLIT2_SOURCE,)
    assert topk_variants.split_ws_pairs("share", 2048) == d("SHR_SEG")
    assert topk_variants.split_ws_pairs("split2", 2047) == 2048 == topk_variants.split_ws_pairs("sample", 2048)
    with pytest.raises(ValueError, match=r"dsa_topk_split: workspace layout 'two arrays'"):
        topk_variants.split_ws_pairs("split", 2048)
    with pytest.raises(ValueError, match=r"dsa_topk_share: P = 40 .*allowed: P <= 32"):
        topk_variants.split_launch(None, 1, 262144, 2048, "share", P_fixed=40)
    with pytest.raises(ValueError, match=r"k = 8192.*<= 4098"):
        topk_variants.split_launch(None, 1, 262144, 8192, "share", P_fixed=4)


@pytest.mark.parametrize("n", [1, 5, 4096, 16384, 65536, 131072, 524288, 1000003])
def test_the_sample_units_span_the_slice(n):
    """smp_load's units: at most 2 a thread, inside the slice, each position once, whole blocks of
    SMP_BLOCK contiguous keys, one every g keys from the first to the last (so a slice's tail is
    sampled as its head is)."""
    pos, g = topk_model.sample_positions(n)
    assert len(pos) <= 8 * 1024 and len(np.unique(pos)) == len(pos) and (pos < n).all()
    assert g % topk_model.SMP_BLOCK == 0 and (n - 1) // g == pos.max() // g
    assert np.array_equal(pos % g, np.arange(len(pos)) % topk_model.SMP_BLOCK)


def test_the_sample_launcher_reads_the_kernel_declarations():
    d = lambda name: topk_variants.split_define(name, "sample")   # noqa: E731
    assert d("SMP_DYN_BYTES") == d("S2_RING_BYTES") + 8 * d("SMP_CAP")
    assert d("SMP_DYN_BYTES") + 45216 + 1024 <= 233472            # one CTA an SM (228 KiB)
    assert (d("SMP_BLOCK"), d("SMP_BLOCKS"), d("SMP_UNITS")) == (topk_model.SMP_BLOCK, topk_model.SMP_BLOCKS,
                                                                 topk_model.SMP_UNITS)
    text = (topk_variants.HERE / topk_variants.SPLIT2_SOURCE).read_text()
    assert "dsa_topk_sample(" in text and f"#define SMP_MARGIN {topk_model.SMP_MARGIN}f" in text
    assert registry.get("dsa_topk").variant("radix_sample").sources == (topk_variants.SPLIT2_SOURCE,)


def test_the_sample_stream_compares_scores_as_keys():
    """The stream's float compare against topk_key_floor(t_est) selects exactly the keys >= t_est: on
    every special value (NaN of both signs, +-inf, +-0, +-FLT_MAX, denormals) and random floats,
    against thresholds at bin edges (the bound's form), at the smallest nonzero key (t_est = 1, and
    the first real one), at +inf's key, and at random keys."""
    rng = np.random.default_rng(5)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
                        1.0, -1.0, 2.5, -2.5], np.float32)
    x = np.concatenate([special, rng.standard_normal(4000).astype(np.float32),
                        rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    kx = topk_model.keys(x).astype(np.int64)
    edges = [int(b) << 10 for b in rng.integers(1 << 13, 1 << 22, 300)]
    for K in [1, 0x00800000, 0x00800001, 0x7FFFFFFF, 0x80000000, 0x80000001, topk_model.KEY_POSINF,
              *edges, *[int(v) for v in rng.integers(1, topk_model.KEY_POSINF, 300)]]:
        with np.errstate(invalid="ignore"):
            got = x >= topk_model.sample_float(K)
        assert np.array_equal(got, kx >= K), hex(K)


# ---- topk_union.cu (radix_union) ------------------------------------------------------------------


def _union_caps():
    return topk_variants.union_define("UNI_CAP"), topk_variants.onecta_define("ONE_CAP")


# The union's forms as select_row_union's keywords: the exchanged bound, the own form, the early forms
FORMS = pytest.mark.parametrize("form", [{}, {"own": True}, {"own": True, "regions": True}, {"early": 3}, {"early": 4}],
                                ids=["exchanged", "own", "own_regions", "early3", "early4"])


@FORMS
@pytest.mark.parametrize("union_cap", [16, 16384], ids=["cap16-row", "served"])
@pytest.mark.parametrize("cs", topk_model.UNION_SIZES)
@pytest.mark.parametrize("kind", (*KINDS, "one_level"))
def test_the_union_emulation_gives_the_reference_set(kind, cs, union_cap, form):
    """Every row kind at irregular lengths (C % 4 != 0, slices shorter than a thread's keys, k > C),
    with the union serving where it can or too small to (the row itself): the reference's set
    exactly, members first, then -1."""
    rng = np.random.default_rng(zlib.crc32(repr(("union", kind, cs, union_cap, sorted(form.items()))).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (3001, 2048), (5000, 6000), (20000, 64), (30001, 700)):
        if topk_model.split_slices(C, cs)[0][1] > topk_model.UNI_KEYS:
            continue
        row = _rows(kind, C, min(k, C), rng)
        out, _ = topk_model.select_row_union(row, k, cs, union_cap, 2560, rng, **form)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, cs, union_cap, form, res.describe())


@FORMS
def test_the_union_paths_are_exercised(form):
    """Each path on a row built for it: random (the union serves, its bound below the k-th key);
    ascending (the top keys all in the last slice: the first slice's bound, the least, is far below
    them and the union passes its cap: the row); every key -inf but a few (fewer than k thread maxes: no bound, the row);
    one level (the union is the whole row: served when it fits, its bin buffer overflowing, so the
    partial level from ShrFinalOut's take; past the cap, the row)."""
    rng = np.random.default_rng(53)
    union_cap, cap = _union_caps()
    row = rng.standard_normal(65536).astype(np.float32)
    out, tr = topk_model.select_row_union(row, 512, 4, union_cap, cap, rng, **form)
    assert tr.served and 512 <= tr.n_union < 2048 and _strict_ok(out, row, 512).ok
    assert tr.final in ("window", "window_warp") and tr.select is None
    srt = np.sort(row)
    out, tr = topk_model.select_row_union(srt, 512, 4, union_cap, cap, rng, **form)
    assert not tr.served and tr.b != 0 and tr.n_union > union_cap and _strict_ok(out, srt, 512).ok
    row = np.full(8192, -np.inf, np.float32)
    row[[3, 2500, 6000, 8191]] = [1.0, np.inf, -2.0, 0.0]
    out, tr = topk_model.select_row_union(row, 64, 2, union_cap, cap, rng, **form)
    assert tr.b == 0 and not tr.served and tr.n_union == 0
    assert sorted(out[:3].tolist()) == [3, 6000, 8191] and (out[3:] == -1).all()
    row = np.full(3000, 0.5, np.float32)
    out, tr = topk_model.select_row_union(row, 512, 1, union_cap, cap, rng, **form)
    assert tr.served and tr.final == "select" and tr.n_union == 3000 and tr.select.partial and tr.select.overflow
    assert np.array_equal(np.sort(out), np.arange(512))
    out, tr = topk_model.select_row_union(np.full(65536, 0.5, np.float32), 2048, 4, union_cap, cap, rng, **form)
    assert not tr.served and np.array_equal(np.sort(out), np.arange(2048))


def test_the_own_union_serves_rows_whose_bounds_disagree_by_a_second_round():
    """The own form where the ranks' bounds differ (the second slice shifted up by 0.3: its bound
    bin is higher): the second round completes the union to every key >= the least bound, so it
    serves, as large as the exchanged form's, and the window select (rank 0's own count of the union)
    gives the reference's set. Where they agree (random rows) the window serves too."""
    rng = np.random.default_rng(67)
    union_cap, cap = _union_caps()
    for trial in range(4):
        row = rng.standard_normal(65536).astype(np.float32)
        row[32768:] += np.float32(0.3)
        out, tr = topk_model.select_row_union(row, 512, 2, union_cap, cap, rng, own=True)
        _, ex = topk_model.select_row_union(row, 512, 2, union_cap, cap, rng, own=False)
        assert not tr.agree and tr.served and tr.final in ("window", "window_warp") and tr.n_union == ex.n_union, trial
        assert _strict_ok(out, row, 512).ok, trial
        row = rng.standard_normal(65536).astype(np.float32)
        out, tr = topk_model.select_row_union(row, 512, 3, union_cap, cap, rng, own=True)
        assert tr.agree and tr.final in ("window", "window_warp") and _strict_ok(out, row, 512).ok, trial


def test_the_regions_refuse_a_rank_past_its_region_where_the_whole_union_would_fit():
    """The own form's regions (dsa_topk_union_owns): the second slice shifted down by 0.8, so the
    least bound is its own and the first slice holds ~2500 keys above it, past its region of
    UNI_CAP / 2 = 2048 pairs, while the union (~2500) fits UNI_CAP: the own form serves from the
    union, the regions send the row to the row's select; both give the reference's set. On random
    rows the regions serve as the own form does, with the same union."""
    rng = np.random.default_rng(79)
    union_cap, cap = _union_caps()
    for trial in range(3):
        row = rng.standard_normal(65536).astype(np.float32)
        row[32768:] -= np.float32(0.8)
        out_own, own = topk_model.select_row_union(row, 512, 2, union_cap, cap, rng, own=True)
        out_reg, reg = topk_model.select_row_union(row, 512, 2, union_cap, cap, rng, own=True, regions=True)
        above = (topk_model.keys(row[:32768]).astype(np.int64) >= reg.b << 20).sum()
        assert above > union_cap // 2 and reg.n_union <= union_cap, (trial, above, reg.n_union)
        assert own.served and not reg.served and reg.final == "select", trial
        assert _strict_ok(out_own, row, 512).ok and _strict_ok(out_reg, row, 512).ok, trial
        row = rng.standard_normal(65536).astype(np.float32)
        out, tr = topk_model.select_row_union(row, 512, 3, union_cap, cap, rng, own=True, regions=True)
        _, ref = topk_model.select_row_union(row, 512, 3, union_cap, cap, rng, own=True)
        assert tr.served and tr.n_union == ref.n_union and tr.final in ("window", "window_warp"), trial
        assert _strict_ok(out, row, 512).ok, trial
    with pytest.raises(AssertionError, match="own form's"):
        topk_model.select_row_union(row, 512, 3, union_cap, cap, rng, regions=True)


def test_the_own_window_top_is_one_octave_above_the_bound_saturating():
    """own_window_top: tlb + 2^23 - 1 (the window digit's shift 13 over 1024 bins), at most the
    largest key."""
    assert topk_model.own_window_top(0xC0100000) - 0xC0100000 == (1 << 23) - 1
    assert topk_model.own_window_top(0xFFF00000) == 0xFFFFFFFF
    R = topk_model.own_window_top(0xC0100000) - 0xC0100000
    assert max(0, R.bit_length() - 10) == 13


@FORMS
def test_the_union_tie_take_on_quantized_rows_is_the_rows(form):
    """The DSA layer's quantized scores (a level cut at the k-th in most rows) and 50-level rows (the
    union's bin buffer overflows: ShrFinalOut's take from the union): the union serves and its
    partial tie level gives the reference's set."""
    rng = np.random.default_rng(59)
    partial = 0
    for trial in range(6):
        C, k = 65536, 512
        rows = _quantized_rows(C, rng)
        for row in rows:
            out, tr = topk_model.select_row_union(row, k, 4, *_union_caps(), rng, **form)
            partial += tr.select is not None and tr.select.partial
            assert tr.served and _strict_ok(out, row, k).ok, trial
    assert partial >= 6, partial                   # the union's take ran, not only whole levels


def _window_reference(ukey, uidx, k):
    order = np.lexsort((uidx, -ukey))[:k]
    return set(uidx[order].tolist()), int(ukey[order[-1]])


def test_the_union_window_select_is_exact_on_every_path():
    """window_select against a (key descending, index ascending) sort of the union: the whole bin
    ("window"), the bin ranked in one warp ("window_warp": two keys in the k-th key's bin, one
    taken; equal keys by index), a bin of more than 32 keys with part taken (None: s2_select's),
    +inf in the row and fewer than k pairs (None); with kmax below the union's largest key (what
    --use_fast_math's flushed max can give) the clamp keeps it exact."""
    rng = np.random.default_rng(61)
    tlb = 0xC0100000                                                 # the key of 2.25
    ukey = tlb + rng.choice(1 << 23, 800, replace=False).astype(np.int64)
    uidx = rng.permutation(65536)[:800].astype(np.int64)
    kmax = int(ukey.max())
    seen, clamped = set(), 0
    for k in (1, 2, 100, 512, 799, 800):
        for km in (kmax, int(np.sort(ukey)[-3])):                    # the true max, or the 3rd largest key
            got = topk_model.window_select(ukey, uidx, k, tlb, km)
            assert got is not None or km != kmax
            if got is not None:
                members, final, T = got
                assert (set(members.tolist()), T) == _window_reference(ukey, uidx, k) and len(members) == k
                seen.add(final)
                clamped += km != kmax
    assert clamped >= 5, clamped
    # two keys one digit apart in the k-th key's bin (sh = 11 for this span), only the larger taken
    pair = ukey.copy()
    order = np.argsort(-pair)
    pair[order[511]] = pair[order[510]] - 1 if pair[order[510]] - 1 > pair[order[512]] else pair[order[511]]
    pair[order[512]] = pair[order[511]] - 1
    members, final, T = topk_model.window_select(pair, uidx, 512, tlb, kmax)
    assert (set(members.tolist()), T) == _window_reference(pair, uidx, 512)
    seen.add(final)
    # equal keys in that bin: the lower index wins
    eq = ukey.copy()
    eq[order[512]] = eq[order[511]]
    members, final, T = topk_model.window_select(eq, uidx, 512, tlb, kmax)
    assert final == "window_warp" and (set(members.tolist()), T) == _window_reference(eq, uidx, 512)
    assert seen == {"window", "window_warp"}
    # a key below tlb (a flushed compare's push): digit 0, below every other
    low = np.append(ukey, tlb - 7)
    members, final, T = topk_model.window_select(low, np.append(uidx, 70000), 800, tlb, kmax)
    assert 70000 not in members and (set(members.tolist()), T) == _window_reference(ukey, uidx, 800)
    level = np.full(800, tlb + 5, np.int64)                          # one level: 800 keys in one bin, 512 taken
    assert topk_model.window_select(level, uidx, 512, tlb, tlb + 5) is None
    assert topk_model.window_select(ukey, uidx, 512, tlb, topk_model.KEY_POSINF) is None
    assert topk_model.window_select(ukey[:100], uidx[:100], 512, tlb, kmax) is None


@pytest.mark.parametrize("C,k,M,served,early_served",
                         [(65536, 512, 32, True, True), (65536, 512, 64, True, True), (65536, 512, 8, True, True),
                          (65536, 2048, 8, True, True), (16384, 512, 32, True, True), (131072, 2048, 1, True, True),
                          (262144, 2048, 1, True, False), (65536, 2048, 64, False, False), (65536, 2048, 32, None, False)])
@FORMS
def test_the_union_at_the_sweep_points(C, k, M, served, early_served, form):
    """On N(0, 1) rows at radix_union's cluster pick: where the union serves it holds under 4k
    keys (each rank's bound bin is 1/8 of an octave wide; 6k for the early forms' bound over a
    thread's first slots), so rank 0 selects from far fewer pairs
    than the row, and the bound is at most the k-th key (the select's T). At 2048 of 65536 in
    clusters of 2 (M = 64) each CTA's bound is its 1024th thread max of 1024, its least: far below T,
    the union passes UNI_CAP and the row itself is selected from (correct, slow); in clusters of 3
    (M = 32) its 683rd: the union holds ~3.5k keys, under the cap on some rows (served None: either).
    The early forms (``early_served``) lose the union where a slice is full and k large: at 2048 of
    262144 in clusters of 8 their bound over 3 or 4 of 8 slots leaves ~6-8k keys above it."""
    served = early_served if form.get("early") else served
    union_cap, cap = _union_caps()
    cs = topk_model.pick_union(M, C, topk_variants.H200_SMS)
    rng = np.random.default_rng(C + k + M + 7)
    for _ in range(3):
        row = rng.standard_normal(C).astype(np.float32)
        out, tr = topk_model.select_row_union(row, k, cs, union_cap, cap, rng, **form)
        assert served in (None, tr.served) and _strict_ok(out, row, k).ok, (C, k, M, cs, tr.n_union)
        if tr.served:
            # the early forms' bound comes from 3 or 4 of a thread's 8 slots: a lower bin, a larger union
            assert k <= tr.n_union < (6 if form.get("early") else 4) * k and tr.T >= tr.b << 20, (C, k, M, cs, tr.n_union)
        else:
            assert tr.n_union > union_cap


@pytest.mark.parametrize("M,C,expect", [(32, 65536, 3), (64, 65536, 2), (67, 65536, 2), (8, 65536, 8), (16, 65536, 4),
                                        (1, 65536, 8), (32, 8192, 2), (3, 513, 1), (132, 4100, 1), (1, 262144, 8),
                                        (1, 262145, None), (16, 16385, 4), (39, 16384, 3), (40, 16384, 2),
                                        (39, 12287, 2), (15, 65536, 8)])
def test_the_union_pick(M, C, expect):
    """The size with the most SMs reading (M x size) among those whose M clusters fit at once (66 of
    2, 39 of 3, 30 of 4 and 15 of 8 on a 132-SM H100 / H200) and whose slices keep 4096 keys; else the
    fewest CTAs that hold the row."""
    assert topk_model.pick_union(M, C, 132) == expect
    assert topk_model.pick_union(64, 65536, 256) == 4                 # elsewhere: SMs // size
    assert topk_model.pick_union(86, 65536, 256) == 2                 # 85 clusters of 3 there


def test_the_union_thread_maxes_follow_the_element_mapping():
    """Key j of thread t is element 4 (q 1024 + t) + e: a marker at element 4 (6 x 1024 + 17) + 2
    is thread 17's max; past the slice, key 0."""
    key = np.ones(32768, np.int64)
    key[4 * (6 * 1024 + 17) + 2] = 99
    tm = topk_model.thread_maxes(key)
    assert tm[17] == 99 and (np.delete(tm, 17) == 1).all()
    assert (topk_model.thread_maxes(np.ones(4100, np.int64))[1025:] == 0).all()


def test_the_union_launcher_reads_the_kernel_declarations(geometry):
    d = topk_variants.union_define
    assert d("UNI_KEYS") == topk_model.UNI_KEYS and d("UNI_VECS") == topk_model.UNI_VECS
    assert d("UNI_HELD_BYTES") + d("UNI_CAP") * 8 == d("UNI_DYN_BYTES") == topk_variants.split_define("S2_RING_BYTES", "split2")
    assert d("UNI_HELD_BYTES") == (d("UNI_VECS") - d("UNI_REG_VECS")) * 1024 * 16
    assert d("UNI_DYN_BYTES") + 45312 <= 232448                         # one CTA an SM (ptxas: 45216 B static, owns c8 45312)
    # the bulk form: the whole slice, then the union; the fallback's ring over the slice
    assert d("UNI_BULK_HELD_BYTES") == 4 * d("UNI_KEYS") and d("UNI_BULK_HELD_BYTES") + d("UNI_CAP") * 8 == d("UNI_BULK_DYN_BYTES")
    assert d("UNI_BULK_DYN_BYTES") + 45216 <= 232448
    text = (topk_variants.HERE / topk_variants.UNION_SOURCE).read_text()
    assert all(f"DSA_TOPK_UNION_KERNEL({cs})" in text for cs in topk_model.UNION_SIZES)
    # each form's kernels are its source's macro's, and its shared memory a #define the launcher reads
    # from that source
    for geo, macro in ((topk_model.UNION, "DSA_TOPK_UNION_KERNEL"), (topk_model.UNION_HALF, "DSA_TOPK_UNION_HALF_KERNEL")):
        src = (topk_variants.HERE / geo.source).read_text()
        assert {f.prefix for f in topk_variants.UNION_FORMS.values() if f.geo == geo} == set(
            re.findall(r"DSA_TOPK_UNION_FORM\((dsa_topk_union\w*), CS", src)), geo.source
        assert set(re.findall(rf"^{macro}\((\d+)\)", src, re.M)) == {str(cs) for cs in geo.sizes}, geo.source
    assert {form: d(f.dyn, f.geo.source) for form, f in topk_variants.UNION_FORMS.items()} == {
        "radix_union": d("UNI_DYN_BYTES"), "radix_union_bulk": d("UNI_BULK_DYN_BYTES"), "radix_union_own": d("UNI_DYN_BYTES"),
        "radix_union_own_wfind": d("UNI_DYN_BYTES"), "radix_union_own_regions": d("UNI_DYN_BYTES"),
        "radix_union_own_wfind_late": d("UNI_DYN_BYTES"), "radix_union_early3": d("UNI_DYN_BYTES"), "radix_union_early4": d("UNI_DYN_BYTES"),
        "radix_union_half": 65536, "radix_union_half_own": 65536}
    comp = registry.get("dsa_topk")
    assert comp.variant("radix_union").sources == (topk_variants.UNION_SOURCE,)
    why = comp.variant("radix_union").supports(geometry, _point(M=1, context=1048576, pooling="per_token"))
    assert why and "at most 8 CTAs a row (262144 candidates); this row has 1048576" in why


def test_the_half_union_source_declares_half_sm_ctas():
    """topk_union_half.cu: 512 threads, the model's slots a thread and keys a CTA, its ring and held
    part and union in its dynamic shared memory, and two CTAs of it in an SM's 233472 B (ptxas: at
    most 45216 B static) where the one-SM source's CTA takes the SM."""
    geo = topk_model.UNION_HALF

    def d(name):
        return topk_variants.union_define(name, geo.source)
    assert d("ONE_THREADS") == geo.threads == 512 and topk_variants.union_define("ONE_THREADS") == 1024
    assert d("UNI_VECS") == geo.vecs and d("UNI_KEYS") == geo.keys == 4 * geo.vecs * geo.threads
    assert d("UNI_HELD_BYTES") == (d("UNI_VECS") - d("UNI_REG_VECS")) * geo.threads * 16
    assert d("S2_RING_BYTES") == 4 * 2 * geo.threads * 16 == d("UNI_DYN_BYTES") == d("UNI_HELD_BYTES") + d("UNI_CAP") * 8
    assert d("UNI_CTAS_PER_SM") == geo.ctas_per_sm == 2
    assert geo.ctas_per_sm * (d("UNI_DYN_BYTES") + 45216 + 1024) <= 233472
    assert 2 * (topk_variants.union_define("UNI_DYN_BYTES") + 45216 + 1024) > 233472


@pytest.mark.parametrize("M,C,expect", [(32, 65536, 7), (30, 65536, 8), (8, 65536, 8), (33, 65536, 6), (39, 65536, 6),
                                        (64, 65536, 6), (32, 16384, 6), (1, 98304, 8), (1, 98305, None), (1, 262144, None)])
def test_the_half_union_pick(M, C, expect):
    """Half-SM CTAs (12288 keys each): 65536 needs 6; 7 while 32 clusters of 7 fit (32 at once), 8 while
    30 do; past 39 rows no size fits at once and the fewest that hold the row run in waves; 16384 keys
    keep 4096 a CTA at no size (the fewest that hold it, 6); past 8 x 12288 keys a row, none."""
    assert topk_model.pick_union(M, C, 132, topk_model.UNION_HALF) == expect
    assert topk_model.pick_union(32, 65536, 264, topk_model.UNION_HALF) == 8    # elsewhere: 2 SMs // size


def test_the_half_union_thread_maxes_follow_the_element_mapping():
    """At 512 threads key j of thread t is element 4 (q 512 + t) + e."""
    key = np.ones(12288, np.int64)
    key[4 * (5 * 512 + 17) + 3] = 99
    tm = topk_model.thread_maxes(key, geo=topk_model.UNION_HALF)
    assert len(tm) == 512 and tm[17] == 99 and (np.delete(tm, 17) == 1).all()
    assert (topk_model.thread_maxes(np.ones(2052, np.int64), geo=topk_model.UNION_HALF)[513:] == 0).all()
    assert topk_model.thread_maxes(key, 5, topk_model.UNION_HALF)[17] == 1       # the early form's first 5 slots


@pytest.mark.parametrize("own", [False, True], ids=["exchanged", "own"])
@pytest.mark.parametrize("union_cap", [16, 16384], ids=["cap16-row", "served"])
@pytest.mark.parametrize("cs", topk_model.UNION_HALF.sizes)
@pytest.mark.parametrize("kind", (*KINDS, "one_level"))
def test_the_half_union_emulation_gives_the_reference_set(kind, cs, union_cap, own):
    """The half-SM geometry (512 threads, 6 slots a thread) on every row kind at irregular lengths:
    the reference's set exactly, members first, then -1."""
    rng = np.random.default_rng(zlib.crc32(repr(("half", kind, cs, union_cap, own)).encode()))
    for C, k in ((1, 1), (7, 3), (2049, 512), (5000, 6000), (30001, 700), (65536, 512)):
        row = _rows(kind, C, min(k, C), rng)
        out, _ = topk_model.select_row_union(row, k, cs, union_cap, 2560, rng, own, geo=topk_model.UNION_HALF)
        res = _strict_ok(out, row, k)
        assert res.ok, (kind, C, k, cs, union_cap, own, res.describe())


@pytest.mark.parametrize("own", [False, True], ids=["exchanged", "own"])
@pytest.mark.parametrize("M", [8, 32, 64])
def test_the_half_union_serves_the_pooled_rows(M, own):
    """512 of 65536 on N(0, 1) rows at the half pick (8, 7, 6 CTAs): the union serves with under 4k
    keys, the window finishes it, and the bound is at most the k-th key; the own form's ranks mostly
    agree (the second round otherwise)."""
    union_cap, cap = _union_caps()
    cs = topk_model.pick_union(M, 65536, topk_variants.H200_SMS, topk_model.UNION_HALF)
    rng = np.random.default_rng(M + 71)
    agree = 0
    for _ in range(6):
        row = rng.standard_normal(65536).astype(np.float32)
        out, tr = topk_model.select_row_union(row, 512, cs, union_cap, cap, rng, own, geo=topk_model.UNION_HALF)
        assert tr.served and 512 <= tr.n_union < 4 * 512 and tr.T >= tr.b << 20, (M, cs, tr.n_union)
        assert tr.final in ("window", "window_warp") and _strict_ok(out, row, 512).ok
        agree += tr.agree
    assert agree >= 4, agree

