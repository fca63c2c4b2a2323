/*
DSA top-k, P CTAs a row in one launch with no cluster and no grid-wide wait (issue 14): per stream
m, the k candidates of highest score out of C. topk_model.select_row_split is the NumPy emulation
of exactly this logic (the slices, the candidates, the final select, the ties), tested against
reference.topk on the CPU.

The op and its conventions: exactly those of topk_radix.cu (reference.topk is the rule):
    scores [M][C] float32 row-major; out [M][k] int32: the members (finite scores among the top k,
    the lower index winning among equal scores, NaN as -inf, -0 == +0), in no particular order, in
    slots [0, F), then -1 in [F, k). The key map (topk_key) is topk_common.cuh's.
Launcher-owned workspace (topk_variants.py allocates it with the step):
    ws_key [M][P][kp] uint32, ws_idx [M][P][kp] int32, kp = k rounded up to 4: row m's candidates
    count [M] uint32: CTAs of row m finished with stage 1; zero before every launch (zeroed at
    allocation, and put back to zero by the row's last CTA, so the next launch finds it zero)

Design (dsa_topk_split): grid (P, M), P = gridDim.x chosen by the launcher (pick_split: M x P <= the
SMs, P near sqrt(C / k)), 1024 threads a CTA, one CTA an SM. Two stages in one kernel:
  stage 1: CTA r of row m takes the slice [lo, hi) = [r L, (r + 1) L) clamped to C, L = ceil(C / P)
    rounded up to 4 (float4-aligned slices when C % 4 == 0), and runs topk_onecta.cuh's one_select
    over it (digit 0, the bins above the threshold bin, the threshold bin's buffer, digits 1 and 2,
    the index-order take of a partial tie quota) WITHOUT dropping +inf (DROP false: +inf must reach
    stage 2 as a key, to count there), writing the slice's own top k as (key, index) candidates to
    its segment ws[m][r][0 .. kp), key 0 (never a key: -inf / NaN / nothing) in the slots past
    them. Any key of the row's top k is in its slice's top k (its rank in the slice, ties by lower
    index, is at most its rank in the row), so the P segments hold the row's answer.
    Then every thread's writes are ordered before thread 0's __threadfence() by the block barrier,
    and thread 0 adds 1 to count[m] (the cooperative-groups grid-sync pattern, without the wait).
  stage 2: only the CTA whose atomicAdd returns P - 1 (the row's last; every other CTA exits) resets
    count[m] to 0, fences, and runs one_select (DROP true: onecta's contract) over the row's P kp
    candidate keys, writing out[m] by each member's ws_idx. Deadlock-free by construction: no CTA
    ever waits for another, so any number of waves (M x P > the SMs) is correct.
  The tie rule in stage 2 needs no order in the segments: the final T, Q (keys == T to take) and E
    (candidates == T) are exact from the candidates (every key > T of the row is one), and
    - Q == E: every candidate == T is a member. Right because the answer is a subset of the
      candidates: slice r's candidates == T are its first c_r keys == T by index (T_r <= T, where
      T_r is slice r's threshold, else the slice alone would hold k keys > T), and where c_r < E_r
      (slice r cut at T) Q <= c_r, so the row's lowest Q ties by index are all candidates.
    - 0 < Q < E: the row is re-read in index order from the scores (topk_take_ties over [0, C), as
      onecta) and its first Q keys == T taken: the row's own rule, whatever the candidates' order.
      Tie rows only (the sweep's N(0, 1) rows have E = Q = 1).
Loads (SplitSrc): 16-B cp.async.cg into a per-thread ring in dynamic shared memory of 4 batches x
  2 float4 a thread (SPLIT_RING_BYTES = 128 KiB a CTA; a batch is 8 keys a thread, one_select's
  batch width for this source): batches b .. b + 3 are in flight while batch b is waited for, and
  batch b + 4 is issued into b's slots as soon as b's keys are counted, so 96-128 KiB a CTA (6-8
  16-B loads a thread) are in flight through the whole pass, and counting one batch overlaps the
  landing of the next three (onecta keeps at most 64 KiB in flight and none while it counts). Each
  thread reads back only the slots it copied itself, so cp.async.wait_group is the only
  synchronisation. A source of at most 4 batches (32768 keys: the slice at 512 of 65536 at every
  M and at 2048 of 262144 for M <= 8, and stage 2's candidates at the model points) stays in the
  ring after pass 1, and every later pass reads it from shared memory, not L2.
  C % 4 != 0 (the scalar path): onecta's loads (one_batches) over the slice instead, each of its
  16-key batches given to one_select as two of 8. Stage 2 reads
  the candidates through the same ring: cp.async.cg reads L2, where the other CTAs' fenced writes
  are (never ld.global.nc: the workspace is written in this launch); their indices by ld.global.cg.
Shared memory: 45,216 B static (OneShared, onecta's 45,200, + the last-CTA flag) + the 131,072 B dynamic
  ring: 176,288 B a CTA, one CTA an SM; __launch_bounds__(1024, 1).
Timeline probes (-DDSA_TOPK_TIMELINE, topk_timeline.cuh): entry (rank = r), stage 1's read, digit
  0..2, counts and write (the candidates written), the last CTA's final select (TK_FINAL), exit.
*/

