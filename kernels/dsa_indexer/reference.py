"""The DSA selection path's references, rule by rule (seed 001's kpool_compress -> index_scores
-> topk_pools -> expand_selection; seed 003 §5.2, §5.3, §8.5). Exact or float64, NumPy; no
kernel yet (issue 14 builds them against these).

One query token per stream at position ``t`` (counting from 0), so ``t + 1`` tokens are visible.

- ``kpool_compress``: complete pools only (a pool counts when all of its kpool tokens are
  visible); per channel d, kbar[p, d] = sum_r softmax_r(gate[kpool p + r, d] + ape[r, d]) k[kpool p + r, d]
  (the softmax over the pool-slot axis, max-subtracted).
- ``index_scores``: I[c] = sum_j w[j] relu(q[j] . key[c]) over the 32 heads (w already carries
  the 1/64 scale); candidates past ``eligible`` score -inf. ``relu=False`` prices the fuel's open
  fact (score_relu) the other way.
- ``topk``: the top ``k`` candidates by score, in descending score; among equal scores the lower
  index wins (the documented tie rule every selection kernel is judged by); a chosen candidate with
  a non-finite score is -1; fewer than ``k`` candidates leave -1 after them.
- ``expand_selection``: the row a sparse MLA reads: for a query among the first ``topk_tokens``
  positions, every token 0..t (dense); otherwise each chosen pool's kpool tokens in order (a -1
  pool gives kpool -1 slots), then the tail (the 0..kpool-1 tokens of the incomplete pool, the
  query included); the row is ``width`` slots, -1 wherever nothing was written (seed 001: the whole
  row is written, -1 first).
"""

from __future__ import annotations

import math

import numpy as np


def selection_width(topk_tokens: int, kpool: int, pad: int) -> int:
    """Slots a selection row holds: the top-k tokens and the longest tail, padded (2112)."""
    return math.ceil((topk_tokens + kpool - 1) / pad) * pad


def complete_pools(t: int, kpool: int) -> int:
    """Pools whose every token is visible to a query at position t."""
    return (t + 1) // kpool


def kpool_compress(k: np.ndarray, gate: np.ndarray, ape: np.ndarray, t: int) -> np.ndarray:
    """k, gate: [n, D] (per-token keys and gates, n > t); ape: [kpool, D]. -> [pools, D] float64."""
    kpool, D = ape.shape
    pools = complete_pools(t, kpool)
    kk = np.asarray(k[:pools * kpool], np.float64).reshape(pools, kpool, D)
    logits = np.asarray(gate[:pools * kpool], np.float64).reshape(pools, kpool, D) + np.asarray(ape, np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    return (weights * kk).sum(axis=1)


def index_scores(q: np.ndarray, w: np.ndarray, keys: np.ndarray, eligible: int, relu: bool = True) -> np.ndarray:
    """q: [heads, D], w: [heads], keys: [C, D] -> [C] float64; candidates >= eligible are -inf."""
    dots = np.asarray(keys, np.float64) @ np.asarray(q, np.float64).T     # [C, heads]
    if relu:
        dots = np.maximum(dots, 0.0)
    scores = dots @ np.asarray(w, np.float64)
    scores[eligible:] = -np.inf
    return scores


def topk(scores: np.ndarray, k: int) -> np.ndarray:
    """The top k indices (int32, length k) in descending score; ties: the lower index first; a
    chosen non-finite score, and every slot past the candidates, is -1."""
    scores = np.asarray(scores, np.float64)
    order = np.lexsort((np.arange(len(scores)), -np.nan_to_num(scores, nan=-np.inf)))[:k]
    out = np.full(k, -1, np.int32)
    chosen = order[np.isfinite(scores[order])]
    # non-finite scores sort last, so the finite ones are a prefix of the order
    out[:len(chosen)] = chosen
    return out


def expand_selection(pools: np.ndarray, t: int, kpool: int, topk_tokens: int, width: int) -> np.ndarray:
    """Pool ids (topk's output, -1 allowed) -> the token row of width ``width`` (int32)."""
    row = np.full(width, -1, np.int32)             # written -1 first, as seed 001's kernel does
    if t + 1 <= topk_tokens:                       # the first topk positions attend densely
        row[:t + 1] = np.arange(t + 1)
        return row
    pools = np.asarray(pools, np.int64)
    tokens = np.where(pools[:, None] >= 0, pools[:, None] * kpool + np.arange(kpool), -1).reshape(-1)
    tail = np.arange(complete_pools(t, kpool) * kpool, t + 1)
    chosen = np.concatenate([tokens, tail])
    row[:len(chosen)] = chosen
    return row


def select_tokens(q, w, k, gate, ape, t: int, topk_tokens: int, pad: int, relu: bool = True) -> np.ndarray:
    """The whole path for one query with pooled keys: compress, score, pick topk_tokens / kpool
    pools, expand (index_topk counted in tokens, the fuel's value; the open alternative counts
    pools: call ``topk`` with topk_tokens itself)."""
    kpool = ape.shape[0]
    width = selection_width(topk_tokens, kpool, pad)
    if t + 1 <= topk_tokens:
        return expand_selection(np.zeros(0, np.int32), t, kpool, topk_tokens, width)
    pooled = kpool_compress(k, gate, ape, t)
    scores = index_scores(q, w, pooled, eligible=len(pooled), relu=relu)
    return expand_selection(topk(scores, topk_tokens // kpool), t, kpool, topk_tokens, width)
