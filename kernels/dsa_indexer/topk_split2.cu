/*
DSA top-k, radix_split's design with its two measured costs cut (issue 14; `dsa_topk_split2`,
variant radix_split2). The op, the contract, the workspace protocol, the slices, the ties and the
deadlock-freedom are topk_split.cu's (its header is the proof); topk_model.select_row_split
emulates both kernels (every decision, count and slot range is the same; only the order of the
writes inside a CTA differs, and the output is a set).

What the H200 timeline of radix_split (eb63d69) showed, and what changes here:
  - pass 2 costs ~0.25 ns a key a CTA whether its keys come from the ring in shared memory
    (slices of 16384: 4.20 us for 2 batches) or from L2 (slices of 65536: 17.68 us for 8; onecta
    from L2: 0.24 ns a key): it is instruction issue, not the re-read. one_select's pass 2 is ~500
    SASS instructions a warp a batch of 8 keys a lane: every key converted, counted, then eight
    unrolled branch regions (BSSY / BSYNC, 64-bit address math, two STG) taken by a few lanes each.
    Here pass 2 converts and classifies each key (~12 instructions), and each lane then loops
    over its own hits only (member or threshold-bin key: 3-15% of a slice), re-reading the hit's
    key and payload from the ring at a dynamic slot (so nothing is indexed dynamically in
    registers). A held source (<= 4 batches) keeps the converted keys in the ring (written back by
    pass 1), so the later passes convert nothing.
  - the final select takes ~8 us on 2048-8192 candidates: the same serial chain as a slice (a
    cold read, three digit searches of five block barriers each, pass 2) plus one dependent L2
    load a member (FinalOut::put's ld.global.cg, serialised by its volatile asm). Here the
    candidates are (key, row index) pairs (uint2) so the ring carries the index with the key and
    a member's put is one store of a register; the searches (s2_find) take 2 barriers, not 5
    (each warp reads the 32 warp totals and scans them itself); and the final stage carries its
    own timeline marks (TK_FSTART, TK_FREAD, TK_FPASS2, TK_FDIGITS) so the next run tells its parts apart.
Workspace: ws [M][P][kp] uint2 (key, row index) (the launcher's, poisoned), count [M] as radix_split.
Loads: topk_split.cu's ring (16-B cp.async.cg, 4 batches x 2 float4 a thread, 128 KiB dynamic),
  for every source: the scalar path (C % 4 != 0, the row not 16-B aligned) copies 4-B elements by
  cp.async.ca into the same slots, so one mapping serves both (element e of the source: float4
  slot i = e / 4, lane e % 4; key j of a thread's batch b: slot b step + (j / 4) T + tid, lane j % 4
  for scores; pairs: 2 a float4, key j at float4 b step + (j / 2) T + tid, half j % 2, 4 a batch).
Shared memory: OneShared (45,200 B; buf_idx holds the payload: the row index) + the last-CTA flag +
  the 131,072 B ring; one CTA an SM; __launch_bounds__(1024, 1).
*/

#include "topk_select.cuh"   // s2_select, its sources and sinks

// Stage 1's sink: the slice's members as (key, row index) pairs in the row's segment r.
struct S2CandOut {
    const float* __restrict__ row;
    unsigned lo, hi, kp;
    uint2* __restrict__ seg;            // ws + (m P + r) kp
    __device__ __forceinline__ void put(unsigned slot, unsigned pay, unsigned key) const {
        seg[slot] = make_uint2(key, pay);
    }
    // the first Q keys == T of row[lo, hi) in index order as pairs (T, index) at slots at + rank
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        uint2* sg = seg;
        topk_take_ties_to<ONE_WARPS>(row, lo, hi, T, Q, at, scan,
                                     [&](unsigned slot, unsigned e) { sg[slot] = make_uint2(T, e); });
    }
    __device__ __forceinline__ void fill(unsigned F, unsigned) const {
        for (unsigned j = F + threadIdx.x; j < kp; j += ONE_THREADS) seg[j] = make_uint2(0u, 0u);   // no candidate
    }
};

