"""select_fused.cu's selection logic emulated in NumPy, step for step, from the scores a CTA would
compute: the launch plan (slices a stream), the 64-bit keys, each CTA's threshold buffer (rounds
of SEL_HEAD keys at most, appended in any order; the shrink when the count passes cap - SEL_HEAD;
select_kth's digit passes with the whole-bin stop; the in-place keep), the final shrink to k, and
the merge. tests/test_indexer_select.py holds it to reference.topk on random, tied, few-eligible
and all -inf rows, and the CPU variant ``model_fused`` runs it through the runner.

The constants are the kernel's, read from its source (one declaration).
"""

from __future__ import annotations

import pathlib

import numpy as np

from kernels.sparse_mla.variants import source_define

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = "select_fused.cu"
TILE = 16                                           # MMA_TILE_KEYS (scan_mma_tile.cuh)
MERGE_SMEM_MAX = 200 << 10                          # the merge's pool of S k keys, shared memory


def define(name: str) -> int:
    return source_define(str(HERE / SOURCE), name)


WARPS, ROUND_TILES = define("SEL_WARPS"), define("SEL_ROUND_TILES")
ROUND_TILES_LONG = define("SEL_ROUND_TILES_LONG")   # the _r16 kernels' rounds


def head(round_tiles: int = ROUND_TILES) -> int:
    """SEL_HEAD_OF(R): the most keys entering in one round of R tiles a warp."""
    return WARPS * round_tiles * TILE


HEAD = head()                                       # SEL_HEAD
KMAX, MERGE_MAX_SLICES, BINS = define("SEL_KMAX"), define("MERGE_MAX_SLICES"), define("SEL_BINS")
ORDERED_POS_INF = np.uint32(0xFF800000)


def capacity(k: int, round_tiles: int = ROUND_TILES) -> int:
    """Buffer entries of a CTA (the launcher's dynamic shared memory / 8): 2k + SEL_HEAD_OF(R), so a
    shrink (to k) leaves at least k entries of room before the next."""
    return 2 * k + head(round_tiles)


