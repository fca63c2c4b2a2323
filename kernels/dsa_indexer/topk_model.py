"""A NumPy emulation of ``topk_radix.cu``'s selection logic, phase by phase, so that the multi-CTA
design (histogram digits, cluster merges, the equal-key quota split over CTAs, the index-order
take) is checked on the CPU against ``reference.topk`` before any GPU runs it
(tests/test_dsa_topk.py), and the CPU backend can run it as a variant (``model_radix``).

Every count is taken the way the kernel takes it (per-CTA histograms of the same digits, the same
merge and bin search, members counted from histograms and written by comparisons), so a slip in
the counting shows up here as an unwritten (poisoned) or duplicated slot, not only as a wrong set.
What the emulation leaves out is the order within a CTA's shared-counter writes (the kernel's
atomics give any order; here index order) and the warp-level aggregation, which changes no count.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

KEY_POSINF = 0xFF800000
BIN_POSINF = KEY_POSINF >> 21          # 2044: the digit-0 bin of +inf, which holds +inf alone
DIGITS = ((21, 2048), (10, 2048), (0, 1024))   # (shift, bins): key bits 31..21, 20..10, 9..0
POISON = np.int32(np.uint32(0xAAAAAAAA).view(np.int32))
THREADS = 512                          # DSA_TOPK_THREADS: a CTA's threads, the bound's groups


def bound_group_lanes(k: int, cs: int, threads: int = THREADS) -> int:
    """bound_group_lanes of topk_radix.cu: the largest power of two R <= 32 with 2 x threads x cs /
    R >= k (a group gives 2 keys >= its second largest); 0 when k > 2 x threads x cs (no bound)."""
    per = 2 * threads * cs // k
    if per == 0:
        return 0
    r = 1
    while r * 2 <= per and r < 32:
        r *= 2
    return r


def lower_bound(key: np.ndarray, slices, k: int, cs: int, vec: bool, threads: int = THREADS) -> int:
    """dsa_topk_bound's tlb: the least, over groups of R lanes of every CTA, of the group's second
    largest key (0 for a group with fewer than 2 keys, and 0 when R = 0). A thread of CTA c holds
    the float4 indices lo / 4 + tid + threads j (vector path) or the elements lo + tid + threads j
    (scalar path)."""
    R = bound_group_lanes(k, cs, threads)
    if R == 0:
        return 0
    least = None
    for lo, hi in slices:
        e = np.arange(lo, hi)
        tid = ((e >> 2) - (lo >> 2)) % threads if vec else (e - lo) % threads
        gid = tid // R
        kv = key[lo:hi].astype(np.int64)
        order = np.lexsort((kv, gid))                     # by group, then key ascending
        g_sorted, k_sorted = gid[order], kv[order]
        second = np.zeros(threads // R, np.int64)
        counts = np.bincount(gid, minlength=threads // R)
        ends = np.cumsum(counts)                           # one past each group's largest
        has2 = counts >= 2
        second[has2] = k_sorted[ends[has2] - 2]
        assert (g_sorted[ends[has2] - 2] == np.flatnonzero(has2)).all()
        m = int(second.min())
        least = m if least is None else min(least, m)
    return least


def keys(scores: np.ndarray) -> np.ndarray:
    """The kernel's order-preserving uint32 key of float32 scores: -0 folded onto +0, -inf and NaN
    to 0 (the lowest key), +inf to 0xff800000 (above every finite score)."""
    b = np.ascontiguousarray(scores, np.float32).view(np.uint32).copy()
    b[b == 0x80000000] = 0
    key = np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)
    low = ((b & 0x7FFFFFFF) > 0x7F800000) | (b == 0xFF800000)
    key[low] = 0
    return key


def _crossing(counts_desc: np.ndarray, kk: int) -> tuple[int, int]:
    """Position j in a descending-order count vector where the running count first reaches kk,
    and the count before it."""
    before = np.concatenate([[0], np.cumsum(counts_desc)[:-1]])
    j = int(np.flatnonzero((before < kk) & (before + counts_desc >= kk))[0])
    return j, int(before[j])


def find_bin(hist: np.ndarray, kk: int) -> tuple[int, int]:
    """The bin holding the kk-th largest key of a merged histogram and the count above it; (0,
    total) when the histogram holds fewer than kk. As cluster_find_bin: the 32-bin group first
    (from the group sums), then the bin within it."""
    total = int(hist.sum())
    if total < kk:
        return 0, total
    groups = hist.reshape(-1, 32).sum(axis=1)
    jg, gabove = _crossing(groups[::-1], kk)
    g = len(groups) - 1 - jg
    jb, above = _crossing(hist[32 * g:32 * g + 32][::-1], kk - gabove)
    return 32 * g + 31 - jb, gabove + above


@dataclasses.dataclass
class RowTrace:
    """What one row's selection decided, for tests: the threshold key, the CTAs that overflowed
    their buffer, the per-CTA quota of keys equal to T, and which CTA took a partial quota."""

    T: int
    b0: int
    overflow: list[bool]
    quota: list[int]
    partial: list[int]
    tlb: int = 0


def select_row(scores: np.ndarray, k: int, cs: int, cap: int, bound: bool = False) -> tuple[np.ndarray, RowTrace]:
    """One row as a cluster of ``cs`` CTAs with ``cap`` buffer entries each: ``(out [k] int32,
    trace)``. out holds the members first, then -1; a slot the logic never wrote keeps POISON.
    bound: dsa_topk_bound's logic, every count and the buffer over the keys >= lower_bound only
    (T >= that bound, so the decisions are the same; the overflows are fewer)."""
    key = keys(scores)
    C = len(key)
    L = -(-C // (4 * cs)) * 4
    slices = [(min(C, c * L), min(C, c * L + L)) for c in range(cs)]
    tlb = lower_bound(key, slices, k, cs, C % 4 == 0) if bound else 0
    # the bound's counts are over the keys >= tlb (with tlb = 0 every key, key 0 included)
    ks = [key[lo:hi][key[lo:hi] >= tlb] for lo, hi in slices]
    pos = [lo + np.flatnonzero(key[lo:hi] >= tlb) for lo, hi in slices]

    def hists(level: int, masks) -> list[np.ndarray]:
        shift, nb = DIGITS[level]
        return [np.bincount(((kc[mk] >> shift) & (nb - 1)).astype(np.int64), minlength=nb) for kc, mk in zip(ks, masks)]

    h0 = hists(0, [np.ones(len(kc), bool) for kc in ks])
    b0, G = find_bin(sum(h0), k)
    # pass 2's buffer: keys > 0 with digit 0 >= b0; a CTA with more than cap of them overflows
    overflow = [int(((kc != 0) & ((kc >= tlb) if bound else ((kc >> 21) >= b0))).sum()) > cap for kc in ks]
    T, b1, b2 = 0, 0, 0
    h1 = h2 = None
    if b0 != 0:
        h1 = hists(1, [(kc >> 21) == b0 for kc in ks])
        b1, above1 = find_bin(sum(h1), k - G)
        prefix = (b0 << 11) | b1
        h2 = hists(2, [(kc >> 10) == prefix for kc in ks])
        b2, above2 = find_bin(sum(h2), k - G - above1)
        G += above1 + above2
        T = (prefix << 10) | b2
    t_finite = b0 != 0 and T != KEY_POSINF
    A = [int(h0[c][b0 + 1:].sum()) + (int(h1[c][b1 + 1:].sum() + h2[c][b2 + 1:].sum()) if b0 else 0)
         for c in range(cs)]
    P = [int(h0[c][BIN_POSINF]) if T < KEY_POSINF else 0 for c in range(cs)]
    E = [int(h2[c][b2]) if t_finite else 0 for c in range(cs)]
    Q = k - G
    quota, eq_before = [], 0
    for c in range(cs):
        quota.append(min(E[c], max(Q - eq_before, 0)) if t_finite else 0)
        eq_before += E[c]
    members = [A[c] - P[c] + quota[c] for c in range(cs)]
    out = np.full(k, POISON, np.int32)
    partial = []
    for c, ((lo, hi), kc, pc) in enumerate(zip(slices, ks, pos)):
        base = sum(members[:c])
        take_all_eq = t_finite and quota[c] == E[c]
        chosen = (kc != 0) & (kc != KEY_POSINF) & ((kc > T) | (take_all_eq & (kc == T)))
        idx = pc[chosen]
        out[base:base + len(idx)] = idx
        if t_finite and 0 < quota[c] < E[c]:
            partial.append(c)
            eq = pc[kc == T][:quota[c]]                        # index order: the lowest first
            at = base + A[c] - P[c]
            out[at:at + len(eq)] = eq
    F = sum(members)
    out[F:] = -1
    return out, RowTrace(T=T, b0=b0, overflow=overflow, quota=quota, partial=partial, tlb=tlb)


def select(scores: np.ndarray, k: int, cs: int, cap: int, bound: bool = False) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row)."""
    return np.stack([select_row(row, k, cs, cap, bound)[0] for row in scores])


