/*
DSA top-k (issue 14, the standalone selection): per stream m, the k candidates of highest score out
of C, never sorting the row. topk_model.py is the NumPy emulation of exactly this logic (every
phase, the quota split and the index-order take), tested against reference.topk on the CPU.

The op and its conventions (reference.topk is the rule):
    scores [M][C] float32, row-major, contiguous (the indexer's output; ineligible candidates -inf)
    out    [M][k] int32: the chosen candidates' indices in [0, C), then -1 in slots [F, k)
    - rank by score; among equal scores the LOWER index wins (the tie rule IndexSet judges by);
    - NaN counts as -inf; a chosen non-finite score (+-inf, NaN) is -1, so the members are the
      finite scores among the top k, F of them, written first, in no particular order;
    - fewer than k candidates (C < k) or fewer finite ones leave -1 slots.
    -0.0 and +0.0 are equal scores (the key map folds them), as the reference's comparison has it.

Key: an order-preserving uint32 of the score (sign flipped for positives, all bits for negatives),
with -inf and NaN mapped to 0, the lowest key, and +inf to 0xff800000, the highest (so +inf is
chosen first and becomes -1, as the reference does). Key 0 is never written as a member.

Design (dsa_topk_radix_c{1,2,4,8}: one kernel per cluster size, picked by the launcher so that
M x CS fills the SMs): grid (CS, M), one thread-block cluster of CS CTAs per row
(__cluster_dims__ at compile time, so a plain cuLaunchKernel launches it), 512 threads a CTA.
CTA rank c reads the index range [c L, (c + 1) L) of its row, L = C / CS rounded up to 4 (float4
loads when C % 4 == 0, scalar loads otherwise). The k-th largest key T is found digit by digit
(11, 11, 10 bits): each CTA builds a shared-memory histogram of its slice and its 32-bin group
sums; after barrier.cluster every CTA merges them through distributed shared memory and takes the
same decision: warp 0 sums every rank's group sums (64 or 32 words a rank), finds the group holding
the k-th key by a warp scan from the top, then sums every rank's 32 bins of that group and finds
the bin and the count above it (96 remote words a rank a level instead of 2048).
  pass 1 (HBM): digit 0 (bits 31..21) of every key -> bin b0.
  pass 2 (L2):  every key with digit 0 >= b0 (and key > 0) into a shared buffer of (key, index),
                DSA_TOPK_CAP entries; a CTA whose entries overflow it re-reads its slice from
                global memory for every later step instead (correct either way, slower).
  digits 1 (bits 20..10) and 2 (bits 9..0) from the buffer, merged likewise -> T, G = #(key > T)
  over the row, Q = k - G keys equal to T to take.
  counts: A_c = #(key > T), E_c = #(key == T), P_c = #(+inf) from the CTA's own histograms;
  published, merged: CTA c's quota q_c = clamp(Q - sum_{r<c} E_r, 0, E_c) (its slice is an index
  range, so lower ranks' equal keys come first), its members m_c = A_c - P_c + q_c, its output
  base sum_{r<c} m_r, F = sum m_r.
  write: keys > T (not +inf) and, when q_c == E_c, keys == T, at base + a shared counter; when
  0 < q_c < E_c (only on rows with ties at T: at most one CTA a row) the slice is re-read in index
  order, tiles of 2048 with a block-wide exclusive scan, and the first q_c keys == T written at
  base + (A_c - P_c) + rank. Then -1 in [F, k), and a last cluster barrier so that no CTA leaves
  while another still reads its shared memory.
dsa_topk_lean_c{1,2,4,8}: the same logic and counts with passes 1 and 2 batched (16 keys a thread,
the warp votes and the buffer claim once a batch instead of once a key: lean_pass1 / lean_pass2).
dsa_topk_bound_c{1,2,4,8}: pass 1 builds no histogram; each thread keeps its two largest keys, lane
groups of R (bound_group_lanes: 2 x 512 CS / R >= k) merge theirs, and tlb = the least group's
second largest over the cluster (one barrier.cluster, CS remote words) is <= T: at least k keys are
>= it. Pass 2 (L2) counts digit 0 of the keys >= tlb and buffers the nonzero ones (on iid rows ~9 x
k / 2 of them, ~4% of 262144: shared atomics on ~4% of the row instead of all of it); digit 0's
merge follows, then everything as above over the keys >= tlb (T >= tlb: the same T, counts, quota
and members). tlb = 0 (no bound: k > 1024 CS, an empty or one-key group, all -inf rows) counts every
key, as radix_cluster. topk_model.select_row(bound=True) emulates it.
Shared memory: 20 KiB of histograms and their group sums (never reused, so no extra barriers) +
24 KiB of buffer: 44.7 KiB static, 2 CTAs an SM; __launch_bounds__(512, 2).
*/