// A split CTA's place (dsa_topk_split2, dsa_topk_sample): slice [lo, hi) = split_slice r of P of
// row m, its candidate segment seg of kp = k rounded up to 4 pairs.
struct S2Cta {
    unsigned r, P, m, C, k, kp, lo, hi;
    const float* row;
    uint2* seg;
    __device__ __forceinline__ S2Cta(const float* scores, uint2* ws, int C_, int k_)
        : r(blockIdx.x), P(gridDim.x), m(blockIdx.y), C((unsigned)C_), k((unsigned)k_), kp(((unsigned)k_ + 3u) & ~3u) {
        row = scores + (size_t)m * C;
        split_slice(C, P, r, lo, hi);
        seg = ws + ((size_t)m * P + r) * kp;
    }
};

// After stage 1 (the CTA's candidates in c.seg): the hand-off, and in the row's last CTA stage 2,
// the row's k best of its P kp candidate pairs (read by cp.async.cg: L2, where the other CTAs'
// fenced writes are). Block-uniform.
__device__ __forceinline__ void s2_final(const S2Cta& c, int* __restrict__ out, uint2* ws, unsigned* count,
                                         OneShared& s, unsigned* last, float4* ring) {
    if (!split_last_cta(count, c.m, c.P, last)) {
        TK_MARK(TK_EXIT);
        return;
    }
    TK_MARK(TK_FSTART);
    one_reset(s);
    s2_select<true, 2>(S2Src<true>{ws + (size_t)c.m * c.P * c.kp, c.P * c.kp, 0u, true, ring},
                       S2FinalOut{c.row, c.C, out + (size_t)c.m * c.k}, c.k, s);
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_split2(const float* __restrict__ scores, int* __restrict__ out, uint2* ws, unsigned* count, int C_,
                    int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned last;
    extern __shared__ __align__(16) float4 ring[];
    const S2Cta c(scores, ws, C_, k_);
    TK_ENTER(c.r);
    one_reset(s);

    // stage 1: the slice's top k as candidates (+inf kept as a key: DROP false)
    s2_select<false, 1>(S2Src<false>{c.row + c.lo, c.hi - c.lo, c.lo, (c.C & 3u) == 0u, ring},
                        S2CandOut{c.row, c.lo, c.hi, c.kp, c.seg}, c.k, s);
    s2_final(c, out, ws, count, s, &last, ring);
}

/*
---- dsa_topk_sample (variant radix_sample): stage 1 over the keys at or above a sampled bound ----

radix_split2 with stage 1 changed; the contract, the workspace, the hand-off and stage 2 are
dsa_topk_split2's (s2_final), and the candidates a CTA writes are the same set (its slice's k best
by key, the lower index among equal keys; +inf a key), so topk_model.select_row_sample emulates it
with select_row_split's stage 2.
What it cuts (split2's timeline at 2048 of 262144, M = 32, 2900d14): pass 2 re-reads a 65536-key
slice from L2 (17.2 of 40.5 us of span) because the ring holds 32768 keys; pass 1's shared atomics
(digit 0 of every key) sit on the stream. Here a CTA
  1. loads a sample of its slice: the first SMP_BLOCK keys (512 contiguous bytes, one warp's loads)
     of every group of g keys, g = SMP_BLOCK max(1, ceil(n / (SMP_BLOCK SMP_BLOCKS))), so at most
     64 blocks (8192 keys, 2 units of 4 a thread) whatever n, spread over the whole slice (index
     order carries no bias); once the CTA's whole sample has landed and its digit 0 is counted (a
     barrier), issues its ring's first S2_RING_BATCHES batches and prefetches the next SMP_AHEAD into
     L2 (one more after each batch). Measured (TOPK_NOTES.md, "Measured: radix_sample"): issuing
     the copies stalls a thread ~3 us per token before step 2 can start; neither the sample's
     layout (sectors or blocks) nor the look-ahead moved the time;
  2. finds t_est, a lower edge of a 22-bit key prefix with at least rs sampled keys at or above it:
     rs = ceil(mu + SMP_MARGIN sqrt(mu)) + 1, mu = SMP_BLOCK k / g the sampled keys expected among the top k
     (digit 0 of the sample counted, s2_find_n, digit 1 of the sample's keys in that bin, s2_find_n);
     fewer than rs nonzero sample keys: t_est = 1 (every nonzero key);
  3. streams the slice once (the ring, as split2's pass 1) with no histogram and no key conversion
     (the scores are compared with topk_key_floor(t_est)): a key >= t_est goes to
     a shared buffer of SMP_CAP (key, row index) pairs (one warp scan and one atomic a warp a
     batch, the lane's hits re-read from the ring as split2's pass 2 does); nhit counts past the cap;
  4. if nhit <= SMP_CAP and (nhit >= k or t_est == 1): the buffer holds every key of the slice at or
     above its k-th key T (>= t_est, since >= k keys are >= t_est), or every nonzero key; s2_select
     over the buffer (a held source) gives exactly the slice's candidates, its tie take re-reading
     the slice in index order (every key == T of the slice is in the buffer, so E is the slice's).
     Otherwise (the sample missed: ties, a slice with fewer than k keys above t_est, or more than
     SMP_CAP) split2's stage 1 over the slice itself: the same candidates, slower.
At the model point (k = 2048, n = 65536: g = 1024, mu = 256, rs = 321) ~2570 keys a CTA pass t_est
(3.9% of the slice); the CPU model counts them (tests/test_dsa_topk.py).
Shared memory: OneShared + 2 words + the ring (131,072 B) + the buffer (32,768 B) dynamic
(SMP_DYN_BYTES); one CTA an SM.
*/
#define SMP_CAP 4096             // (key, row index) pairs buffered a CTA (32 KiB, after the ring)
#define SMP_BLOCK 128            // keys a sample block: 512 contiguous bytes, one warp's 16-B loads
#define SMP_BLOCKS 64            // sample blocks a CTA at most (2 a warp)
#define SMP_UNITS 2              // 4-key sample units a thread (SMP_BLOCKS x SMP_BLOCK / 4 / 1024)
#define SMP_MARGIN 4.0f          // standard deviations of the sampled count added to the target rank
#define SMP_AHEAD 4              // batches past the ring prefetched into L2 (128 KiB more in flight an SM)
#define SMP_DYN_BYTES 163840     // S2_RING_BYTES + SMP_CAP x 8 B
static_assert(SMP_DYN_BYTES == S2_RING_BYTES + SMP_CAP * 8, "the ring, then the buffer");
static_assert(SMP_UNITS * ONE_THREADS * 4 == SMP_BLOCKS * SMP_BLOCK && SMP_BLOCK == 4 * 32, "a block a warp's units");

// The sample's group length for a slice of n keys (header, step 1): a block at the start of each.
__device__ __forceinline__ unsigned smp_group(unsigned n) {
    return SMP_BLOCK * max(1u, (n + SMP_BLOCK * SMP_BLOCKS - 1u) / (SMP_BLOCK * SMP_BLOCKS));
}

// Step 1's loads: this thread's sample units of the n keys at p (vec: p 16-B aligned) into v, by
// volatile loads so that they are issued before the ring's copies (issued behind 128 KiB of them,
// the sample lands only once most of the ring has: 4.1-6.6 us at fe6a0d1).
__device__ __forceinline__ void smp_load(const float* __restrict__ p, unsigned n, bool vec, float (&v)[4 * SMP_UNITS]) {
    const unsigned g = smp_group(n), units = (SMP_BLOCK / 4u) * ((n + g - 1u) / g);   // <= 2048
#pragma unroll
    for (unsigned u = 0; u < SMP_UNITS; ++u) {
        const unsigned i = u * ONE_THREADS + threadIdx.x;   // unit i: keys e0 .. e0 + 3 of block i / 32
        const unsigned e0 = (i >> 5) * g + 4u * (i & 31u);
#pragma unroll
        for (unsigned q = 0; q < 4; ++q) v[4 * u + q] = __int_as_float(0xff800000);   // -inf: key 0
        if (i < units && vec && e0 + 4u <= n) {
            asm volatile("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(v[4 * u]), "=f"(v[4 * u + 1]), "=f"(v[4 * u + 2]), "=f"(v[4 * u + 3])
                         : "l"(p + e0));
        } else {
#pragma unroll
            for (unsigned q = 0; q < 4; ++q)
                if (i < units && e0 + q < n) asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v[4 * u + q]) : "l"(p + e0 + q));
        }
    }
}