# ---- topk_resident.cu (dsa_topk_resident_c*): the row held on chip, one read ------------------

RES_THREADS, RES_CHUNKS = 1024, 16     # DSA_TOPK_RES_THREADS; chunks of 4 a thread (6 in registers)
RES_SLICE = 4 * RES_THREADS * RES_CHUNKS   # 65536 keys a CTA


@dataclasses.dataclass
class ResidentTrace:
    """What one row's resident selection decided: T, b0, each CTA's quota and ties, the claim order."""

    T: int
    b0: int
    quota: list[int]
    ties: list[int]
    claim_order: list[int]


def resident_slices(C: int, cs: int) -> list[tuple[int, int]]:
    """CTA rank c's index range [lo, hi): L = ceil(C / cs) rounded up to 4, clamped to C."""
    L = (-(-C // cs) + 3) & ~3
    return [(min(C, c * L), min(C, min(C, c * L) + L)) for c in range(cs)]


def select_row_resident(scores: np.ndarray, k: int, cs: int, claim_order=None) -> tuple[np.ndarray, ResidentTrace]:
    """One row as topk_resident.cu's cluster of ``cs`` CTAs: ``(out [k] int32, trace)``.

    As the kernel: slice element e = lo + 4 (t + 1024 j) + s is thread t's (j, s) (a padded
    [16, 1024, 4] array, padding key 0); digit histograms count the nonzero keys only; the quota
    of keys == T from the ranks' tie counts in rank order; the tie rank in index order from the
    per-thread chunk counts packed two to a uint32 word (16-bit fields), scanned over threads as
    uint32 words (a carry between fields would show here as a wrong rank); the output bases claimed
    on a counter in ``claim_order`` (any permutation of the ranks: the kernel's atomics give any).
    A slot never written keeps POISON."""
    key = keys(scores)
    C = len(key)
    slices = resident_slices(C, cs)
    if any(hi - lo > RES_SLICE for lo, hi in slices):
        raise ValueError(f"a slice of {max(hi - lo for lo, hi in slices)} keys > {RES_SLICE}: C = {C} needs more CTAs than {cs}")
    tiles = []                                   # [16, 1024, 4] keys and indices a CTA
    for lo, hi in slices:
        kt = np.zeros(RES_SLICE, np.uint32)
        kt[:hi - lo] = key[lo:hi]
        tiles.append((kt.reshape(RES_CHUNKS, RES_THREADS, 4), lo + np.arange(RES_SLICE).reshape(RES_CHUNKS, RES_THREADS, 4)))

    def hist(level: int, sel) -> np.ndarray:
        shift, nb = DIGITS[level]
        return sum(np.bincount(((kt[sel(kt)] >> shift) & (nb - 1)).astype(np.int64), minlength=nb) for kt, _ in tiles)

    b0, G = find_bin(hist(0, lambda kt: kt != 0), k)
    p_total = int(sum(int((kt == KEY_POSINF).sum()) for kt, _ in tiles))
    T = 0
    if b0 != 0:
        b1, above1 = find_bin(hist(1, lambda kt: (kt >> 21) == b0), k - G)
        prefix = (b0 << 11) | b1
        b2, above2 = find_bin(hist(2, lambda kt: (kt >> 10) == prefix), k - G - above1)
        G += above1 + above2
        T = (prefix << 10) | b2
    t_finite = b0 != 0 and T != KEY_POSINF
    Q = k - G
    ties = [int((kt == T).sum()) if t_finite else 0 for kt, _ in tiles]
    quota = [min(ties[c], max(Q - sum(ties[:c]), 0)) if t_finite else 0 for c in range(cs)]
    above = [int(((kt > T) & (kt != KEY_POSINF)).sum()) for kt, _ in tiles]
    order = list(range(cs)) if claim_order is None else list(claim_order)
    assert sorted(order) == list(range(cs))
    base, counter = [0] * cs, 0
    for c in order:
        base[c], counter = counter, counter + above[c] + quota[c]
    out = np.full(k, POISON, np.int32)
    for c, (kt, it) in enumerate(tiles):
        member = (kt > T) & (kt != KEY_POSINF)                 # [j, t, s]
        nm = member.sum(axis=(0, 2))                           # per thread
        pos0 = np.concatenate([[0], np.cumsum(nm)[:-1]])       # exclusive over threads
        # within a thread, (j, s) order: the running count over its 64 values
        per_thread = member.transpose(1, 0, 2).reshape(RES_THREADS, -1)
        within = np.cumsum(per_thread, axis=1) - per_thread
        slot = base[c] + pos0[:, None] + within
        idx = it.transpose(1, 0, 2).reshape(RES_THREADS, -1)
        out[slot[per_thread]] = idx[per_thread]
        eq = (kt == T) & t_finite
        fields = eq.sum(axis=2).astype(np.uint32)              # [16 chunks, 1024 threads], <= 4 each
        words = fields[0::2] | (fields[1::2] << 16)            # [8 words, threads]: chunk 2w low, 2w + 1 high
        excl = np.cumsum(words, axis=1, dtype=np.uint32) - words
        tot = words.sum(axis=1, dtype=np.uint32)
        lower = np.stack([(excl[j >> 1] >> (16 * (j & 1))) & 0xFFFF for j in range(RES_CHUNKS)])      # [j, t]
        chunk_tot = np.array([(int(tot[j >> 1]) >> (16 * (j & 1))) & 0xFFFF for j in range(RES_CHUNKS)])
        chunk_before = np.concatenate([[0], np.cumsum(chunk_tot)[:-1]])
        run = np.cumsum(eq, axis=2) - eq                        # own earlier s in the chunk
        rank = chunk_before[:, None, None] + lower[:, :, None] + run
        take = eq & (rank < quota[c])
        out[(base[c] + above[c] + rank)[take]] = it[take]
    F = (G - p_total if T < KEY_POSINF else 0) + (Q if t_finite else 0)
    assert F == counter, (F, counter)
    out[F:] = -1
    return out, ResidentTrace(T=T, b0=b0, quota=quota, ties=ties, claim_order=order)


def select_resident(scores: np.ndarray, k: int, cs: int) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_resident, ranks claiming
    their output slots last rank first)."""
    return np.stack([select_row_resident(row, k, cs, list(range(cs))[::-1])[0] for row in scores])


# ---- topk_onecta.cu (dsa_topk_onecta): one CTA a row, the threshold bin buffered ---------------

ONE_DIGITS = ((20, 4096), (10, 1024), (0, 1024))   # key bits 31..20, 19..10, 9..0
ONE_BIN_POSINF = KEY_POSINF >> 20                  # 4088: digit 0 of +inf, which holds +inf alone


@dataclasses.dataclass
class OneTrace:
    """What one row's one-CTA selection decided: b0, T, the buffered bin-b0 keys, overflow, the
    direct members of pass 2, the keys == T (E) and how many were taken (Q), partial or whole."""

    b0: int
    T: int
    buffered: int
    overflow: bool
    direct: int
    E: int
    Q: int
    partial: bool
    from_buffer: bool = False    # a partial level taken from bin b0's buffer (s2_take_buffered)


def _find_desc(hist: np.ndarray, kk: int) -> tuple[int, int]:
    """one_find: the bin of the kk-th largest counted key and the count above it; (0, total) when
    fewer than kk are counted (thread t owns bins NB - P (t + 1) .. NB - P t - 1, descending)."""
    total = int(hist.sum())
    if total < kk:
        return 0, total
    j, above = _crossing(hist[::-1], kk)
    return len(hist) - 1 - j, above


def _one_select(key: np.ndarray, k: int, cap: int, rng: np.random.Generator, drop: bool, value, ties,
                buffered_ties: bool = False) -> tuple[np.ndarray, OneTrace]:
    """topk_onecta.cuh's one_select over a source of keys: ``(slots [k] int64, trace)``.

    key [n] int64: the source's keys (0: nothing); value(positions) -> what a member's slot holds
    (the sink's put); ties(T, Q) -> the Q values the sink's index-order take writes at slots
    above .. above + Q - 1; drop: +inf counts towards k but is never a member (else a key like any
    other, its level's ties taken by index); buffered_ties (topk_split2.cu's s2_select): a partial
    level whose bin b0 did not overflow is taken from the buffer instead, the Q lowest values among
    the source's keys == T (s2_take_buffered). Slots past F hold -1; a slot never written keeps POISON.
    As the kernel: digit 0 (12 bits) of the nonzero keys; every key in a bin above b0 (not +inf
    under drop) written at a shared counter in pass 2; bin b0's nonzero keys buffered (overflow past
    ``cap``: the digits and the write read the source again, the same keys); digits 1 and 2 over
    bin b0 only; bin b0's members at the counter after the direct ones; a partial take of keys == T
    at slots above + rank; -1 from F. The counter's claims come in a random order (``rng``; the
    kernel's atomics give any)."""
    n = len(key)
    pos = np.arange(n)
    nz = key != 0
    b = key >> 20
    assert (b[nz] >= 8).all(), "a nonzero key has digit 0 >= 8: bin 0 holds key 0 alone"
    h0 = np.bincount(b[nz], minlength=4096)
    b0, G0 = _find_desc(h0, k)
    P = int(h0[ONE_BIN_POSINF]) if drop else 0
    out = np.full(k, POISON, np.int64)
    counter = 0

    def claim(chosen: np.ndarray) -> None:
        nonlocal counter
        order = rng.permutation(len(chosen))
        out[counter:counter + len(chosen)] = value(chosen[order])   # a slot past k would raise here
        counter += len(chosen)

    not_posinf = (key != KEY_POSINF) if drop else np.ones(n, bool)
    direct = (b > b0) & not_posinf                             # b > b0 >= 0: nonzero
    claim(pos[direct])
    n_direct = counter
    in_bin = nz & (b == b0)
    overflow = int(in_bin.sum()) > cap
    T, G = 0, G0
    if b0 != 0:
        kb = key[in_bin]
        h1 = np.bincount((kb >> 10) & 0x3FF, minlength=1024)
        b1, above1 = _find_desc(h1, k - G0)
        prefix = (b0 << 10) | b1
        h2 = np.bincount(kb[(kb >> 10) == prefix] & 0x3FF, minlength=1024)
        b2, above2 = _find_desc(h2, k - G0 - above1)
        G = G0 + above1 + above2
        T = (prefix << 10) | b2
    t_finite = b0 != 0 and (not drop or T != KEY_POSINF)
    above = G - P if (not drop or T < KEY_POSINF) else 0
    Q = k - G
    E = int(((key == T) & nz).sum()) if t_finite else 0        # h2[b2]: every key == T is in bin b0
    take_all = t_finite and Q == E
    if b0 != 0:
        member = in_bin & (((key > T) & not_posinf) | (take_all & (key == T)))
        claim(pos[member])
    assert counter == above + (E if take_all else 0), (counter, above, E, take_all)
    partial = t_finite and 0 < Q < E
    from_buffer = partial and buffered_ties and not overflow
    if partial:
        taken = np.sort(value(pos[key == T]))[:Q] if from_buffer else np.asarray(ties(T, Q))
        assert len(taken) == Q
        out[above:above + Q] = taken
    F = above + (Q if t_finite else 0)
    out[F:] = -1
    return out, OneTrace(b0=b0, T=T, buffered=int(in_bin.sum()), overflow=overflow, direct=n_direct, E=E, Q=Q,
                         partial=partial, from_buffer=from_buffer)


def _ties_of_row(key: np.ndarray, lo: int, hi: int):
    """topk_take_ties over [lo, hi) of a row's keys: the first Q indices with key == T, in index order."""
    return lambda T, Q: lo + np.flatnonzero(key[lo:hi] == T)[:Q]


def select_row_onecta(scores: np.ndarray, k: int, cap: int, rng: np.random.Generator | None = None
                      ) -> tuple[np.ndarray, OneTrace]:
    """One row as topk_onecta.cu's single CTA with ``cap`` buffer entries: ``(out [k] int32, trace)``
    (_one_select over the row, a member's slot holding its index, -1 for +inf)."""
    rng = rng or np.random.default_rng(0)
    key = keys(scores).astype(np.int64)
    out, trace = _one_select(key, k, cap, rng, True, lambda p: p, _ties_of_row(key, 0, len(key)))
    return out.astype(np.int32), trace


def select_onecta(scores: np.ndarray, k: int, cap: int) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_onecta)."""
    rng = np.random.default_rng(1)
    return np.stack([select_row_onecta(row, k, cap, rng)[0] for row in scores])


# ---- topk_split.cu (dsa_topk_split): P CTAs a row, candidates, the last CTA's final select -------

SPLIT_MAX = 16                         # the most CTAs a row pick_split gives


def pick_split(M: int, C: int, k: int, sms: int) -> int:
    """CTAs a row for dsa_topk_split: P near sqrt(C / k) (stage 1 reads C / P keys a CTA, stage 2
    P k candidates on one CTA: their sum is least there), at most SPLIT_MAX, and at most sms // M
    so that the M P CTAs run in one wave (one CTA an SM); at least 1."""
    return max(1, min(sms // M, SPLIT_MAX, int(round(math.sqrt(C / k)))))


def split_slices(C: int, P: int) -> list[tuple[int, int]]:
    """CTA r's slice [lo, hi): L = ceil(C / P) rounded up to 4, clamped to C (topk_split.cu)."""
    L = (-(-C // P) + 3) & ~3
    return [(min(C, r * L), min(C, min(C, r * L) + L)) for r in range(P)]


@dataclasses.dataclass
class SplitTrace:
    """One row's split selection: every slice's stage-1 trace and stage 2's (over the candidates)."""

    slices: list[OneTrace]
    final: OneTrace


def _candidate_workspace(P: int, kp: int) -> tuple[np.ndarray, np.ndarray]:
    """The split designs' candidate workspace [P kp] keys and row indices, as the launcher poisons it
    (a key of 0xAAAAAAAA ranks high in stage 2: an unwritten slot shows)."""
    poison_key = int(np.uint32(POISON.view(np.uint32)))
    return np.full(P * kp, poison_key, np.int64), np.full(P * kp, POISON, np.int64)


def _store_segment(cand_key: np.ndarray, cand_idx: np.ndarray, r: int, kp: int, slots: np.ndarray,
                   key: np.ndarray) -> None:
    """Stage 1's write of slice r: its members (slots holding row indices) as (key, index) pairs,
    key 0 from the fill's first slot to kp; an unwritten slot keeps the poison."""
    k = len(slots)
    seg_key, seg_idx = cand_key[r * kp:(r + 1) * kp], cand_idx[r * kp:(r + 1) * kp]   # views
    member = (slots != -1) & (slots != POISON)
    seg_idx[:k][member] = slots[member]
    seg_key[:k][member] = key[slots[member]]
    seg_key[:k][slots == -1] = 0                               # the fill: key 0 from F ...
    seg_key[k:] = 0                                            # ... to kp


def select_row_split(scores: np.ndarray, k: int, P: int, cap: int, rng: np.random.Generator | None = None,
                     buffered_ties: bool = False) -> tuple[np.ndarray, SplitTrace]:
    """One row as topk_split.cu's P CTAs (and topk_split2.cu's: the same decisions, slots and
    candidates, there stored as (key, index) pairs): ``(out [k] int32, trace)``.

    Stage 1, each slice: _one_select over its keys without drop (+inf a key like any other), its
    members as (key, row index) candidates in the slice's segment of kp = k rounded up to 4 slots
    (in the counter's random order), key 0 in the slots past them, a partial tie quota taken from
    the slice's keys in index order; a slot never written keeps POISON (a key of 0xAAAAAAAA, which
    stage 2 would rank high: the test sees it). Stage 2: _one_select (drop) over the P kp candidate
    keys, a member's slot holding its candidate's row index, a partial tie quota taken from the
    whole row in index order (the kernel re-reads the scores). buffered_ties: topk_split2.cu's
    s2_select, which takes a partial level from bin b0's buffer where it did not overflow, in both
    stages (the same set: _one_select)."""
    rng = rng or np.random.default_rng(0)

    def stage1(key, lo, hi):
        return _one_select(key[lo:hi], k, cap, rng, False, lambda p: lo + p, _ties_of_row(key, lo, hi),
                           buffered_ties)
    out, traces, final = _split_stages(scores, k, P, cap, rng, stage1, buffered_ties)
    return out, SplitTrace(slices=traces, final=final)


def _split_stages(scores: np.ndarray, k: int, P: int, cap: int, rng: np.random.Generator, stage1,
                  buffered_ties: bool):
    """The split designs' two stages over one row: stage1(key, lo, hi) -> (slots [k], trace) for each
    slice (slots holding row indices, -1 past the members), stored as candidates; then stage 2 over
    the P kp candidates. ``(out [k] int32, the slices' traces, stage 2's trace)``."""
    key = keys(scores).astype(np.int64)
    kp = (k + 3) & ~3
    cand_key, cand_idx = _candidate_workspace(P, kp)
    traces = []
    for r, (lo, hi) in enumerate(split_slices(len(key), P)):
        slots, tr = stage1(key, lo, hi)
        _store_segment(cand_key, cand_idx, r, kp, slots, key)
        traces.append(tr)
    out, final = _one_select(cand_key, k, cap, rng, True, lambda p: cand_idx[p], _ties_of_row(key, 0, len(key)),
                             buffered_ties)
    return out.astype(np.int32), traces, final


def select_split(scores: np.ndarray, k: int, P: int, cap: int) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_split)."""
    rng = np.random.default_rng(2)
    return np.stack([select_row_split(row, k, P, cap, rng)[0] for row in scores])


# ---- topk_split2.cu (dsa_topk_split2): the same decisions; its 2-barrier bin search ------------


def find_two_barriers(hist: np.ndarray, kk: int, threads: int = 1024) -> tuple[int, int]:
    """topk_split2.cu's s2_find, step by step: thread t owns the PB = NB / threads bins
    NB - PB (t + 1) .. NB - PB t - 1 (read in descending order), a warp scans its lanes' sums, lane
    31 publishes the warp's total; every warp then scans the 32 totals itself, so thread t's
    exclusive prefix is (warps before it) + (lanes before it in its warp); the one thread whose
    range holds the kk-th largest key finds the bin in its own PB counts. (0, total) when fewer than
    kk are counted. Must equal _find_desc (one_find) on every histogram."""
    nb = len(hist)
    pb = nb // threads
    assert pb * threads == nb and threads == 32 * 32
    h = np.asarray(hist, np.int64)
    c = np.stack([h[nb - pb * np.arange(threads) - 1 - b] for b in range(pb)], axis=1)   # [t, b] descending
    mine = c.sum(axis=1)
    lanes = mine.reshape(32, 32)                                   # [warp, lane]
    incl = np.cumsum(lanes, axis=1)
    warp_tot = incl[:, 31]                                         # lane 31's publish
    wincl = np.cumsum(warp_tot)
    total = int(wincl[31])
    before = ((wincl - warp_tot)[:, None] + incl - lanes).ravel()  # exclusive prefix a thread
    if total < kk:
        return 0, total
    t = np.flatnonzero((before < kk) & (before + mine >= kk))
    assert len(t) == 1, "exactly one thread holds the crossing"
    t = int(t[0])
    run = int(before[t])
    for b in range(pb):
        if run + int(c[t, b]) >= kk:
            return nb - pb * t - 1 - b, run
        run += int(c[t, b])
    raise AssertionError("the crossing thread's bins hold the kk-th key")


def split2_positions(n: int, pairs: bool, threads: int = 1024, vecs: int = 2, ring_batches: int = 4):
    """topk_split2.cu's S2Src mapping for a source of n keys: ``(pos, ring, source_slot)`` arrays
    [batches, threads, KEYS]: key j of thread t's batch b is source position pos (PER keys a float4
    slot: 4 scores or 2 pairs), read from ring float4 slot ring, which issue(b) filled from the
    source's float4 source_slot. pos >= n: past the end (key 0, never a hit)."""
    per = 2 if pairs else 4
    keys = per * vecs
    step = vecs * threads
    nb = -(-n // (per * step))
    b = np.arange(nb)[:, None, None]
    t = np.arange(threads)[None, :, None]
    j = np.arange(keys)[None, None, :]
    u = j // per
    src_slot = b * step + u * threads + t                          # S2Src::slot
    pos = per * src_slot + j % per                                 # S2Src::pos
    ring = ((b % ring_batches) * vecs + u) * threads + t           # S2Src::ring_slot
    # issue(b): source float4 i = b step + u T + t -> ring ((b % RB) VECS + u) T + t, for every u
    return pos, ring, src_slot


# ---- topk_split2.cu's dsa_topk_sample: stage 1 over the keys at or above a sampled bound --------

SMP_BLOCK = 128            # topk_split2.cu SMP_BLOCK: keys a sample block (one warp's 16-B loads)
SMP_BLOCKS = 64            # SMP_BLOCKS: blocks a CTA at most
SMP_UNITS = 2              # SMP_UNITS: 4-key units a thread (2048 a CTA of 1024 threads)
SMP_MARGIN = 4.0           # SMP_MARGIN


def sample_positions(n: int, threads: int = 1024) -> tuple[np.ndarray, int]:
    """smp_load's sample of a slice of n keys: ``(positions, g)``, the sampled positions in the
    slice (the first SMP_BLOCK keys of every group of g keys, as units of 4, clipped at n) and g."""
    g = SMP_BLOCK * max(1, -(-n // (SMP_BLOCK * SMP_BLOCKS)))
    units = SMP_BLOCK // 4 * (-(-n // g))
    assert units <= SMP_UNITS * threads
    i = np.arange(units)
    e0 = (i >> 5) * g + 4 * (i & 31)
    pos = (e0[:, None] + np.arange(4)[None, :]).ravel()
    return pos[pos < n], g


def sample_bound(key: np.ndarray, k: float) -> int:
    """smp_bound: t_est for a slice's keys [n] int64 (0: none), the k best wanted (k a float32 where
    dsa_topk_share asks for a slice's share of the row's k): the lower edge of
    the 22-bit prefix (digit 0 of 12 bits, digit 1 of 10) at which the sampled nonzero keys reach
    rank rs = ceil(mu + SMP_MARGIN sqrt(mu)) + 1, mu = SMP_BLOCK k / g; 1 (every nonzero key) when fewer
    than rs sampled keys are nonzero. The kernel's float32 arithmetic for rs."""
    pos, g = sample_positions(len(key))
    s = key[pos]
    s = s[s != 0]
    mu = np.float32(SMP_BLOCK) * np.float32(k) / np.float32(g)
    rs = int(np.ceil(mu + np.float32(SMP_MARGIN) * np.sqrt(mu, dtype=np.float32))) + 1
    bs, above = _find_desc(np.bincount(s >> 20, minlength=4096), rs)
    if bs == 0:
        return 1
    b1, _ = _find_desc(np.bincount((s[(s >> 20) == bs] >> 10) & 0x3FF, minlength=1024), rs - above)
    return (bs << 20) | (b1 << 10)


def sample_float(key: int) -> np.float32:
    """topk_common.cuh's topk_key_floor: the least float32 x with keys(x) >= key (1 <= key <= +inf's key),
    so that x >= sample_float(key) exactly when keys(x) >= key (the kernel's stream compares scores)."""
    if key < 0x00800000:
        return np.uint32(0xFF7FFFFF).view(np.float32)          # -FLT_MAX
    bits = (key & 0x7FFFFFFF) if key & 0x80000000 else (~key & 0xFFFFFFFF)
    return np.uint32(bits).view(np.float32)


@dataclasses.dataclass
class SampleTrace:
    """One slice's stage 1 in dsa_topk_sample: the bound, the keys at or above it, whether the
    buffer served (else the fallback over the slice), and the select's trace."""

    t_est: int
    hits: int
    buffered: bool
    select: OneTrace


def select_row_sample(scores: np.ndarray, k: int, P: int, cap: int, smp_cap: int,
                      rng: np.random.Generator | None = None) -> tuple[np.ndarray, list[SampleTrace], OneTrace]:
    """One row as dsa_topk_sample's P CTAs: ``(out [k] int32, the slices' traces, stage 2's trace)``.

    Stage 1, each slice: t_est = sample_bound; the hits (keys >= t_est) buffered in a random order
    (the kernel's warp atomics give any); if hits <= smp_cap and (hits >= k or t_est == 1) the select
    (_one_select without drop) runs over the buffer, a member's value its row index and a partial
    tie take from its bin buffer (s2_take_buffered) or, that overflowing, from the slice in index
    order; otherwise over the slice itself (split2's stage 1).
    The candidates, then stage 2, as select_row_split."""
    rng = rng or np.random.default_rng(0)

    def stage1(key, lo, hi):
        sk = key[lo:hi]
        t_est = sample_bound(sk, k)
        hit_pos = rng.permutation(np.flatnonzero(scores[lo:hi] >= sample_float(t_est)))   # the kernel's compare
        use_buf = len(hit_pos) <= smp_cap and (len(hit_pos) >= k or t_est == 1)
        ties = _ties_of_row(key, lo, hi)
        if use_buf:
            slots, tr = _one_select(sk[hit_pos], k, cap, rng, False, lambda p: lo + hit_pos[p], ties, True)
        else:
            slots, tr = _one_select(sk, k, cap, rng, False, lambda p: lo + p, ties, True)
        return slots, SampleTrace(t_est=t_est, hits=len(hit_pos), buffered=use_buf, select=tr)
    return _split_stages(scores, k, P, cap, rng, stage1, True)


def select_sample(scores: np.ndarray, k: int, P: int, cap: int, smp_cap: int) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_sample)."""
    rng = np.random.default_rng(3)
    return np.stack([select_row_sample(row, k, P, cap, smp_cap, rng)[0] for row in scores])


# ---- topk_split2.cu's dsa_topk_share: no select in stage 1, each slice's share bound --------------


@dataclasses.dataclass
class ShareTrace:
    """One row in dsa_topk_share: each slice's (t_est, t_share, hits, served, H pairs, L pairs), the
    level the final's result came from (1: the H groups, 2: both groups, 3: the row) and its trace."""

    slices: list[tuple[int, int, int, bool, int, int]]
    level: int
    final: OneTrace


def share_bound(key: np.ndarray, k: int, C: int) -> int:
    """dsa_topk_share's t_share for a slice's keys [n] of a row of C: the bound at the slice's share
    k n / C of the row's k (float32, as the kernel), at least t_est."""
    share = np.float32(k) * np.float32(len(key)) / np.float32(C)
    return max(sample_bound(key, k), sample_bound(key, share))


def select_row_share(scores: np.ndarray, k: int, P: int, cap: int, smp_cap: int, union_cap: int,
                     rng: np.random.Generator | None = None) -> tuple[np.ndarray, ShareTrace]:
    """One row as dsa_topk_share's P CTAs: ``(out [k] int32, trace)``.

    Each slice: t_est and t_share (share_bound), the hits (keys >= t_est); served (hits <= smp_cap
    and (hits >= k or t_est == 1)): group H the hits >= t_share, group L the rest, each padded to
    an even count of pairs (key 0), header t = t_share (0 when <= 1); else the slice's k best
    (select_row_split's stage 1) as H with kp pairs, L empty, t = 0. The final: level 1 selects from
    the H groups (when their pairs fit union_cap) and keeps the result if t_max = 0 or its T >=
    t_max; else level 2 from both groups (when they fit), else level 3 from the row (_one_select
    with drop each time; a partial tie level from the select's bin buffer, or, that overflowing, the
    union's ties when at most cap, else the row's in index order)."""
    rng = rng or np.random.default_rng(0)
    key = keys(scores).astype(np.int64)
    C, kp = len(key), (k + 3) & ~3
    segs, infos = [], []
    for lo, hi in split_slices(C, P):
        sk = key[lo:hi]
        t_est, t_share = sample_bound(sk, k), share_bound(sk, k, C)
        hit = np.flatnonzero(scores[lo:hi] >= sample_float(t_est))   # the kernel's compare
        served = len(hit) <= smp_cap and (len(hit) >= k or t_est == 1)
        if served:
            hi_pos = rng.permutation(hit[sk[hit] >= t_share])
            lo_pos = rng.permutation(hit[sk[hit] < t_share])
            H, L = lo + hi_pos, lo + lo_pos
            t, nH, nL = (t_share if t_share > 1 else 0), len(H) + len(H) % 2, len(L) + len(L) % 2
        else:
            slots, _ = _one_select(sk, k, cap, rng, False, lambda p: lo + p, _ties_of_row(key, lo, hi), True)
            H, L = slots[(slots != -1) & (slots != POISON)], np.zeros(0, np.int64)
            t, nH, nL = 0, kp, 0
        segs.append((t, H, L, nH, nL))
        infos.append((t_est, t_share, len(hit), served, nH, nL))
    ties = _ties_of_row(key, 0, C)
    t_max = max(s[0] for s in segs)

    def final(idx: np.ndarray):
        # the kernel's tie take: from the select's bin buffer (s2_take_buffered); where it
        # overflowed, ShrFinalOut's: the Q lowest indices among the union's keys == T, or the row's
        # index-order take when more than cap of the union's keys equal T
        def union_ties(T, Q):
            tied = np.sort(idx[key[idx] == T])
            return tied[:Q] if len(tied) <= cap else ties(T, Q)
        out, tr = _one_select(key[idx], k, cap, rng, True, lambda p: idx[p], union_ties, True)
        return out.astype(np.int32), tr

    if sum(s[3] for s in segs) <= union_cap:
        out, tr = final(np.concatenate([s[1] for s in segs]))
        if t_max == 0 or tr.T >= t_max:
            return out, ShareTrace(infos, 1, tr)
    if sum(s[3] + s[4] for s in segs) <= union_cap:
        out, tr = final(np.concatenate([np.concatenate([s[1], s[2]]) for s in segs]))
        return out, ShareTrace(infos, 2, tr)
    out, tr = final(np.arange(C))
    return out, ShareTrace(infos, 3, tr)


def select_share(scores: np.ndarray, k: int, P: int, cap: int, smp_cap: int, union_cap: int) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_share)."""
    rng = np.random.default_rng(4)
    return np.stack([select_row_share(row, k, P, cap, smp_cap, union_cap, rng)[0] for row in scores])


# ---- topk_union.cu's dsa_topk_union: a cluster a row, the union of the keys >= a row-wide bound ----

UNI_THREADS = 1024                     # ONE_THREADS
UNI_VECS = 8                           # topk_union.cu UNI_VECS: float4 loads a thread
UNI_KEYS = 4 * UNI_VECS * UNI_THREADS  # UNI_KEYS: 32768 keys a CTA at most
UNION_SIZES = (1, 2, 3, 4, 8)          # the cluster sizes topk_union.cu instantiates
# Clusters of 1024-thread CTAs of one SM each that a 132-SM H100 / H200 holds at once, as the driver
# counts them (tools/cluster_slots.py on an H100 at c717f47: 66 of 2, 39 of 3, 30 of 4, 15 of 8; the
# H200 at 99d880a ran 30 clusters of 4 at once, its 31st and 32nd entering once the first ranks
# exited). Elsewhere: SMs // size.
CLUSTER_SLOTS_132 = {1: 132, 2: 66, 3: 39, 4: 30, 8: 15}
UNION_MIN_SLICE = 4096                 # keys a CTA at least when pick_union grows a cluster (4 a thread)


@dataclasses.dataclass(frozen=True)
class UnionGeometry:
    """A union source's CTA shape: ``threads`` a CTA, ``vecs`` float4 slots a thread (UNI_VECS; keys
    a CTA 4 vecs threads), ``ctas_per_sm`` resident at once, the cluster ``sizes`` it instantiates and
    ``slots``: the clusters of each size a 132-SM H100 / H200 holds at once, as the driver counts them
    (tools/cluster_slots.py)."""

    source: str
    threads: int
    vecs: int
    ctas_per_sm: int
    sizes: tuple[int, ...]
    slots: dict

    @property
    def keys(self) -> int:
        return 4 * self.vecs * self.threads


# topk_union.cu: 1024-thread CTAs, one an SM
UNION = UnionGeometry("topk_union.cu", UNI_THREADS, UNI_VECS, 1, UNION_SIZES, CLUSTER_SLOTS_132)
# topk_union_half.cu: 512-thread CTAs, two an SM (512 threads and 100000 B a CTA on an H100, d62b05c:
# 39 clusters of 6, 32 of 7, 30 of 8 at once; reports/2026-12-07-sparse_mla-h100-215508/cluster_slots.txt)
UNION_HALF = UnionGeometry("topk_union_half.cu", 512, 6, 2, (6, 7, 8), {6: 39, 7: 32, 8: 30})


def cluster_slots(cs: int, sms: int, geo: UnionGeometry = UNION) -> int:
    """Clusters of ``cs`` CTAs of ``geo``'s shape that run at once on a GPU of ``sms`` SMs."""
    return geo.slots[cs] if sms == 132 else sms * geo.ctas_per_sm // cs