#include "topk_onecta.cuh"

#define SPLIT_VECS 2                    // float4 a thread a batch (32 KiB of copies a CTA)
#define SPLIT_KEYS (4 * SPLIT_VECS)     // keys a thread a batch
#define SPLIT_RING_BATCHES 4            // batches in the ring: 3-4 in flight (96-128 KiB a CTA)
#define SPLIT_RING_BYTES 131072         // SPLIT_RING_BATCHES x SPLIT_VECS x ONE_THREADS x 16 B, dynamic

static_assert(SPLIT_RING_BYTES == SPLIT_RING_BATCHES * SPLIT_VECS * ONE_THREADS * 16, "the ring's bytes");
static_assert(ONE_KEYS == 2 * SPLIT_KEYS, "the scalar path halves onecta's batches");

// A source of n 4-byte keys at p (scores: RAW false, keyed by topk_key; candidate keys: RAW true)
// through the ring (vec: n % 4 == 0 and p 16-B aligned), or onecta's loads (scalar path, scores
// only). Batch b (8 keys a thread) holds float4 index b step + u T + tid (u < SPLIT_VECS) of the
// thread, in ring slot ((b % 4) SPLIT_VECS + u) T + tid: one_index's mapping (key j of the batch at
// base is element 4 (base + (j / 4) T + tid) + j % 4), so positions are the same on every path.
template <bool RAW>
struct SplitSrc {
    static constexpr unsigned KEYS = SPLIT_KEYS;
    const void* p;
    unsigned n;
    bool vec;
    float4* ring;

    __device__ __forceinline__ unsigned index(unsigned base, unsigned j) const { return one_index(vec, base, j); }

    // Issue batch b's copies (those inside the source) into its ring slots, and commit a group
    // (empty past the end, so that every thread's group count stays in step with b).
    __device__ __forceinline__ void issue(unsigned b, unsigned n4) const {
        const float4* g = reinterpret_cast<const float4*>(p);
        const unsigned step = SPLIT_VECS * ONE_THREADS;
#pragma unroll
        for (unsigned u = 0; u < SPLIT_VECS; ++u) {
            const unsigned i = b * step + u * ONE_THREADS + threadIdx.x;
            if (i < n4)
                cp_async16(ring + ((b % SPLIT_RING_BATCHES) * SPLIT_VECS + u) * ONE_THREADS + threadIdx.x, g + i);
        }
        cp_async_commit();
    }