// Step 2 of the header, its first half: digit 0 of this thread's sampled keys (topk_key of
// smp_load's scores) into s.h0 (zero on entry). The caller's barrier completes the histogram.
__device__ __forceinline__ void smp_count(const unsigned (&key)[4 * SMP_UNITS], OneShared& s) {
#pragma unroll
    for (unsigned j = 0; j < 4 * SMP_UNITS; ++j)
        if (key[j] != 0u) atomicAdd(&s.h0[key[j] >> 20], 1u);
}

// Step 2, its second half (after smp_count and a barrier): for each i < NT the bound t[i] of a
// slice of n keys with the best k[i] wanted (a float: dsa_topk_share also asks for the slice's
// share of the row's k), the searches of both targets together (s2_find_n: 2 barriers a digit,
// whatever NT). Digit 1 of target i counted in s.h1 / s.h2 (zero on entry); the histograms left
// dirty (the caller resets); NT = 2 takes s.buf_key / buf_idx as scratch (free until a select).
// Block-uniform; ends with a barrier.
template <int NT>
__device__ __forceinline__ void smp_bounds(const unsigned (&key)[4 * SMP_UNITS], unsigned n, const float (&k)[NT],
                                           OneShared& s, unsigned (&t)[NT]) {
    static_assert(NT == 1 || NT == 2, "s.h1 and s.h2 hold digit 1 of two targets at most");
    static_assert(ONE_CAP >= 64, "the scratch of two targets' warp totals");
    const unsigned g = smp_group(n);
    unsigned rs[NT];
    const unsigned* h0[NT];
    const unsigned* h1c[NT];
    unsigned* h1[NT];
    unsigned* bin[NT];
    unsigned* above[NT];
    unsigned* scan = NT == 1 ? s.scan : s.buf_key;
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        const float mu = (float)SMP_BLOCK * k[i] / (float)g;
        rs[i] = (unsigned)ceilf(mu + SMP_MARGIN * sqrtf(mu)) + 1u;
        h0[i] = s.h0;
        h1[i] = i == 0 ? s.h1 : s.h2;
        h1c[i] = h1[i];
        bin[i] = NT == 1 ? &s.found_bin : s.buf_idx + i;
        above[i] = NT == 1 ? &s.found_above : s.buf_idx + NT + i;
    }
    s2_find_n<ONE_NB0, NT>(h0, rs, scan, bin, above);
    unsigned bs[NT], kk1[NT];
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        bs[i] = *bin[i];
        kk1[i] = rs[i] - *above[i];   // bs = 0: fewer than rs nonzero sampled keys (t = 1 below)
    }