def pick_union(M: int, C: int, sms: int, geo: UnionGeometry = UNION) -> int | None:
    """CTAs a row (one cluster) for dsa_topk_union (``geo``: its source's CTA shape): of the sizes
    in geo.sizes whose slices (split_slices) hold at most geo.keys keys, the one with the most CTAs
    reading the rows (M cs) while the M clusters still run at once (cluster_slots) and each slice
    keeps at least UNION_MIN_SLICE keys (past that the cluster's fixed cost outweighs the shorter
    read); the fewest that hold the row when no larger one qualifies; None when the largest size
    cannot hold the row. Why the CTAs: each SM reads its slice at a rate of its own (radix_union's
    timelines: ~23 GB/s an SM with 64 or 128 SMs reading), so the read shortens with the SMs, not
    with the cluster size."""
    need = next((cs for cs in geo.sizes if split_slices(C, cs)[0][1] <= geo.keys), None)
    if need is None:
        return None
    grown = [cs for cs in geo.sizes
             if cs > need and M <= cluster_slots(cs, sms, geo) and C >= cs * UNION_MIN_SLICE]
    return max(grown, default=need)


def thread_maxes(key: np.ndarray, vecs: int | None = None, geo: UnionGeometry = UNION) -> np.ndarray:
    """Every thread's largest key over a slice's keys [n <= geo.keys] int64: key j of thread t is
    element 4 (q T + t) + e of the slice (T = geo.threads, q = j / 4, e = j % 4), key 0 past its end;
    over its float4 slots q < ``vecs`` only (the early form's bound: the slots that land first)."""
    vecs = geo.vecs if vecs is None else vecs
    assert len(key) <= geo.keys and 1 <= vecs <= geo.vecs
    padded = np.zeros(geo.keys, np.int64)
    padded[:len(key)] = key
    return padded.reshape(geo.vecs, geo.threads, 4)[:vecs].max(axis=(0, 2))