#include "topk_common.cuh"
#include "topk_timeline.cuh"

#define DSA_TOPK_THREADS 512
#define DSA_TOPK_WARPS (DSA_TOPK_THREADS / 32)
#define DSA_TOPK_CAP 3072        // buffered (key, index) entries a CTA
#define DSA_TOPK_NB0 2048        // digit 0: key bits 31..21
#define DSA_TOPK_NB1 2048        // digit 1: key bits 20..10
#define DSA_TOPK_NB2 1024        // digit 2: key bits 9..0

struct TopkShared {
    unsigned hist0[DSA_TOPK_NB0];
    unsigned hist1[DSA_TOPK_NB1];
    unsigned hist2[DSA_TOPK_NB2];
    unsigned coarse0[DSA_TOPK_NB0 / 32], coarse1[DSA_TOPK_NB1 / 32], coarse2[DSA_TOPK_NB2 / 32];
    unsigned buf_key[DSA_TOPK_CAP];
    unsigned buf_idx[DSA_TOPK_CAP];
    unsigned scan[DSA_TOPK_WARPS];
    unsigned pub[2];             // published to the cluster: E_c, A_c - P_c
    unsigned n_buf;              // entries appended (may pass DSA_TOPK_CAP: overflow)
    unsigned cnt;                // members written through the shared counter
    unsigned found_bin, found_above;
    unsigned tmin;               // bound: this CTA's least group maximum, published to the cluster
    unsigned tlb;                // bound: the cluster's lower bound on T
    unsigned base, quota, total, eq_local, mp_local;
};

// ---- block and warp helpers ---------------------------------------------------------------------

// Exclusive prefix sum of v over the block in thread order; *total gets the block's sum.
__device__ __forceinline__ unsigned block_exclusive_scan(unsigned v, unsigned* scratch, unsigned* total) {
    return topk_block_scan<DSA_TOPK_WARPS>(v, scratch, total);
}

// One count into h[bin] for each lane with `ok`; the whole warp called together. A warp whose
// counted lanes share one bin (all -inf rows, sorted runs, ties) adds once instead of 32 times.
__device__ __forceinline__ void hist_add(unsigned* h, unsigned bin, bool ok) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned lead = __shfl_sync(FULL_MASK, bin, 0);
    if (__all_sync(FULL_MASK, !ok || bin == lead)) {
        const unsigned n = __popc(__ballot_sync(FULL_MASK, ok));
        if (lane == 0 && n) atomicAdd(&h[lead], n);
    } else if (ok) {
        atomicAdd(&h[bin], 1u);
    }
}

// A slot for each lane with `ok` from the shared counter *ctr (warp-aggregated); the whole warp
// called together. Returns the lane's slot (meaningless where !ok).
__device__ __forceinline__ unsigned warp_claim(unsigned* ctr, bool ok) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned bal = __ballot_sync(FULL_MASK, ok);
    unsigned base = 0u;
    if (lane == 0 && bal) base = atomicAdd(ctr, (unsigned)__popc(bal));
    base = __shfl_sync(FULL_MASK, base, 0);
    return base + __popc(bal & ((1u << lane) - 1u));
}

