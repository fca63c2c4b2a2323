"""harness.verify: each check kind passes what it should and fails what it should, with the reason.

Exact on raw bytes; RelErr as the tolerance path always was (norm, single element, unwritten,
shape); IndexSet on top-k rows: ties at the k-th boundary, wrong members, duplicates, out-of-range
and poisoned slots, -1 slots, degenerate rows, [M, k] and [M, 2, k] shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.verify import (INDEX_POISON_BYTE, Exact, IndexSet, RelErr, as_check, compare,
                            compare_all)


def one(out, ref, check, name="x", **aux):
    return compare(name, out, {name: ref, **aux}, check)


# -- Exact ------------------------------------------------------------------------------------------


def test_exact_passes_a_copy_and_fails_one_flipped_bit():
    ref = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    assert one(ref.copy(), ref, Exact()).ok
    out = ref.copy()
    out.view(np.uint32)[2, 3] ^= 1  # the lowest mantissa bit: 1 ulp
    c = one(out, ref, Exact())
    assert not c.ok and c.mismatches == 1 and c.first_bad == ((2, 3),) and c.max_err == float("inf")
    assert "1 elements differ" in c.describe() and "(2, 3)" in c.describe()
    assert one(out, ref, RelErr(1e-6)).ok  # what Exact catches, a tolerance does not


def test_exact_counts_nan_payloads_and_signed_zeros():
    ref = np.array([np.nan, 0.0, 1.0], np.float32)
    ref.view(np.uint32)[0] = 0x7FC00001
    other_nan = ref.copy()
    other_nan.view(np.uint32)[0] = 0x7FC00000
    assert np.isnan(other_nan[0])
    c = one(other_nan, ref, Exact())
    assert not c.ok and c.first_bad == ((0,),)
    neg_zero = ref.copy()
    neg_zero[1] = -0.0
    assert not one(neg_zero, ref, Exact()).ok
    assert one(ref.copy(), ref, Exact()).ok  # the same NaN payload passes


def test_exact_integer_word_dtype_and_shape():
    ref = np.arange(12, dtype=np.uint32)
    bad = ref.copy()
    bad[5] = 99
    c = one(bad, ref, Exact())
    assert not c.ok and c.mismatches == 1 and c.first_bad == ((5,),) and c.unwritten == 0
    c = one(ref.astype(np.int32), ref, Exact())  # same values, other dtype
    assert not c.ok and c.mismatches == 12 and "dtype int32" in c.detail
    c = one(ref[:6], ref, Exact())
    assert not c.ok and not c.shape_ok and "shape (6,)" in c.describe()


# -- RelErr: the tolerance path as it was ------------------------------------------------------------


def test_relerr_norm():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000)
    noisy = ref * (1 + 1e-3 * rng.standard_normal(1000))
    c = one(noisy, ref, RelErr(1e-2), "o")
    assert c.ok and 1e-4 < c.rel_err < 2e-3 and c.max_err == pytest.approx(np.abs(noisy - ref).max())
    assert not one(noisy, ref, RelErr(1e-5), "o").ok
    c = one(noisy[:10], ref, RelErr(1e-2), "o")
    assert not c.ok and not c.shape_ok


def test_relerr_single_element_off_fails_under_the_norm():
    ref = np.ones(10_000)
    out = ref.copy()
    out[7] += 0.5   # rel_err 0.5 / 100 = 5e-3, inside 1e-2; but 0.5 > 1e-2 x max|ref|
    c = one(out, ref, RelErr(1e-2))
    assert c.rel_err == pytest.approx(5e-3) and c.mismatches == 1 and c.first_bad == ((7,),) and not c.ok
    out[7] = 1.009  # inside the element bound too
    assert one(out, ref, RelErr(1e-2)).ok


def test_relerr_catches_a_small_stale_region():
    """An in-place state whose last slice was never written keeps plausible initial values: the
    norm-wise error stays under tolerance at large sizes, the element check must still fail."""
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1_000_000)
    out = ref.copy()
    out[-500:] = rng.standard_normal(500)  # stale values in 0.05% of the elements
    c = one(out, ref, RelErr(1e-1), "state")
    assert c.rel_err < 1e-1 and c.mismatches > 0 and not c.ok


def test_relerr_unwritten_nan_and_inf():
    f = np.linspace(1, 2, 10)
    poisoned = f.copy()
    poisoned[3] = np.nan
    poisoned[8] = np.inf
    c = one(poisoned, f, RelErr(1e-2), "o")
    assert not c.ok and c.unwritten == 2 and c.first_bad == ((3,), (8,)) and "unwritten" in c.describe()


def test_relerr_names_the_first_bad_elements_in_order_across_scan_chunks():
    """The first bad indices come from a chunked scan (an all-NaN output must not list every
    index); bad elements on both sides of a chunk edge still come back first-to-last."""
    import torch

    from harness.verify import _first_true

    edge = 1 << 22
    ref = np.ones(edge + 16)
    out = ref.copy()
    out[[edge + 3, 5, edge - 1]] = np.nan
    c = one(out, ref, RelErr(1e-3))
    assert c.unwritten == 3 and c.first_bad == ((5,), (edge - 1,), (edge + 3,)) and not c.ok
    mask = torch.zeros((2, edge), dtype=torch.bool)
    mask[1, 0] = mask[0, edge - 1] = True
    assert _first_true(mask, 3) == ((0, edge - 1), (1, 0))
    assert _first_true(mask.numpy(), 3) == ((0, edge - 1), (1, 0))


@pytest.mark.parametrize("tol", [0.0, -1e-3, float("inf"), float("nan")])
def test_relerr_wants_a_positive_finite_tolerance(tol):
    with pytest.raises(ValueError):
        RelErr(tol)


# -- as_check and compare_all ------------------------------------------------------------------------


def test_as_check_maps_the_old_tolerances():
    assert as_check(0.0) == Exact() and as_check(0) == Exact()
    assert as_check(2e-2) == RelErr(2e-2) and as_check(np.float32(0.5)) == RelErr(0.5)
    ix = IndexSet("scores", "lower_index")
    assert as_check(ix) is ix
    for bad in (True, "0.1", None):
        with pytest.raises(TypeError):
            as_check(bad)


def test_compare_all_compares_exactly_the_named_outputs_in_order():
    ref = {"state": np.ones(8), "o": np.ones(8), "idx": np.array([[1, 0]]), "scores": np.array([[1.0, 2.0]])}
    out = {"o": np.ones(8) * 1.01, "state": np.ones(8) * 1.01, "idx": np.array([[0, 1]]), "extra": np.zeros(1)}
    checks = {"o": RelErr(2e-2), "state": RelErr(1e-3), "idx": IndexSet("scores", "lower_index")}
    got = compare_all(out, ref, checks)
    assert [c.name for c in got] == ["o", "state", "idx"] and [c.ok for c in got] == [True, False, True]
    with pytest.raises(KeyError, match="state"):
        compare_all({"o": out["o"]}, ref, {"o": RelErr(2e-2), "state": RelErr(1e-3)})
    with pytest.raises(KeyError, match="extra"):
        compare_all(out, ref, {"extra": Exact()})
    with pytest.raises(TypeError, match="as_check"):
        compare_all(out, ref, {"o": 2e-2})


# -- IndexSet ---------------------------------------------------------------------------------------

# One row of 8 candidates, top 4. The reference keeps 1 (0.9), 3 (0.8), then two of the three
# 0.5s: 2 and 4, the lower indices; 6 (also 0.5) is the tie it leaves out.
SCORES = [0.1, 0.9, 0.5, 0.8, 0.5, 0.2, 0.5, 0.3]
REF = [1, 3, 2, 4]

CASES = [  # id, out row, passes equal_scores, passes lower_index, reason in describe() or None
    ("same-set-other-order", [4, 2, 3, 1], True, True, None),
    ("boundary-tie-to-higher-index", [1, 3, 2, 6], True, False,
     "wrong member 6 with score 0.5, missing member 4 with score 0.5 (equal scores"),
    ("both-ties-moved", [6, 3, 1, 4], True, False, "wrong member 6"),
    ("wrong-member", [1, 3, 2, 7], False, False, "wrong member 7 with score 0.3, missing member 4 with score 0.5"),
    ("duplicate", [1, 3, 2, 2], False, False, "duplicate member 2 (slots 2 and 3)"),
    ("duplicate-of-a-tie", [1, 3, 6, 6], False, False, "duplicate member 6"),
    ("index-n", [1, 3, 2, 8], False, False, "slot 3 holds 8, outside -1 and [0, 8): out of range"),
    ("negative-not-masked", [1, -2, 2, 4], False, False, "slot 1 holds -2"),
    ("masked-where-ref-has-member", [1, 3, 2, -1], False, False,
     "slot 3 is -1 where the reference has member 4 (score 0.5)"),
]


def _ix(tie, **kw):
    return IndexSet("scores", tie, **kw)


@pytest.mark.parametrize("row,es,li,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_index_row_verdicts(row, es, li, reason):
    ref, scores = np.array([REF]), np.array([SCORES])
    for tie, want in (("equal_scores", es), ("lower_index", li)):
        c = one(np.array([row]), ref, _ix(tie), "idx", scores=scores)
        assert c.ok == want, (tie, c.describe())
        assert (c.mismatches, c.first_bad) == ((0, ()) if want else (1, ((0,),)))
        assert np.isnan(c.rel_err) and c.max_err == (0.0 if want else float("inf"))
        if not want:
            line = c.describe()
            assert "\n" not in line and line.startswith("idx: FAILED") and "row (0,): " in line
            assert reason in line, line
    out_of_range = sum(v != -1 and not 0 <= v < 8 for v in row)
    assert one(np.array([row]), ref, _ix("lower_index"), "idx", scores=scores).unwritten == out_of_range


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_index_poison_is_unwritten_and_minus_one_bytes_are_not_poison(dtype):
    ref = np.array([REF, [-1, -1, -1, -1]], dtype)  # row 1: no eligible candidate at all
    scores = np.array([SCORES, SCORES])
    poison = np.full(ref.nbytes, INDEX_POISON_BYTE, np.uint8).view(dtype).reshape(ref.shape)
    for tie in ("equal_scores", "lower_index"):
        c = one(poison, ref, _ix(tie), "idx", scores=scores)
        assert not c.ok and c.unwritten == 8 and c.mismatches == 2 and c.first_bad == ((0,), (1,))
        assert "0xAA poison bytes): unwritten" in c.describe()
    # 0xFF bytes read as -1: a never-written row where the reference has no member would pass,
    # which is why index outputs are poisoned with 0xAA.
    ff = np.full(ref.nbytes, 0xFF, np.uint8).view(dtype).reshape(ref.shape)
    c = one(ff, ref, _ix("lower_index"), "idx", scores=scores)
    assert c.unwritten == 0 and c.first_bad == ((0,),) and "-1 slot mismatch" in c.detail


# Row with 3 eligible candidates (the rest score -inf) and 5 slots: the reference has two -1s.
SPARSE_SCORES = [-np.inf, 0.4, -np.inf, 0.7, -np.inf, -np.inf, 0.2, -np.inf]
SPARSE_REF = [3, 1, 6, -1, -1]

SPARSE_CASES = [  # id, out row, passes with masked_positions=True, with False, reason when True fails
    ("members-reordered", [6, 3, 1, -1, -1], True, True, None),
    ("minus-one-moved", [3, 1, -1, 6, -1], False, True, "slot 2 is -1 where the reference has member 6"),
    ("minus-ones-first", [-1, -1, 3, 1, 6], False, True, "slot 0 is -1 where the reference has member 3"),
    ("ineligible-picked", [3, 1, 6, 0, -1], False, False, "slot 3 holds member 0 where the reference has -1"),
    ("member-dropped", [3, 1, -1, -1, -1], False, False, "slot 2 is -1 where the reference has member 6"),
    ("ineligible-for-eligible", [3, 1, 0, -1, -1], False, False, "wrong member 0 with score -inf"),
]


@pytest.mark.parametrize("row,fixed,moved,reason", [c[1:] for c in SPARSE_CASES], ids=[c[0] for c in SPARSE_CASES])
def test_index_masked_slots(row, fixed, moved, reason):
    ref, scores = np.array([SPARSE_REF]), np.array([SPARSE_SCORES])
    for tie in ("equal_scores", "lower_index"):
        c = one(np.array([row]), ref, _ix(tie, masked_positions=True), "idx", scores=scores)
        assert c.ok == fixed, (tie, c.describe())
        if not fixed:
            assert reason in c.describe()
        c = one(np.array([row]), ref, _ix(tie, masked_positions=False), "idx", scores=scores)
        assert c.ok == moved, (tie, c.describe())


def test_index_masked_count_differs_is_named():
    ref, scores = np.array([SPARSE_REF]), np.array([SPARSE_SCORES])
    c = one(np.array([[3, 1, 6, 0, -1]]), ref, _ix("equal_scores", masked_positions=False), "idx", scores=scores)
    assert not c.ok and "1 -1 slots where the reference has 2" in c.detail
    c = one(np.array([[3, -1, -1, -1, -1]]), ref, _ix("equal_scores", masked_positions=False), "idx", scores=scores)
    assert not c.ok and "4 -1 slots where the reference has 2" in c.detail


def test_index_all_scores_equal():
    """Every candidate ties: any k distinct candidates have the reference's scores; only the
    lowest k are the reference's set."""
    ref, scores = np.array([[0, 1, 2]]), np.ones((1, 6))
    verdicts = {}
    for name, row in {"lowest": [2, 0, 1], "highest": [5, 4, 3], "mixed": [0, 5, 2], "dup": [0, 1, 1]}.items():
        verdicts[name] = tuple(one(np.array([row]), ref, _ix(tie), "idx", scores=scores).ok
                               for tie in ("equal_scores", "lower_index"))
    assert verdicts == {"lowest": (True, True), "highest": (True, False), "mixed": (True, False),
                        "dup": (False, False)}