UNI_WARP_BIN = 32                      # topk_union.cu: the most keys of the k-th key's window bin one warp ranks
UNI_WINDOW_BINS = 1024                 # topk_union.cu: the window digit's bins (rank 0's s.h1, filled by the push)
UNI_OWN_SPAN = (1 << 23) - 1           # topk_union.cu: the own form's window, [tlb, tlb + span] (one octave of keys)


def own_window_top(tlb: int) -> int:
    """The own form's window top (topk_union.cu uni_own_top): tlb + UNI_OWN_SPAN, saturating at the
    largest key. Every rank derives it from the bound alone, so the window digits the ranks push agree
    wherever their bounds do, with no exchange."""
    return min(tlb + UNI_OWN_SPAN, 0xFFFFFFFF)


@dataclasses.dataclass
class UnionTrace:
    """One row in dsa_topk_union: the bound's digit-0 bin b (0: none), the keys >= b << 20 over the
    row (pushed only when b != 0), whether the union served (else the row itself), how rank 0
    finished (``final``: "window" took the k-th key's window bin whole, "window_warp" ranked it in
    one warp, "select" ran s2_select, whose trace is ``select``, else None) and T, the k-th key;
    ``agree``: every rank's bound bin was the same (the own form serves only then)."""

    b: int
    n_union: int
    served: bool
    final: str
    T: int
    select: OneTrace | None
    agree: bool = True