// f(index, score, ok) for every element of [lo, hi) of `row`, the whole warp calling f together
// (ok false on the lanes past hi). vec: float4 loads (lo and hi multiples of 4, row 16-B aligned),
// 4 of them in flight per thread so that a CTA keeps 32 KiB of reads outstanding.
// for_slice's vector path from the thread's float4 index i (its first: lo / 4 + tid; or where a
// lean pass's main loop left it, so that only the tail remains).
template <class F>
__device__ __forceinline__ void for_slice_vec(const float* __restrict__ row, unsigned i, unsigned hi, F&& f) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned T = DSA_TOPK_THREADS;
    {
        const float4* p = reinterpret_cast<const float4*>(row);
        const unsigned hi4 = hi >> 2;
        for (; i - lane + 31u + 3u * T < hi4; i += 4u * T) {  // warp-uniform: the warp's whole batch below hi4
            const float4 v0 = ld_nc_f32x4(p + i), v1 = ld_nc_f32x4(p + i + T), v2 = ld_nc_f32x4(p + i + 2u * T),
                         v3 = ld_nc_f32x4(p + i + 3u * T);
            const float4 v[4] = {v0, v1, v2, v3};
#pragma unroll
            for (unsigned u = 0; u < 4; ++u) {
                const unsigned e = 4u * (i + u * T);
                f(e, v[u].x, true);
                f(e + 1u, v[u].y, true);
                f(e + 2u, v[u].z, true);
                f(e + 3u, v[u].w, true);
            }
        }
        for (; i - lane < hi4; i += T) {
            const bool ok = i < hi4;
            const float4 v = ok ? ld_nc_f32x4(p + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            const unsigned e = 4u * i;
            f(e, v.x, ok);
            f(e + 1u, v.y, ok);
            f(e + 2u, v.z, ok);
            f(e + 3u, v.w, ok);
        }
    }
}

template <class F>
__device__ __forceinline__ void for_slice(const float* __restrict__ row, unsigned lo, unsigned hi, bool vec, F&& f) {
    const unsigned lane = threadIdx.x & 31u;
    if (vec) {
        for_slice_vec(row, (lo >> 2) + threadIdx.x, hi, f);
    } else {
        for (unsigned i = lo + threadIdx.x; i - lane < hi; i += DSA_TOPK_THREADS) {
            const bool ok = i < hi;
            f(i, ok ? ld_nc_f32(row + i) : 0.f, ok);
        }
    }
}

// The 32-bin group sums of this CTA's finished histogram h (NB bins) into coarse[NB / 32], so
// that a cluster merge reads NB / 32 + 32 words of every rank instead of NB. Between a
// __syncthreads (h complete) and the cluster barrier that publishes both.
template <int NB>
__device__ __forceinline__ void group_sums(const unsigned* h, unsigned* coarse) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    for (unsigned g = warp; g < (unsigned)NB / 32u; g += DSA_TOPK_WARPS) {
        unsigned v = h[32u * g + lane];
#pragma unroll
        for (unsigned o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
        if (lane == 0) coarse[g] = v;
    }
}

// The cluster's merged histogram (every rank's h and coarse summed, after the barrier that
// published them), searched from the top for the bin holding the kk-th largest key:
// s->found_bin = that bin, s->found_above = the count in the bins above it; found_bin = 0 with
// found_above = the total when the histogram holds fewer than kk. Warp 0 searches: first the
// groups (lane l owns groups G - 1 - GPL l - j, lane 0 the highest, so an exclusive prefix over
// lanes counts the groups above), then the 32 bins of the group found (lane l: bin 31 - l of it).
template <int NB, int CS>
__device__ __forceinline__ void cluster_find_bin(const unsigned* h, const unsigned* coarse, unsigned kk,
                                                 TopkShared* s) {
    constexpr int G = NB / 32, GPL = G / 32;
    static_assert(GPL >= 1 && G % 32 == 0, "a lane owns whole groups");
    if (threadIdx.x < 32) {
        const unsigned lane = threadIdx.x;
        unsigned c[GPL];
        unsigned mine = 0u;
#pragma unroll
        for (int j = 0; j < GPL; ++j) {
            unsigned v = 0u;
#pragma unroll
            for (int r = 0; r < CS; ++r) v += ld_rank(coarse + (G - 1 - GPL * lane - j), (unsigned)r);
            c[j] = v;
            mine += v;
        }
        unsigned incl = mine;
#pragma unroll
        for (unsigned o = 1; o < 32; o <<= 1) {
            const unsigned y = __shfl_up_sync(FULL_MASK, incl, o);
            if (lane >= o) incl += y;
        }
        const unsigned total = __shfl_sync(FULL_MASK, incl, 31);
        if (total < kk) {
            if (lane == 0) {
                s->found_bin = 0u;
                s->found_above = total;
            }
        } else {
            unsigned run = incl - mine, gsel = 0u, gabove = 0u;
            bool hit = false;
#pragma unroll
            for (int j = 0; j < GPL; ++j) {
                if (run < kk && run + c[j] >= kk) {  // exactly one (lane, j) pair
                    hit = true;
                    gsel = G - 1 - GPL * lane - j;
                    gabove = run;
                }
                run += c[j];
            }
            const int src = __ffs(__ballot_sync(FULL_MASK, hit)) - 1;
            gsel = __shfl_sync(FULL_MASK, gsel, src);
            gabove = __shfl_sync(FULL_MASK, gabove, src);
            const unsigned b = 32u * gsel + 31u - lane;
            unsigned v = 0u;
#pragma unroll
            for (int r = 0; r < CS; ++r) v += ld_rank(h + b, (unsigned)r);
            unsigned vi = v;
#pragma unroll
            for (unsigned o = 1; o < 32; o <<= 1) {
                const unsigned y = __shfl_up_sync(FULL_MASK, vi, o);
                if (lane >= o) vi += y;
            }
            const unsigned above = gabove + vi - v;
            if (above < kk && above + v >= kk) {  // exactly one lane: the group holds >= kk - gabove
                s->found_bin = b;
                s->found_above = above;
            }
        }
    }
    __syncthreads();
}

