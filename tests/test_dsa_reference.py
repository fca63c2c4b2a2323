"""The DSA selection references, one test per rule (seed 003 §5.2, §8.5; seed 001), with the
sources' own worked examples where they give one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.verify import IndexSet, compare
from kernels.dsa_indexer import reference as ref

KPOOL, TOPK, PAD, D, HEADS = 4, 2048, 64, 128, 32


def _query(rng):
    return rng.standard_normal((HEADS, D)), rng.uniform(-1, 1, HEADS) / 64


def _keys(rng, n):
    return rng.standard_normal((n, D)), rng.standard_normal((n, D)), rng.standard_normal((KPOOL, D))


def test_width_is_2112():
    assert ref.selection_width(TOPK, KPOOL, PAD) == 2112           # ceil((2048 + 3) / 64) * 64


@pytest.mark.parametrize("t,pools,tail", [(10001, 2500, [10000, 10001]), (10003, 2501, [])])
def test_seed003_worked_examples(t, pools, tail):
    """§8.5: the query at 10,001 sees 10,002 tokens: 2,500 complete pools (0..9,999), 512 chosen,
    the tail 10,000 and 10,001 appended: 2,050 rows read. At 10,003 the last pool is complete and
    the tail is empty."""
    rng = np.random.default_rng(t)
    (q, w), (k, gate, ape) = _query(rng), _keys(rng, t + 1)
    assert ref.complete_pools(t, KPOOL) == pools
    row = ref.select_tokens(q, w, k, gate, ape, t, TOPK, PAD)
    valid = row[row >= 0]
    assert len(row) == 2112 and len(valid) == 2048 + len(tail) and (row[len(valid):] == -1).all()
    chosen = valid[:2048].reshape(512, KPOOL)
    assert (chosen == chosen[:, :1] + np.arange(KPOOL)).all() and (chosen[:, 0] % KPOOL == 0).all()
    assert chosen.max() < pools * KPOOL and len(np.unique(chosen[:, 0])) == 512
    assert list(valid[2048:]) == tail


@pytest.mark.parametrize("t", [0, 100, 2047])
def test_the_first_2048_positions_attend_densely(t):
    row = ref.expand_selection(np.zeros(0, np.int32), t, KPOOL, TOPK, 2112)
    assert list(row[:t + 1]) == list(range(t + 1)) and (row[t + 1:] == -1).all()


def test_compression_uses_complete_pools_and_a_per_channel_softmax():
    rng = np.random.default_rng(3)
    k, gate, ape = _keys(rng, 12)
    pooled = ref.kpool_compress(k, gate, ape, t=10)                # 11 visible: 2 complete pools
    assert pooled.shape == (2, D)
    logits = torch.from_numpy(gate[:8].reshape(2, KPOOL, D) + ape)
    expect = (torch.softmax(logits, dim=1) * torch.from_numpy(k[:8].reshape(2, KPOOL, D))).sum(1)
    assert np.allclose(pooled, expect.numpy(), rtol=1e-12, atol=1e-12)
    assert np.allclose(ref.kpool_compress(k, np.zeros_like(gate), np.zeros_like(ape), 10),
                       k[:8].reshape(2, KPOOL, D).mean(1))            # equal logits: the plain mean
    big = np.zeros_like(ape)
    big[3] = 1e3                                                    # slot 3 dominates every channel
    assert np.allclose(ref.kpool_compress(k, np.zeros_like(gate), big, 10), k[[3, 7]])


def test_seed003_scoring_example_and_the_relu():
    """§5.2: two heads score A (0.8, -0.3) and B (-0.5, 0.9): with w = (1.0, 0.5) A = 0.80 and
    B = 0.45; with w = (1.0, 2.0) B = 1.8 wins. Without the ReLU A would be 0.65."""
    q = np.eye(2)
    keys = np.array([[0.8, -0.3], [-0.5, 0.9]])
    assert np.allclose(ref.index_scores(q, np.array([1.0, 0.5]), keys, 2), [0.80, 0.45])
    assert np.allclose(ref.index_scores(q, np.array([1.0, 2.0]), keys, 2), [0.8, 1.8])
    assert np.allclose(ref.index_scores(q, np.array([1.0, 0.5]), keys, 2, relu=False), [0.65, -0.05])
    assert np.isneginf(ref.index_scores(q, np.array([1.0, 0.5]), keys, 1)[1])


def test_topk_tie_rule_non_finite_and_short_rows():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0, -np.inf, np.nan])
    assert list(ref.topk(scores, 4)) == [1, 2, 4, 3]                # equal scores: lower index first
    assert list(ref.topk(scores, 7)) == [1, 2, 4, 3, 0, -1, -1]     # chosen non-finite scores: -1
    assert list(ref.topk(scores[:3], 5)) == [1, 2, 0, -1, -1]       # fewer candidates than k
    assert list(ref.topk(np.zeros(6), 3)) == [0, 1, 2]               # all equal: the lowest indices


def test_topk_is_what_the_index_set_check_judges():
    """The reference's tie rule is the one IndexSet(lower_index) enforces; a kernel that breaks
    the boundary tie the other way still passes equal_scores and fails lower_index."""
    scores = np.array([[5.0, 1.0, 4.0, 4.0, 4.0, 0.5]])
    reference = {"best": ref.topk(scores[0], 3)[None], "scores": scores}
    other = np.array([[0, 4, 3]], np.int32)                         # 4 and 3 instead of 2 and 3
    assert compare("best", reference["best"], reference, IndexSet("scores", "lower_index")).ok
    assert compare("best", other, reference, IndexSet("scores", "equal_scores")).ok
    assert not compare("best", other, reference, IndexSet("scores", "lower_index")).ok


def test_a_minus_one_pool_expands_to_minus_one_slots():
    row = ref.expand_selection(np.array([3, -1, 0], np.int32), t=5000, kpool=KPOOL, topk_tokens=8, width=64)
    assert list(row[:12]) == [12, 13, 14, 15, -1, -1, -1, -1, 0, 1, 2, 3]
    assert list(row[12:13]) == [5000] and (row[13:] == -1).all()   # 5001 visible: tail 5000