def window_select(ukey: np.ndarray, uidx: np.ndarray, k: int, tlb: int, kmax: int,
                  top: int | None = None) -> tuple[np.ndarray, str, int] | None:
    """topk_union.cu's uni_window_select over a union of (key, row index) pairs holding every row
    key >= its k-th: ``(members [k] int64, final, T)``, or None where it hands on to s2_select (+inf
    in the row, fewer than k pairs, or more than UNI_WARP_BIN keys in the k-th key's bin with only
    part of them taken). The digit is (key - tlb) >> sh, sh the fewest bits that bring kmax - tlb
    under UNI_WINDOW_BINS bins, clamped to the last bin and to 0 below tlb (under --use_fast_math kmax may fall
    short of a denormal key, and a flushed compare may push a key below tlb: the clamps keep the
    digit monotone, and so the select exact). ``top`` (the own form: own_window_top) replaces kmax
    as the window's top; kmax still says whether +inf is in the row."""
    if kmax == KEY_POSINF or len(ukey) < k:
        return None
    R = (kmax if top is None else top) - tlb
    sh = max(0, R.bit_length() - (UNI_WINDOW_BINS.bit_length() - 1))
    d = np.minimum(np.maximum(ukey - tlb, 0) >> sh, UNI_WINDOW_BINS - 1)
    B, A = _find_desc(np.bincount(d, minlength=UNI_WINDOW_BINS), k)
    E, Q = int((d == B).sum()), k - A
    if Q == E:
        return uidx[d >= B], "window", int(ukey[d == B].min())
    if E > UNI_WARP_BIN:
        return None
    inbin = np.flatnonzero(d == B)
    order = inbin[np.lexsort((uidx[inbin], -ukey[inbin]))][:Q]   # key descending, then lower index
    return np.concatenate([uidx[d > B], uidx[order]]), "window_warp", int(ukey[order[-1]])