#pragma unroll
    for (unsigned j = 0; j < 4 * SMP_UNITS; ++j)
#pragma unroll
        for (int i = 0; i < NT; ++i)
            if (bs[i] != 0u && (key[j] >> 20) == bs[i]) atomicAdd(&h1[i][(key[j] >> 10) & 0x3ffu], 1u);
    __syncthreads();
    s2_find_n<ONE_NB1, NT>(h1c, kk1, scan, bin, above);
#pragma unroll
    for (int i = 0; i < NT; ++i) t[i] = bs[i] == 0u ? 1u : (bs[i] << 20) | (*bin[i] << 10);
}

// Steps 1-3 of the header over the CTA's slice src (scores at c.row + c.lo): the sample, the
// bound t_est (the k best wanted) and, where SHARE (dsa_topk_share), t_share >= t_est (the slice's
// share of the row's k, k n / C, wanted), then the stream buffering every key >= t_est as (key,
// row index) into buf. Returns the hits (may pass SMP_CAP; buf holds the first SMP_CAP). Leaves
// the histograms and the counters zero. Block-uniform; ends with a barrier.
template <bool SHARE>
__device__ __forceinline__ unsigned smp_stream(const S2Cta& c, const S2Src<false>& src, uint2* buf, OneShared& s,
                                               unsigned* nhit, unsigned& t_est, unsigned& t_share) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned n = src.n;
    float4* ring = src.ring;

    // 1, 2: the sample's loads (the histograms zeroed under their latency), its digit 0 counted;
    // after the barrier no sample load of this CTA is outstanding, so none queues behind the
    // stream's copies; then half the ring's copies, the bound's searches, the rest and the
    // look-ahead: issuing all 4 batches and the look-ahead at once stalled each thread ~3 us per
    // token (0.9 pooled) before it could start the bound (b02aeaa's timeline), so the bound's
    // ~1.7 us of searches ran after the stall, not under it.
    float sv[4 * SMP_UNITS];
    smp_load(c.row + c.lo, n, src.vec, sv);
    one_reset(s);
    unsigned skey[4 * SMP_UNITS];