// Sum over the bins of this CTA's own histogram h above `bin` (block-wide; every thread gets it).
template <int NB>
__device__ __forceinline__ unsigned local_above(const unsigned* h, unsigned bin, TopkShared* s) {
    unsigned v = 0u;
    for (unsigned b = bin + 1u + threadIdx.x; b < (unsigned)NB; b += DSA_TOPK_THREADS) v += h[b];
    unsigned total;
    block_exclusive_scan(v, s->scan, &total);
    return total;
}

// The lean passes (dsa_topk_lean_c*): pass 1 and pass 2 over the vector path's main loop, 16 keys
// a thread a batch (4 float4 in flight, as for_slice), with the warp-synchronous work done once a
// batch instead of once a key. Pass 1: one __all_sync a batch for the case where the warp's 512
// keys share one digit-0 bin (all -inf rows, sorted runs, ties: one atomic of 512), else a plain
// shared atomicAdd a key with no shuffle or vote. Pass 2: a thread counts its keys to buffer; one
// __any_sync a batch, and only when some lane has one a warp scan of the counts and one atomicAdd
// on n_buf for the warp. The same keys reach the same bins and the buffer (in another order, which
// no later step depends on), so every count, decision and overflow is radix_cluster's exactly.
// The tails (the last < 4 x 512 float4 of a slice) and the scalar path (C % 4 != 0) run the
// per-key code of radix_cluster (for_slice_vec from the float4 index the lean loop returns).
#define DSA_TOPK_BATCH 16u       // keys a thread a batch: 4 float4

__device__ __forceinline__ void lean_batch_keys(const float4* p, unsigned i, unsigned key[DSA_TOPK_BATCH]) {
    const unsigned T = DSA_TOPK_THREADS;
    const float4 v0 = ld_nc_f32x4(p + i), v1 = ld_nc_f32x4(p + i + T), v2 = ld_nc_f32x4(p + i + 2u * T),
                 v3 = ld_nc_f32x4(p + i + 3u * T);
    const float4 v[4] = {v0, v1, v2, v3};
#pragma unroll
    for (unsigned u = 0; u < 4; ++u) {
        key[4u * u] = topk_key(v[u].x);
        key[4u * u + 1u] = topk_key(v[u].y);
        key[4u * u + 2u] = topk_key(v[u].z);
        key[4u * u + 3u] = topk_key(v[u].w);
    }
}

// Batch j of a thread at float4 index i holds element 4 (i + (j / 4) T) + j % 4.
__device__ __forceinline__ unsigned lean_batch_index(unsigned i, unsigned j) {
    return 4u * (i + (j >> 2) * DSA_TOPK_THREADS) + (j & 3u);
}

// The main loop of a lean pass, with for_slice_vec's bounds (float4 index i from lo / 4 + tid while
// the warp's whole batch lies below hi / 4, a warp-uniform condition): f(i, key) for each batch of
// the thread (its 16 keys), the whole warp together; returns the thread's i where the tail starts.
// Vector path only (C % 4 == 0).
template <class F>
__device__ __forceinline__ unsigned lean_batches(const float* __restrict__ row, unsigned lo, unsigned hi, F&& f) {
    const unsigned lane = threadIdx.x & 31u, T = DSA_TOPK_THREADS;
    const float4* p = reinterpret_cast<const float4*>(row);
    const unsigned hi4 = hi >> 2;
    unsigned i = (lo >> 2) + threadIdx.x;
    for (; i - lane + 31u + 3u * T < hi4; i += 4u * T) {  // warp-uniform condition
        unsigned key[DSA_TOPK_BATCH];
        lean_batch_keys(p, i, key);
        f(i, key);
    }
    return i;
}