def select_row_union(scores: np.ndarray, k: int, cs: int, union_cap: int, cap: int,
                     rng: np.random.Generator | None = None, own: bool = False,
                     early: int = 0, geo: UnionGeometry = UNION, regions: bool = False) -> tuple[np.ndarray, UnionTrace]:
    """One row as dsa_topk_union's cluster of ``cs`` CTAs of ``geo``'s shape (UNION, or UNION_HALF:
    dsa_topk_union_half): ``(out [k] int32, trace)``.

    Each slice's thread maxes (thread_maxes), their nonzero digit 0 counted, b_r the bin of the
    ceil(k / cs)-th largest (_find_desc; 0 when fewer); b the least b_r. b != 0: every key >= tlb = b << 20
    pushed to the union in a random order (the cluster's atomics give any); served when at most
    ``union_cap`` were pushed: _one_select with drop over the union, a partial tie level from its bin
    buffer or, that overflowing, ShrFinalOut's take from the union (the row's index-order take past
    ``cap`` of the union's keys == T). Otherwise _one_select over the row (its tie take from the bin
    buffer, else the row's). Where the union serves, rank 0 tries window_select first (kmax: the
    largest thread max of the row, exchanged with the bounds).

    ``own`` (dsa_topk_union_own): no exchange before the push; each rank pushes its keys >= its own
    b_r << 20 with the window digit over [b_r << 20, own_window_top] and stores b_r in every rank.
    Where every b_r is the same bin (``agree``) the union is the one above and the window select
    runs on it; otherwise the ranks above the least b_r push their keys in [b << 20, b_r << 20) in a
    second round, so the union is again every key >= tlb, and rank 0 counts it into the least
    bound's window itself (the ranks' digits disagreed) before the same select.

    ``early`` (dsa_topk_union_early<early>): each rank's b_r from the thread maxes over its first
    ``early`` float4 slots only (those land first; the exchange runs while the rest lands), a lower
    bound still (they are distinct keys of the slice); the window is the own form's, fixed by the
    bound (the row's largest key reaches rank 0 only with the push), kmax still from every key.

    ``regions`` (dsa_topk_union_owns, with ``own``): each rank pushes into its own region of
    ``union_cap // cs`` pairs of rank 0's union, so the union serves only where every rank's keys
    >= tlb fit its region (not where the total fits ``union_cap``); the rest is the own form's."""
    assert not (own and early), "the early form is the exchanged one's"
    assert own or not regions, "the regions are the own form's"
    rng = rng or np.random.default_rng(0)
    key = keys(scores).astype(np.int64)
    C = len(key)
    bounds, kmax = [], 0
    for lo, hi in split_slices(C, cs):
        tm = thread_maxes(key[lo:hi], early or None, geo)
        bounds.append(_find_desc(np.bincount(tm[tm != 0] >> 20, minlength=4096), -(-k // cs))[0])
        kmax = max(kmax, int(thread_maxes(key[lo:hi], None, geo).max()))
    agree = all(b_r == bounds[0] for b_r in bounds)
    b = min(bounds)
    idx = rng.permutation(np.flatnonzero(key >= b << 20)) if b else np.zeros(0, np.int64)
    ties = _ties_of_row(key, 0, C)
    if regions:
        fits = all(int((key[lo:hi] >= b << 20).sum()) <= union_cap // cs for lo, hi in split_slices(C, cs))
    else:
        fits = len(idx) <= union_cap
    served = b != 0 and fits
    if served:
        assert len(idx) >= k, "the cs ceil(k / cs) thread maxes >= tlb are distinct keys"

        win = window_select(key[idx], idx, k, b << 20, kmax, own_window_top(b << 20) if own or early else None)
        if win is not None:
            members, final, T = win
            return (rng.permutation(members).astype(np.int32),
                    UnionTrace(b=int(b), n_union=len(idx), served=True, final=final, T=T, select=None,
                               agree=agree))

        def union_ties(T, Q):
            tied = np.sort(idx[key[idx] == T])
            return tied[:Q] if len(tied) <= cap else ties(T, Q)
        out, tr = _one_select(key[idx], k, cap, rng, True, lambda p: idx[p], union_ties, True)
        assert tr.T >= b << 20, "T >= tlb: the union holds every key of the row >= T"
    else:
        out, tr = _one_select(key, k, cap, rng, True, lambda p: p, ties, True)
    return out.astype(np.int32), UnionTrace(b=int(b), n_union=len(idx), served=served, final="select", T=tr.T,
                                            select=tr, agree=agree)


def select_union(scores: np.ndarray, k: int, union_cap: int, cap: int, sms: int, own: bool = False,
                 early: int = 0, geo: UnionGeometry = UNION, regions: bool = False) -> np.ndarray:
    """Every row of ``scores`` [M, C] float32 -> [M, k] int32 (select_row_union at pick_union's size)."""
    rng = np.random.default_rng(5)
    cs = pick_union(len(scores), scores.shape[1], sms, geo)
    assert cs is not None, f"{geo.source} holds at most {geo.sizes[-1] * geo.keys} keys a row"
    return np.stack([select_row_union(row, k, cs, union_cap, cap, rng, own, early, geo, regions)[0] for row in scores])