def plan(M: int, C: int, k: int, sms: int, ctas_per_sm: int, merge_smem: int = MERGE_SMEM_MAX) -> tuple[int, int]:
    """(S, slice_tiles): slices a stream and tiles a slice. As many slices as fill the resident
    CTA slots (M S <= sms x ctas_per_sm), but no more than the merge's shared memory holds (S k
    keys of 8 bytes) nor MERGE_MAX_SLICES, nor than there are tiles; then every slice non-empty."""
    ntiles = -(-C // TILE)
    fill = max(1, (sms * ctas_per_sm) // M)
    merge = max(1, min(MERGE_MAX_SLICES, merge_smem // (8 * k)))
    S = max(1, min(fill, merge, ntiles))
    slice_tiles = -(-ntiles // S)
    return -(-ntiles // slice_tiles), slice_tiles


def ordered(scores: np.ndarray) -> np.ndarray:
    """ordered_bits: float32 -> uint32 in the floats' order, -0 as +0."""
    b = np.ascontiguousarray(scores, np.float32).view(np.uint32).copy()
    b[b == 0x80000000] = 0
    return np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)


def live(scores: np.ndarray) -> np.ndarray:
    """live_score: neither NaN nor -inf."""
    b = np.ascontiguousarray(scores, np.float32).view(np.uint32)
    return ((b & 0x7FFFFFFF) <= 0x7F800000) & (b != 0xFF800000)


def make_keys(scores: np.ndarray, index: np.ndarray) -> np.ndarray:
    return (ordered(scores).astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - index.astype(np.uint64))


def key_index(keys: np.ndarray) -> np.ndarray:
    hi = (keys >> np.uint64(32)).astype(np.uint32)
    idx = (np.uint64(0xFFFFFFFF) - (keys & np.uint64(0xFFFFFFFF))).astype(np.int64)
    return np.where(hi == ORDERED_POS_INF, -1, idx).astype(np.int32)


def select_kth(keys: np.ndarray, k: int) -> tuple[int, int]:
    """(T, passes): the kernel's MSB-first radix select over distinct keys (len > k >= 1):
    exactly k keys are >= T."""
    assert len(keys) > k >= 1
    prefix, want = 0, k
    for p in range(8):
        shift = 56 - 8 * p
        if p == 0:
            match = keys
        else:
            hi_mask = (~np.uint64(0)) << np.uint64(shift + 8)
            match = keys[(keys & hi_mask) == np.uint64(prefix)]
        digit = ((match >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64)
        hist = np.bincount(digit, minlength=BINS)[::-1]          # bins 255 .. 0
        incl = np.cumsum(hist)
        j = int(np.searchsorted(incl, want))                      # first with incl >= want
        above = int(incl[j] - hist[j])
        bin_ = BINS - 1 - j
        prefix |= bin_ << shift
        want -= above
        if hist[j] == want:
            return prefix, p + 1
    raise AssertionError("select_kth: keys are not distinct")   # the last bin holds one key


def _shrink(buf: list, k: int) -> tuple[list, int]:
    keys = np.concatenate(buf) if buf else np.zeros(0, np.uint64)
    T, _ = select_kth(keys, k)
    kept = keys[keys >= np.uint64(T)]
    assert len(kept) == k, (len(kept), k)
    return [kept], T


def cta(scores: np.ndarray, first: int, elig: int, k: int, tiles: int, rng: np.random.Generator | None,
        trace: dict | None = None, round_tiles: int = ROUND_TILES) -> np.ndarray:
    """One CTA of select_fused: its slice's tiles [first / 16, + tiles) of a row's scores (float32,
    the whole row), keys below ``elig``; returns its (<= k) keys. rng: the order in which the
    round's (warp, tile) groups append (any order is legal); None: in order. round_tiles: R, the
    tiles a warp scores between the count checks (2; the _r16 kernels 16)."""
    cap, headroom = capacity(k, round_tiles), head(round_tiles)
    t0 = first // TILE
    etiles = -(-elig // TILE)
    nt = max(0, min(t0 + tiles, etiles) - t0)
    rounds = -(-(-(-nt // WARPS)) // round_tiles)
    buf, count, thresh = [], 0, np.uint64(0)
    shrinks = 0
    for r in range(rounds):
        groups = [(w, round_tiles * r + u) for w in range(WARPS) for u in range(round_tiles)]
        groups = [(w, j) for w, j in groups if w + WARPS * j < nt]
        if rng is not None:
            groups = [groups[i] for i in rng.permutation(len(groups))]
        for w, j in groups:
            c0 = (t0 + w + WARPS * j) * TILE
            rows = np.arange(c0, min(c0 + TILE, elig))
            s = scores[rows]
            ok = live(s)
            keys = make_keys(s[ok], rows[ok])
            keys = keys[keys > thresh]
            buf.append(keys)
            count += len(keys)
            assert count <= cap, "buffer overflow"
        if count > cap - headroom:
            buf, T = _shrink(buf, k)
            thresh, count, shrinks = max(thresh, np.uint64(T)), k, shrinks + 1
    if count > k:
        buf, _ = _shrink(buf, k)
        shrinks += 1
    if trace is not None:
        trace["shrinks"] = trace.get("shrinks", 0) + shrinks
    return np.concatenate(buf) if buf else np.zeros(0, np.uint64)


def merge(lists: list[np.ndarray], k: int) -> np.ndarray:
    """select_merge: the k largest keys of the slices' lists as indices (+inf -> -1), then -1."""
    pool = np.concatenate(lists) if lists else np.zeros(0, np.uint64)
    out = np.full(k, -1, np.int32)
    if len(pool) > k:
        T, _ = select_kth(pool, k)
        pool = pool[pool >= np.uint64(T)]
    out[:len(pool)] = key_index(pool)
    return out


def select_row(scores: np.ndarray, elig: int, k: int, S: int, slice_tiles: int,
               rng: np.random.Generator | None = None, trace: dict | None = None,
               round_tiles: int = ROUND_TILES) -> np.ndarray:
    """One stream through both kernels: [k] int32."""
    lists = [cta(scores, s * slice_tiles * TILE, elig, k, slice_tiles, rng, trace, round_tiles) for s in range(S)]
    if trace is not None:
        trace["written"] = trace.get("written", 0) + sum(len(x) for x in lists)
    return merge(lists, k)


def select(scores: np.ndarray, eligible: np.ndarray, k: int, sms: int, ctas_per_sm: int,
           rng: np.random.Generator | None = None, round_tiles: int = ROUND_TILES) -> np.ndarray:
    """Every stream ([M, C] float32 scores, [M] eligible) with the launcher's plan: [M, k] int32."""
    M, C = scores.shape
    S, tiles = plan(M, C, k, sms, ctas_per_sm)
    return np.stack([select_row(scores[m], int(eligible[m]), k, S, tiles, rng, round_tiles=round_tiles)
                     for m in range(M)])