    template <bool PASS1, class F>
    __device__ __forceinline__ void batches(F&& f) const {
        if (!vec) {
            // onecta's scalar batches (key j at base + j T + tid), each split in two halves of 8:
            // the second half is the batch at base + 8 T in that mapping
            if constexpr (!RAW)
                one_batches<PASS1>(static_cast<const float*>(p), n, false,
                                   [&](unsigned base, const unsigned (&key)[ONE_KEYS]) {
                                       unsigned lo[SPLIT_KEYS], hi[SPLIT_KEYS];
#pragma unroll
                                       for (unsigned j = 0; j < SPLIT_KEYS; ++j) {
                                           lo[j] = key[j];
                                           hi[j] = key[SPLIT_KEYS + j];
                                       }
                                       f(base, lo);
                                       f(base + SPLIT_KEYS * ONE_THREADS, hi);
                                   });
            return;
        }
        const unsigned n4 = n >> 2, step = SPLIT_VECS * ONE_THREADS;
        const unsigned nb = (n4 + step - 1u) / step;
        // a source of at most 4 batches is still in this thread's ring after pass 1 (one_select
        // runs exactly one PASS1 pass, first; pass 1 issues nothing past batch 3 then)
        const bool held = !PASS1 && nb <= SPLIT_RING_BATCHES;
        if (!held) {
#pragma unroll
            for (unsigned b = 0; b < SPLIT_RING_BATCHES; ++b) issue(b, n4);
        }
        for (unsigned b = 0; b < nb; ++b) {
            // groups 0 .. b complete (b + 1 .. b + 3 may be pending)
            if (!held) cp_async_wait_group<SPLIT_RING_BATCHES - 1>();
            unsigned key[SPLIT_KEYS];
#pragma unroll
            for (unsigned u = 0; u < SPLIT_VECS; ++u) {
                const unsigned i = b * step + u * ONE_THREADS + threadIdx.x;
                const float4 x = ring[((b % SPLIT_RING_BATCHES) * SPLIT_VECS + u) * ONE_THREADS + threadIdx.x];
                const float v[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (unsigned s = 0; s < 4; ++s)
                    key[4 * u + s] = i >= n4 ? 0u : RAW ? __float_as_uint(v[s]) : topk_key(v[s]);
            }
            f(b * step, key);
            // batch b + 4 into b's slots: f has used every key of them (its atomics and compares
            // depend on the loaded values), and only this thread reads them
            if (!held) issue(b + SPLIT_RING_BATCHES, n4);
        }
        if (!held) cp_async_wait_all();
    }
};

// Stage 1's sink: the slice's members as (key, row index) candidates in the row's segment r.
struct CandOut {
    const float* __restrict__ row;      // the score row (the tie take reads it in index order)
    unsigned lo, hi, kp;
    unsigned* __restrict__ key;         // ws_key + (m P + r) kp
    int* __restrict__ idx;              // ws_idx + (m P + r) kp
    __device__ __forceinline__ void put(unsigned slot, unsigned pos, unsigned k) const {
        key[slot] = k;
        idx[slot] = (int)(lo + pos);
    }
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        topk_take_ties<ONE_WARPS>(row, lo, hi, T, Q, idx, at, scan);   // idx[at + rank] = row index
        for (unsigned j = threadIdx.x; j < Q; j += ONE_THREADS) key[at + j] = T;
    }
    __device__ __forceinline__ void fill(unsigned F, unsigned) const {
        for (unsigned j = F + threadIdx.x; j < kp; j += ONE_THREADS) key[j] = 0u;   // no candidate
    }
};

// A word written earlier in this launch by another CTA (fenced before its counter add): ld.global.cg
// reads it from L2, never from a stale L1 line, and is not the read-only (nc) path.
__device__ __forceinline__ int ld_cg_s32(const int* p) {
    int v;
    asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Stage 2's sink: the row's output; a member at candidate position pos is row index ws_idx[pos].
struct FinalOut {
    const float* __restrict__ row;
    unsigned C;
    int* __restrict__ orow;
    const int* idx;                     // ws_idx + m P kp (written in this launch: read through L2)
    __device__ __forceinline__ void put(unsigned slot, unsigned pos, unsigned) const { orow[slot] = ld_cg_s32(idx + pos); }
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        topk_take_ties<ONE_WARPS>(row, 0u, C, T, Q, orow, at, scan);
    }
    __device__ __forceinline__ void fill(unsigned F, unsigned k) const {
        for (unsigned j = F + threadIdx.x; j < k; j += ONE_THREADS) orow[j] = -1;
    }
};

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_split(const float* __restrict__ scores, int* __restrict__ out, unsigned* ws_key, int* ws_idx,
                   unsigned* count, int C_, int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned last;
    extern __shared__ __align__(16) float4 ring[];
    const unsigned r = blockIdx.x, P = gridDim.x, m = blockIdx.y;
    TK_ENTER(r);
    const unsigned C = (unsigned)C_, k = (unsigned)k_, kp = (k + 3u) & ~3u;
    const float* row = scores + (size_t)m * C;
    unsigned lo, hi;
    split_slice(C, P, r, lo, hi);
    const size_t seg = ((size_t)m * P + r) * kp;
    one_reset(s);

    // stage 1: the slice's top k as candidates (C % 4 == 0: the slice is float4-aligned)
    one_select<false, true>(SplitSrc<false>{row + lo, hi - lo, (C & 3u) == 0u, ring},
                            CandOut{row, lo, hi, kp, ws_key + seg, ws_idx + seg}, k, s);
    if (!split_last_cta(count, m, P, &last)) {
        TK_MARK(TK_EXIT);
        return;
    }

    // stage 2: the row's k best of its P kp candidates
    one_reset(s);
    const size_t cand = (size_t)m * P * kp;
    one_select<true, false>(SplitSrc<true>{ws_key + cand, P * kp, true, ring},
                            FinalOut{row, C, out + (size_t)m * k, ws_idx + cand}, k, s);
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}