#pragma unroll
    for (unsigned j = 0; j < 4 * SMP_UNITS; ++j) skey[j] = topk_key(sv[j]);
    smp_count(skey, s);
    __syncthreads();
    TK_MARK(TK_BOUND);                                 // the CTA's sample landed and counted
#pragma unroll
    for (unsigned b = 0; b < S2_RING_BATCHES / 2; ++b) src.issue(b);
    if constexpr (SHARE) {   // both bounds searched together: the k best, and the slice's share of them
        const float kt[2] = {(float)c.k, (float)c.k * (float)n / (float)c.C};
        unsigned tb[2];
        smp_bounds<2>(skey, n, kt, s, tb);
        t_est = tb[0];
        t_share = max(tb[0], tb[1]);
    } else {
        const float kt[1] = {(float)c.k};
        unsigned tb[1];
        smp_bounds<1>(skey, n, kt, s, tb);
        t_est = tb[0];
    }
#pragma unroll
    for (unsigned b = S2_RING_BATCHES / 2; b < S2_RING_BATCHES; ++b) src.issue(b);   // commit groups in order
    for (unsigned b = S2_RING_BATCHES; b < S2_RING_BATCHES + SMP_AHEAD; ++b) src.prefetch(b);
    TK_MARK(TK_ISSUE);                                 // the bound known, thread 0's copies issued (no barrier)
    one_reset(s);                                      // the select after this starts from zero histograms
    if (threadIdx.x == 0) *nhit = 0u;
    __syncthreads();
    TK_MARK(TK_SAMPLE);

    // 3: one pass over the ring's scores (no key conversion but a hit's), every score >= t_f
    // buffered as (key, row index); key j of batch b is ring float4 (b % RB) VECS + j / 4, lane j % 4
    // (S2Src's mapping, which reload reads)
    const float t_f = topk_key_floor(t_est);
    const unsigned nb = src.nbatches();
    for (unsigned b = 0; b < nb; ++b) {
        cp_async_wait_group<S2_RING_BATCHES - 1>();   // groups 0 .. b complete
        unsigned hm = 0u;
#pragma unroll
        for (unsigned u = 0; u < S2_VECS; ++u) {
            const float4 x = ring[((b % S2_RING_BATCHES) * S2_VECS + u) * ONE_THREADS + threadIdx.x];
            const unsigned i = b * S2Src<false>::STEP + u * ONE_THREADS + threadIdx.x;
            const float w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (unsigned q = 0; q < 4; ++q)
                if (4u * i + q < n && w[q] >= t_f) hm |= 1u << (4u * u + q);
        }
        const unsigned cnt = __popc(hm);
        if (__any_sync(FULL_MASK, cnt != 0u)) {
            const unsigned incl = topk_warp_inclusive_sum(cnt);
            unsigned wb = 0u;
            if (lane == 31u) wb = atomicAdd(nhit, incl);
            unsigned pb = __shfl_sync(FULL_MASK, wb, 31) + incl - cnt;
            s2_hits(src, b, false, hm, [&](unsigned kj, unsigned pay, unsigned) {
                if (pb < SMP_CAP) buf[pb] = make_uint2(kj, pay);
                ++pb;
            });
        }
        src.issue(b + S2_RING_BATCHES);              // into b's slots: its hits are buffered
        src.prefetch(b + S2_RING_BATCHES + SMP_AHEAD);
    }
    cp_async_wait_all();
    __syncthreads();
    TK_MARK(TK_STREAM);
    return *nhit;
}