def test_index_candidates_bounds_the_range_below_the_scores():
    ref, scores = np.array([REF]), np.array([SCORES])
    row = np.array([[1, 3, 2, 6]])  # 6 has a score but is past candidates = 6
    assert one(row, ref, _ix("equal_scores"), "idx", scores=scores).ok
    c = one(row, ref, _ix("equal_scores", candidates=6), "idx", scores=scores)
    assert not c.ok and c.unwritten == 1 and "outside -1 and [0, 6)" in c.detail
    with pytest.raises(ValueError, match="candidates 9"):
        one(row, ref, _ix("equal_scores", candidates=9), "idx", scores=scores)


def test_index_output_that_is_not_an_index_array_fails():
    ref, scores = np.array([REF]), np.array([SCORES])
    c = one(np.array([REF], np.float32), ref, _ix("lower_index"), "idx", scores=scores)
    assert not c.ok and c.mismatches == 1 and "float32" in c.detail
    c = one(np.array(REF), ref, _ix("lower_index"), "idx", scores=scores)
    assert not c.ok and not c.shape_ok and c.mismatches == 1


def test_index_reference_and_declaration_errors_raise():
    scores = np.array([SCORES])
    with pytest.raises(ValueError, match="reference's row"):
        one(np.array([REF]), np.array([[1, 3, 3, 4]]), _ix("lower_index"), "idx", scores=scores)
    with pytest.raises(ValueError, match="reference's row"):
        one(np.array([REF]), np.array([[1, 3, 2, 9]]), _ix("lower_index"), "idx", scores=scores)
    with pytest.raises(KeyError, match="scores"):
        one(np.array([REF]), np.array([REF]), _ix("lower_index"), "idx")
    with pytest.raises(ValueError, match="rows"):
        one(np.array([REF]), np.array([REF]), _ix("lower_index"), "idx", scores=np.array([SCORES, SCORES]))
    for kw in ({"tie": "first"}, {"tie": "lower_index", "masked": 0}, {"tie": "lower_index", "candidates": 0}):
        with pytest.raises(ValueError):
            IndexSet("scores", **kw)