// Digit 0 of a batch into h: one atomic of 512 when the warp's keys that count (all, or those >= thr)
// are all its 512 and share one bin, else one atomic a counted key.
__device__ __forceinline__ void lean_count0(const unsigned (&key)[DSA_TOPK_BATCH], unsigned thr, unsigned* h) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned lead = __shfl_sync(FULL_MASK, key[0] >> 21, 0);
    bool same = true;
#pragma unroll
    for (unsigned j = 0; j < DSA_TOPK_BATCH; ++j) same = same && key[j] >= thr && (key[j] >> 21) == lead;
    if (__all_sync(FULL_MASK, same)) {
        if (lane == 0) atomicAdd(&h[lead], 32u * DSA_TOPK_BATCH);
    } else {
#pragma unroll
        for (unsigned j = 0; j < DSA_TOPK_BATCH; ++j)
            if (key[j] >= thr) atomicAdd(&h[key[j] >> 21], 1u);
    }
}

__device__ __forceinline__ unsigned lean_pass1(const float* __restrict__ row, unsigned lo, unsigned hi, unsigned* h) {
    return lean_batches(row, lo, hi, [&](unsigned, const unsigned (&key)[DSA_TOPK_BATCH]) { lean_count0(key, 0u, h); });
}

// BOUND (dsa_topk_bound_c*): buffer the keys >= thr (thr = the lower bound tlb) and count their
// digit 0 into h0; else (lean) buffer the keys with digit 0 >= thr (thr = b0), h0 unused.
__device__ __forceinline__ bool lean_take(unsigned key, unsigned thr, bool bound) {
    return key != 0u && (bound ? key >= thr : (key >> 21) >= thr);
}

template <bool BOUND>
__device__ __forceinline__ unsigned lean_pass2(const float* __restrict__ row, unsigned lo, unsigned hi, unsigned thr,
                                               unsigned* n_buf, unsigned* buf_key, unsigned* buf_idx, unsigned* h0) {
    const unsigned lane = threadIdx.x & 31u;
    return lean_batches(row, lo, hi, [&](unsigned i, const unsigned (&key)[DSA_TOPK_BATCH]) {
        if constexpr (BOUND) lean_count0(key, thr, h0);  // digit 0 of the keys >= thr (key 0 too when thr = 0)
        unsigned n = 0u;
#pragma unroll
        for (unsigned j = 0; j < DSA_TOPK_BATCH; ++j) n += lean_take(key[j], thr, BOUND) ? 1u : 0u;
        if (__any_sync(FULL_MASK, n != 0u)) {
            unsigned incl = topk_warp_inclusive_sum(n);
            unsigned wbase = 0u;
            if (lane == 31u) wbase = atomicAdd(n_buf, incl);  // incl of lane 31: the warp's total
            unsigned pos = __shfl_sync(FULL_MASK, wbase, 31) + incl - n;
#pragma unroll
            for (unsigned j = 0; j < DSA_TOPK_BATCH; ++j) {
                if (lean_take(key[j], thr, BOUND)) {
                    if (pos < DSA_TOPK_CAP) {
                        buf_key[pos] = key[j];
                        buf_idx[pos] = lean_batch_index(i, j);
                    }
                    ++pos;
                }
            }
        }
    });
}

// The two largest of a multiset kept as (m1 >= m2), 0 for a missing one: key folded in.
__device__ __forceinline__ void top2_add(unsigned& m1, unsigned& m2, unsigned key) {
    m2 = max(m2, min(m1, key));
    m1 = max(m1, key);
}

// BOUND's pass 1: the thread's keys folded into its two largest (m1, m2); no atomics.
__device__ __forceinline__ unsigned bound_pass1(const float* __restrict__ row, unsigned lo, unsigned hi, unsigned& m1,
                                                unsigned& m2) {
    return lean_batches(row, lo, hi, [&](unsigned, const unsigned (&key)[DSA_TOPK_BATCH]) {
#pragma unroll
        for (unsigned j = 0; j < DSA_TOPK_BATCH; ++j) top2_add(m1, m2, key[j]);
    });
}