// Whether the buffer holds every key of the slice that its k best can be (step 4's test).
__device__ __forceinline__ bool smp_served(unsigned nh, unsigned k, unsigned t_est) {
    return nh <= SMP_CAP && (nh >= k || t_est == 1u);
}

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_sample(const float* __restrict__ scores, int* __restrict__ out, uint2* ws, unsigned* count, int C_,
                    int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned last, nhit;
    extern __shared__ __align__(16) float4 ring[];     // the ring, then the buffer (SMP_DYN_BYTES)
    uint2* buf = reinterpret_cast<uint2*>(ring + S2_RING_BYTES / 16);
    const S2Cta c(scores, ws, C_, k_);
    TK_ENTER(c.r);
    const S2Src<false> src{c.row + c.lo, c.hi - c.lo, c.lo, (c.C & 3u) == 0u, ring};
    unsigned t_est, t_unused;
    const unsigned nh = smp_stream<false>(c, src, buf, s, &nhit, t_est, t_unused);

    // 4: the slice's candidates from the buffer, or (the sample missed) from the slice
    const S2CandOut cand{c.row, c.lo, c.hi, c.kp, c.seg};
    if (smp_served(nh, c.k, t_est))
        s2_select<false, 1>(SmpBufSrc{buf, nh}, cand, c.k, s);
    else
        s2_select<false, 1>(src, cand, c.k, s);
    s2_final(c, out, ws, count, s, &last, ring);
}

/*
---- dsa_topk_share (variant radix_share): each slice hands on the keys above its share's bound ----

What binds dsa_topk_sample after its stream (the timeline of 2af7010's run, 2048 of 262144, M = 32):
the slice's select over its ~2500 buffered keys (4.2 us), the hand-off (1.1) and the final stage
over the P k = 8192 candidates (7.4: their read, pass 2, the digits): 12.7 of its 28.4 us of span,
after the row is read. A slice needs to hand on only the keys that can be among the ROW's k best:
about k / P of them, not k. Here a CTA computes from the same sample a second bound t_share
(target rank: the slice's share k n / C of the row's k, the same margin), streams as radix_sample
(the buffer: every key >= t_est), and, when the buffer served (smp_served), writes it with no
select at all: its keys >= t_share (group H, ~k / P + margin) from the front of its segment, the
rest (group L) from the back, each group padded to an even count with a key-0 pair, and a header
(t_share, H's pairs; L's pairs). Where the buffer did not serve, split2's stage 1 over the slice
writes the slice's k best in place of H (header t = 0: no bound, k rounded up to 4 pairs).
The row's last CTA (split_last_cta's counter) reads the P headers and
  level 1: gathers the H groups into shared memory (16-B cp.async.cg: L2, where the other CTAs'
     fenced writes are) and selects the k best of them (s2_select, stage 2's sink); the union holds
     every key of the row >= t_max = the largest header t (a t <= 1 counts 0: that H holds every
     nonzero key of its slice), and a type-k segment the slice's k best, so the row's k-th key T is
     the union's exactly when the union's T >= t_max (or t_max = 0): the union then holds every key
     of the row > T and, with the row's k best, every candidate the select needs (its tie take:
     below). The result stands when that holds;
  level 2 (a slice with fewer of the row's best than its share: skewed or ordered rows, ~0 of 200
     N(0, 1) rows at the margin of 4): both groups of every segment, each a superset of its slice's
     k best (smp_served), so exact with no test; the select runs again over them;
  level 3 (the groups do not fit the ring and the buffer, SMP_DYN_BYTES / 8 pairs): the row itself.
A later level rewrites every output slot (members then -1 to k), after a barrier. A partial tie
level at levels 1 and 2 is taken from the union in shared memory, not by re-reading the row
(s2_select's bin buffer, s2_take_buffered; where that buffer overflowed, ShrFinalOut): inside the per-token DSA layer step at 1b7027d (quantized score rows, most of them cut a
level at the k-th) the top-k took 96.99 us against 28.7 on random rows, where a partial level is
rare (tools/launch_floor.py --split); one CTA's index-order pass over 262144 scores is the likely
cost (inferred, not probed apart).
topk_model.select_row_share emulates every decision (tests/test_dsa_topk.py).
Workspace: ws [M][P][SHR_SEG] uint2: SHR_DATA pairs of data, then the header; count [M] as split2.
*/
#define SHR_DATA 4098            // data pairs a segment: SMP_CAP buffered keys in two groups + their 2 pads
#define SHR_SEG 4100             // segment stride in pairs: the data, then the header (2 pairs)
#define SHR_MAX_P 32             // CTAs a row at most (the final's header arrays)
static_assert(SHR_DATA == SMP_CAP + 2 && SHR_SEG == SHR_DATA + 2 && SHR_SEG % 2 == 0 && SHR_DATA % 2 == 0,
              "two even groups and a 16-B aligned header a segment");