def _top_k(scores: np.ndarray, k: int, higher_on_ties: bool) -> np.ndarray:
    """Top-k indices per row, ties to the lower index (a stable sort of -scores), or to the higher."""
    if not higher_on_ties:
        return np.argsort(-scores, axis=-1, kind="stable")[..., :k]
    n = scores.shape[-1]
    return n - 1 - np.argsort(-scores[..., ::-1], axis=-1, kind="stable")[..., :k]


@pytest.mark.parametrize("rows", [(64,), (32, 2)], ids=["M,k", "M,2,k"])
def test_index_rows_of_random_ties(rows):
    """Scores drawn from 6 values over 32 candidates, top 8: many rows tie at the boundary. A
    kernel that breaks ties toward the higher index passes equal_scores everywhere and fails
    lower_index exactly in the rows with more boundary candidates than boundary slots."""
    rng = np.random.default_rng(11)
    n, k = 32, 8
    scores = rng.integers(0, 6, size=rows + (n,)).astype(np.float64)
    ref = _top_k(scores, k, higher_on_ties=False)
    kth = -np.sort(-scores, axis=-1)[..., k - 1]
    tied_past_k = (scores >= kth[..., None]).sum(axis=-1) > k
    assert 0 < tied_past_k.sum() < tied_past_k.size  # both kinds of row occur at this seed
    want_bad = tuple(tuple(int(x) for x in i) for i in np.argwhere(tied_past_k)[:3])
    aux = {"scores": scores}

    shuffled = rng.permuted(ref, axis=-1)
    higher = _top_k(scores, k, higher_on_ties=True)
    for tie in ("equal_scores", "lower_index"):
        assert one(shuffled, ref, _ix(tie), "idx", **aux).ok
    assert one(higher, ref, _ix("equal_scores"), "idx", **aux).ok
    c = one(higher.astype(np.int32), ref, _ix("lower_index"), "idx", **aux)
    assert not c.ok and c.mismatches == int(tied_past_k.sum()) and c.first_bad == want_bad
    assert f"row {want_bad[0]}: " in c.describe() and "equal scores" in c.detail

    # One wrong member: the last row's lowest pick swapped for a candidate scoring below the k-th.
    wrong = shuffled.copy()
    last = tuple(s - 1 for s in rows)
    below = np.flatnonzero(scores[last] < kth[last])
    assert below.size
    lowest = int(np.argmin(scores[last][wrong[last]]))
    wrong[last + (lowest,)] = below[0]
    for tie in ("equal_scores", "lower_index"):
        c = one(wrong, ref, _ix(tie), "idx", **aux)
        assert not c.ok and c.mismatches == 1 and c.first_bad == (last,)
        assert f"wrong member {below[0]} with score {float(scores[last][below[0]])!r}" in c.detail


def test_relerr_matches_an_infinite_reference_exactly():
    """A row with nothing to attend to has lse = -inf: the output must be -inf there (a finite
    value, +inf or NaN fails), and the finite elements are still judged by the tolerance."""
    from harness.verify import RelErr, compare

    ref = {"lse": np.array([2.0, -np.inf, 3.0])}
    assert compare("lse", np.array([2.0, -np.inf, 3.0]), ref, RelErr(1e-6)).ok
    for bad in ([2.0, -1e30, 3.0], [2.0, np.inf, 3.0], [2.0, np.nan, 3.0], [2.1, -np.inf, 3.0]):
        assert not compare("lse", np.array(bad), ref, RelErr(1e-6)).ok, bad
    assert not compare("x", np.array([1.0, 2.0]), {"x": np.array([1.0, np.nan])}, RelErr(1e-3)).ok