// The lane-group size R of the bound: the largest power of two (at most 32) with 2 x (threads x
// CS) / R >= k (each group gives 2 keys >= its second largest); 0 when k > 2 x threads x CS (no
// bound: tlb = 0).
template <int CS>
__device__ __forceinline__ unsigned bound_group_lanes(unsigned k) {
    const unsigned per = (2u * DSA_TOPK_THREADS * (unsigned)CS) / k;
    if (per == 0u) return 0u;
    unsigned r = 1u;
    while (r * 2u <= per && r < 32u) r *= 2u;
    return r;
}

template <int CS, bool LEAN, bool BOUND = false>
__device__ __forceinline__ void topk_body(const float* __restrict__ scores, int* __restrict__ out, int C_, int k_) {
    __shared__ __align__(16) TopkShared s;
    if (cluster_nctarank() != (unsigned)CS) __trap();  // launched without its cluster: fail loudly
    const unsigned C = (unsigned)C_, k = (unsigned)k_;
    const unsigned rank = cluster_ctarank();
    TK_ENTER(rank);
    const unsigned m = blockIdx.y;
    const float* row = scores + (size_t)m * (size_t)C;
    int* orow = out + (size_t)m * (size_t)k;
    const unsigned L = ((C + 4u * CS - 1u) / (4u * CS)) * 4u;
    const unsigned lo = min(C, rank * L), hi = min(C, lo + L);
    const bool vec = (C & 3u) == 0u;
    const unsigned lane = threadIdx.x & 31u;

    for (unsigned b = threadIdx.x; b < DSA_TOPK_NB0; b += DSA_TOPK_THREADS) {
        s.hist0[b] = 0u;
        s.hist1[b] = 0u;
    }
    for (unsigned b = threadIdx.x; b < DSA_TOPK_NB2; b += DSA_TOPK_THREADS) s.hist2[b] = 0u;
    if (threadIdx.x == 0) {
        s.n_buf = 0u;
        s.cnt = 0u;
        s.tmin = 0xffffffffu;
    }
    __syncthreads();

    unsigned b0 = 0u, G = 0u, tlb = 0u;  // G: keys above the bins found so far, over the row
    auto find_b0 = [&]() {  // hist0 complete in every CTA: merge, b0 and the count above it
        __syncthreads();
        TK_MARK(BOUND ? TK_PASS2 : TK_READ);
        group_sums<DSA_TOPK_NB0>(s.hist0, s.coarse0);
        cluster_sync();
        TK_MARK(TK_SYNC0);
        cluster_find_bin<DSA_TOPK_NB0, CS>(s.hist0, s.coarse0, k, &s);
        TK_MARK(TK_DIGIT0);
        b0 = s.found_bin;
        G = s.found_above;
    };
    if constexpr (BOUND) {
        // pass 1 (bound): no histogram. Groups of R lanes (bound_group_lanes) of the cluster's CTAs
        // partition the row, at least k / 2 of them; each group holds 2 keys >= its second largest
        // key, and tlb is the least of those, so at least k keys are >= tlb and T >= tlb. Every
        // later count is over the keys >= tlb (key 0 too when tlb = 0: radix_cluster's counts).
        unsigned m1 = 0u, m2 = 0u;
        auto fold = [&](unsigned, float x, bool ok) { top2_add(m1, m2, ok ? topk_key(x) : 0u); };
        if (vec)
            for_slice_vec(row, bound_pass1(row, lo, hi, m1, m2), hi, fold);
        else
            for_slice(row, lo, hi, vec, fold);
        const unsigned R = bound_group_lanes<CS>(k);
        for (unsigned o = 1; o < R; o <<= 1) {  // merge the lanes' pairs: the group's two largest
            const unsigned o1 = __shfl_xor_sync(FULL_MASK, m1, o), o2 = __shfl_xor_sync(FULL_MASK, m2, o);
            m2 = max(min(m1, o1), max(m2, o2));
            m1 = max(m1, o1);
        }
        const unsigned mx = R == 0u ? 0u : m2;  // the group's second largest; R = 0: no bound
        unsigned mn = mx;
#pragma unroll
        for (unsigned o = 16; o > 0; o >>= 1) mn = min(mn, __shfl_xor_sync(FULL_MASK, mn, o));
        if (lane == 0) atomicMin(&s.tmin, mn);
        TK_MARK(TK_READ);  // thread 0's view: the barrier below waits for the rest
        cluster_sync();  // every CTA's tmin complete and visible
        if (threadIdx.x == 0) {
            unsigned t = 0xffffffffu;
            for (unsigned r = 0; r < (unsigned)CS; ++r) t = min(t, ld_rank(&s.tmin, r));
            s.tlb = t;
        }
        __syncthreads();
        TK_MARK(TK_BOUND);
        tlb = s.tlb;
        // pass 2 (bound): digit 0 of the keys >= tlb, and the nonzero ones into the buffer
        auto count_append = [&](unsigned e, float x, bool ok) {
            const unsigned key = topk_key(x);
            const bool in = ok && key >= tlb;
            hist_add(s.hist0, in ? key >> 21 : 0u, in);
            const bool take = in && key != 0u;
            const unsigned pos = warp_claim(&s.n_buf, take);
            if (take && pos < DSA_TOPK_CAP) {
                s.buf_key[pos] = key;
                s.buf_idx[pos] = e;
            }
        };
        if (vec)
            for_slice_vec(row, lean_pass2<true>(row, lo, hi, tlb, &s.n_buf, s.buf_key, s.buf_idx, s.hist0), hi,
                          count_append);
        else
            for_slice(row, lo, hi, vec, count_append);
        find_b0();
    } else {
        // pass 1: digit 0 of every key (lean: the main loop batched, then the tail per key)
        auto count0 = [&](unsigned, float x, bool ok) { hist_add(s.hist0, ok ? topk_key(x) >> 21 : 0u, ok); };
        if (LEAN && vec)
            for_slice_vec(row, lean_pass1(row, lo, hi, s.hist0), hi, count0);
        else
            for_slice(row, lo, hi, vec, count0);
        find_b0();

        // pass 2: the keys that can still be members into the buffer (lean: batched, then the tail)
        auto append = [&](unsigned e, float x, bool ok) {
            const unsigned key = topk_key(x);
            const bool take = ok && key != 0u && (key >> 21) >= b0;
            const unsigned pos = warp_claim(&s.n_buf, take);
            if (take && pos < DSA_TOPK_CAP) {
                s.buf_key[pos] = key;
                s.buf_idx[pos] = e;
            }
        };
        if (LEAN && vec)
            for_slice_vec(row, lean_pass2<false>(row, lo, hi, b0, &s.n_buf, s.buf_key, s.buf_idx, s.hist0), hi, append);
        else
            for_slice(row, lo, hi, vec, append);
        __syncthreads();
        TK_MARK(TK_PASS2);
    }
    const bool overflow = s.n_buf > DSA_TOPK_CAP;
    const unsigned nb = min(s.n_buf, (unsigned)DSA_TOPK_CAP);

    // f(index, key, ok) over this CTA's candidates: the buffer, or the slice again on overflow
    auto for_candidates = [&](auto&& f) {
        if (!overflow) {
            for (unsigned j = threadIdx.x; j - lane < nb; j += DSA_TOPK_THREADS) {
                const bool ok = j < nb;
                f(ok ? s.buf_idx[j] : 0u, ok ? s.buf_key[j] : 0u, ok);
            }
        } else {
            // bound: only the keys >= tlb, as the histograms and the buffer hold
            for_slice(row, lo, hi, vec, [&](unsigned e, float x, bool ok) {
                const unsigned key = ok ? topk_key(x) : 0u;
                const bool in = ok && (!BOUND || key >= tlb);
                f(e, in ? key : 0u, in);
            });
        }
    };

    unsigned T = 0u, b1 = 0u, b2 = 0u;
    if (b0 != 0u) {  // b0 == 0: fewer than k keys > 0, T = 0 (every key > 0 is chosen)
        const unsigned kk1 = k - G;
        for_candidates([&](unsigned, unsigned key, bool ok) {
            const bool in = ok && (key >> 21) == b0;
            hist_add(s.hist1, in ? (key >> 10) & 0x7ffu : 0u, in);
        });
        __syncthreads();
        group_sums<DSA_TOPK_NB1>(s.hist1, s.coarse1);
        cluster_sync();
        TK_MARK(TK_SYNC1);
        cluster_find_bin<DSA_TOPK_NB1, CS>(s.hist1, s.coarse1, kk1, &s);
        TK_MARK(TK_DIGIT1);
        b1 = s.found_bin;
        const unsigned above1 = s.found_above;
        const unsigned kk2 = kk1 - above1;
        const unsigned prefix = (b0 << 11) | b1;
        for_candidates([&](unsigned, unsigned key, bool ok) {
            const bool in = ok && (key >> 10) == prefix;
            hist_add(s.hist2, in ? key & 0x3ffu : 0u, in);
        });
        __syncthreads();
        group_sums<DSA_TOPK_NB2>(s.hist2, s.coarse2);
        cluster_sync();
        TK_MARK(TK_SYNC2);
        cluster_find_bin<DSA_TOPK_NB2, CS>(s.hist2, s.coarse2, kk2, &s);
        TK_MARK(TK_DIGIT2);
        b2 = s.found_bin;
        G += above1 + s.found_above;
        T = (prefix << 10) | b2;
    }
    const bool t_finite = b0 != 0u && T != DSA_TOPK_KEY_POSINF;

    // counts from this CTA's own histograms
    unsigned A = local_above<DSA_TOPK_NB0>(s.hist0, b0, &s);
    if (b0 != 0u) A += local_above<DSA_TOPK_NB1>(s.hist1, b1, &s) + local_above<DSA_TOPK_NB2>(s.hist2, b2, &s);
    const unsigned P = T < DSA_TOPK_KEY_POSINF ? s.hist0[DSA_TOPK_BIN_POSINF] : 0u;
    const unsigned E = t_finite ? s.hist2[b2] : 0u;
    if (threadIdx.x == 0) {
        s.pub[0] = E;
        s.pub[1] = A - P;
    }
    cluster_sync();
    if (threadIdx.x == 0) {
        const unsigned Q = k - G;  // keys equal to T to take, over the row (when T is finite)
        unsigned eq_before = 0u, base = 0u, F = 0u, quota = 0u;
        for (unsigned r = 0; r < (unsigned)CS; ++r) {
            const unsigned e_r = ld_rank(&s.pub[0], r), mp_r = ld_rank(&s.pub[1], r);
            const unsigned q_r = t_finite ? min(e_r, Q > eq_before ? Q - eq_before : 0u) : 0u;
            eq_before += e_r;
            if (r < rank) base += mp_r + q_r;
            if (r == rank) quota = q_r;
            F += mp_r + q_r;
        }
        s.base = base;
        s.quota = quota;
        s.total = F;
        s.eq_local = E;
        s.mp_local = A - P;
    }
    __syncthreads();
    TK_MARK(TK_COUNTS);
    const unsigned base = s.base, quota = s.quota, F = s.total;
    const bool take_all_eq = t_finite && quota == s.eq_local;  // quota 0 with no equal keys too
    const unsigned Tv = T;

    // write: keys above T (not +inf), and the equal ones when this CTA takes all of them
    for_candidates([&](unsigned e, unsigned key, bool ok) {
        const bool member = ok && key != 0u && key != DSA_TOPK_KEY_POSINF &&
                            (key > Tv || (take_all_eq && key == Tv));
        const unsigned pos = warp_claim(&s.cnt, member);
        if (member) orow[base + pos] = (int)e;
    });

    // a partial quota of keys equal to T: the lowest indices, in index order
    if (t_finite && quota > 0u && quota < s.eq_local) {
        topk_take_ties<DSA_TOPK_WARPS>(row, lo, hi, Tv, quota, orow, base + s.mp_local, s.scan);
    }

    for (unsigned j = F + rank * DSA_TOPK_THREADS + threadIdx.x; j < k; j += CS * DSA_TOPK_THREADS) orow[j] = -1;
    TK_MARK(TK_WRITE);
    cluster_sync();  // no CTA leaves while another may still read its shared memory
    TK_MARK(TK_EXIT);
}

#define DSA_TOPK_KERNEL(CS)                                                                                   \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(DSA_TOPK_THREADS, 2)              \
        dsa_topk_radix_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) {        \
        topk_body<CS, false>(scores, out, C, k);                                                              \
    }                                                                                                         \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(DSA_TOPK_THREADS, 2)              \
        dsa_topk_lean_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) {         \
        topk_body<CS, true>(scores, out, C, k);                                                               \
    }                                                                                                         \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(DSA_TOPK_THREADS, 2)              \
        dsa_topk_bound_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) {        \
        topk_body<CS, true, true>(scores, out, C, k);                                                         \
    }

DSA_TOPK_KERNEL(1)
DSA_TOPK_KERNEL(2)
DSA_TOPK_KERNEL(4)
DSA_TOPK_KERNEL(8)