// The served buffer's nh pairs into seg: keys >= t_share (H) at the front, the rest (L) from the
// back of seg[0, SHR_DATA), each group padded to an even count (a key-0 pair: no candidate) so
// both start 16-B aligned; the header (t_share, H's pairs), (L's pairs, 0) after the data. Four
// entries a thread a round (one round up to SMP_CAP), both counts of a warp reserved by one atomic
// on s.cnt (H in the low 16 bits, L in the high: <= SMP_CAP each); s.cnt zero on entry.
__device__ __forceinline__ void shr_write(const uint2* buf, unsigned nh, unsigned t_share, uint2* seg, OneShared& s) {
    constexpr unsigned PER = 4;
    static_assert(SMP_CAP < 65536, "16-bit group counts");
    const unsigned lane = threadIdx.x & 31u;
    for (unsigned j0 = 0; j0 < nh; j0 += PER * ONE_THREADS) {   // block-uniform trip count
        uint2 v[PER];
        unsigned hm = 0u, lm = 0u;
#pragma unroll
        for (unsigned e = 0; e < PER; ++e) {
            const unsigned j = j0 + e * ONE_THREADS + threadIdx.x;
            v[e] = j < nh ? buf[j] : make_uint2(0u, 0u);
            if (j < nh) (v[e].x >= t_share ? hm : lm) |= 1u << e;
        }
        const unsigned packed = __popc(hm) | (__popc(lm) << 16);
        const unsigned incl = topk_warp_inclusive_sum(packed);
        unsigned w = 0u;
        if (lane == 31u) w = atomicAdd(&s.cnt, incl);
        const unsigned base = __shfl_sync(FULL_MASK, w, 31) + incl - packed;
        unsigned ph = base & 0xffffu, pl = base >> 16;
#pragma unroll
        for (unsigned e = 0; e < PER; ++e) {
            if ((hm >> e) & 1u) seg[ph++] = v[e];
            if ((lm >> e) & 1u) seg[SHR_DATA - 1u - pl++] = v[e];
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned nH = s.cnt & 0xffffu, nL = s.cnt >> 16;
        if (nH & 1u) seg[nH] = make_uint2(0u, 0u);
        if (nL & 1u) seg[SHR_DATA - 1u - nL] = make_uint2(0u, 0u);
        seg[SHR_DATA] = make_uint2(t_share, (nH + 1u) & ~1u);
        seg[SHR_DATA + 1] = make_uint2((nL + 1u) & ~1u, 0u);
    }
}

// The final's shared state: each segment's header, the gather's range starts, t_max.
struct ShrFinal {
    unsigned t[SHR_MAX_P], nh[SHR_MAX_P], nl[SHR_MAX_P];
    unsigned pre[2 * SHR_MAX_P + 1];     // range r (2 a segment: H, L) starts at pair pre[r] of u
    unsigned tmax;
};

// Level 1 (both false) or 2 (both true) of the header: the groups of the P segments at seg0 into u
// (cap pairs), each range a whole number of 16-B units. Returns the pairs gathered, or ~0u when they
// would pass cap (nothing gathered). Block-uniform; ends with a barrier.
__device__ __forceinline__ unsigned shr_gather(const uint2* seg0, unsigned P, bool both, uint2* u, unsigned cap,
                                               ShrFinal& f) {
    if (threadIdx.x == 0) {
        unsigned acc = 0u, tmax = 0u;
        for (unsigned r = 0; r < P; ++r) {
            f.pre[2 * r] = acc;
            acc += f.nh[r];
            f.pre[2 * r + 1] = acc;
            acc += both ? f.nl[r] : 0u;
            tmax = max(tmax, f.t[r]);
        }
        f.pre[2 * P] = acc;
        f.tmax = tmax;
    }
    __syncthreads();
    const unsigned total = f.pre[2 * P];
    if (total > cap) return ~0u;
    for (unsigned q = threadIdx.x; 2u * q < total; q += ONE_THREADS) {   // 16-B unit q: pairs 2q, 2q + 1
        unsigned r = 0u;
        while (2u * q >= f.pre[r + 1]) ++r;          // empty ranges skipped: pre[r + 1] == pre[r]
        const unsigned g = r / 2u, start = (r & 1u) ? SHR_DATA - f.nl[g] : 0u;
        cp_async16(u + 2u * q, seg0 + (size_t)g * SHR_SEG + start + (2u * q - f.pre[r]));
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_share(const float* __restrict__ scores, int* __restrict__ out, uint2* ws, unsigned* count, int C_,
                   int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ ShrFinal f;
    __shared__ unsigned last, nhit;
    extern __shared__ __align__(16) float4 ring[];     // the ring, then the buffer (SMP_DYN_BYTES)
    uint2* buf = reinterpret_cast<uint2*>(ring + S2_RING_BYTES / 16);
    const S2Cta c(scores, ws, C_, k_);                 // c.seg (split2's layout) unused: SHR_SEG here
    if (c.P > SHR_MAX_P || c.kp > SHR_DATA) __trap();  // the launcher refuses these shapes
    TK_ENTER(c.r);
    const S2Src<false> src{c.row + c.lo, c.hi - c.lo, c.lo, (c.C & 3u) == 0u, ring};
    unsigned t_est, t_share;
    const unsigned nh = smp_stream<true>(c, src, buf, s, &nhit, t_est, t_share);

    // 4: the segment: the buffer in two groups, or (the sample missed) the slice's k best
    uint2* seg = ws + ((size_t)c.m * c.P + c.r) * SHR_SEG;
    if (smp_served(nh, c.k, t_est)) {
        shr_write(buf, nh, t_share, seg, s);
    } else {
        s2_select<false, 1>(src, S2CandOut{c.row, c.lo, c.hi, c.kp, seg}, c.k, s);
        if (threadIdx.x == 0) {
            seg[SHR_DATA] = make_uint2(0u, c.kp);
            seg[SHR_DATA + 1] = make_uint2(0u, 0u);
        }
    }
    TK_MARK(TK_WRITE);
    if (!split_last_cta(count, c.m, c.P, &last)) {
        TK_MARK(TK_EXIT);
        return;
    }

    // the row's last CTA: the headers (L2), then levels 1 .. 3 of the design above
    TK_MARK(TK_FSTART);
    const uint2* seg0 = ws + (size_t)c.m * c.P * SHR_SEG;
    if (threadIdx.x < c.P) {
        const uint4 h = __ldcg(reinterpret_cast<const uint4*>(seg0 + (size_t)threadIdx.x * SHR_SEG + SHR_DATA));
        f.t[threadIdx.x] = h.x > 1u ? h.x : 0u;
        f.nh[threadIdx.x] = h.y;
        f.nl[threadIdx.x] = h.z;
    }
    __syncthreads();
    const S2FinalOut fout{c.row, c.C, out + (size_t)c.m * c.k};
    uint2* u = reinterpret_cast<uint2*>(ring);
    auto union_out = [&](unsigned nu) { return ShrFinalOut{fout, u, nu, s.buf_idx, &s.n_buf}; };
    constexpr unsigned cap = SMP_DYN_BYTES / 8u;
    bool done = false;
    unsigned nu = shr_gather(seg0, c.P, false, u, cap, f);
    if (nu != ~0u) {
        one_reset(s);
        const unsigned T = s2_select<true, 2>(SmpBufSrc{u, nu}, union_out(nu), c.k, s);
        done = f.tmax == 0u || T >= f.tmax;            // block-uniform
    }
    if (!done) {
        nu = shr_gather(seg0, c.P, true, u, cap, f);
        one_reset(s);
        if (nu != ~0u)
            s2_select<true, 2>(SmpBufSrc{u, nu}, union_out(nu), c.k, s);
        else
            s2_select<true, 2>(S2Src<false>{c.row, c.C, 0u, (c.C & 3u) == 0u, ring}, fout, c.k, s);
    }
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}
