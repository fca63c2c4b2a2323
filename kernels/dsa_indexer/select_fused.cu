/*
DSA indexer scan fused with the top-k (component indexer_select, variant fused_mma): the scores
never reach memory in full. The scan's op, layouts and conventions: scan_common.cuh (key_layout
cand_dim only, as scan_mma); the per-tile tensor-core code: scan_mma_tile.cuh (copied from
scan_mma.cu). Output, per stream m: indices[m][0 .. k) int32, the k best candidates (any order:
members first, then -1; a chosen +inf's -1 falls among the members), the lower index winning
among equal scores, -1 for every slot past the finite-or-+inf candidates (-inf and NaN are never
chosen: reference.topk would make them -1 anyway, and they sort below every other score).

The order. Every candidate gets a distinct 64-bit key
    key = ordered(score) << 32 | (0xFFFFFFFF - index)
ordered() maps float bits to an unsigned that sorts as the floats do (-0 taken as +0, the
reference's equality); the low word makes the lower index the larger key among equal scores. The
top-k under the rule IS the k largest keys, a unique set: no tie case anywhere below, and a CTA
may see its candidates in any order (warps run ahead of each other). Live keys are all > 0
(ordered(-FLT_MAX) = 0x00800000), so 0 is "nothing".

select_fused_mma_{bf16,fp8}: grid (S, M), block SEL_THREADS (4 warps), dynamic shared memory
    cap x 8 bytes (cap = 2k + SEL_HEAD, the launcher's). CTA (s, m) scans tiles [s T, (s + 1) T)
    of stream m (T = slice_tiles, 16 keys a tile), stopping at the stream's eligible keys (past
    them every score is -inf: nothing to choose, nothing loaded). Warp w takes the slice's tiles
    w, w + 4, w + 8, ...; loads of its next tile go out before this tile's MMAs (scan_mma's
    pipeline, two tile buffers alternating). A scored key enters the shared buffer when it is
    live and its key > thresh (a warp-aggregated atomicAdd on the count). In rounds of 2 tiles a
    warp, then __syncthreads: at most SEL_HEAD = 4 warps x 2 tiles x 16 keys enter per round, so
    after a round whose count passes cap - SEL_HEAD = 2k the CTA compacts: finds T = the k-th
    largest key of the buffer (select_kth: an MSB-first radix select, 8 bits a pass, stopping as
    soon as the bin holding the k-th is needed whole), keeps the keys >= T (exactly k), thresh =
    T. thresh only rises and every rejected key is beaten by k kept ones, so the CTA's final
    buffer (compacted to k if larger) is exactly its slice's top-k. It writes its count (<= k)
    and keys to cand_keys[m][s][0 .. count), cand_counts[m][s].
select_merge: grid M, block MERGE_THREADS, dynamic shared memory S k x 8 bytes. Copies the
    stream's S lists into shared memory densely (n keys), selects the k-th largest T when n > k
    (the same select_kth), and writes every key >= T as its index (or -1 for +inf), then -1 to
    the end of the row.

Long rounds (select_fused_mma_r16_*, issue 14's tuning): the same kernel with rounds of
SEL_ROUND_TILES_LONG = 16 tiles a warp between the count checks, so the two block barriers a
round come 8x less often (at 2 tiles a round they hold the 4 warps in lockstep, each barrier
waiting on the slowest warp's loads); the headroom SEL_HEAD_OF(16) = 1024 keys, cap = 2k + 1024.
The threshold a warp filters with is then up to 16 tiles stale: more keys may enter than at 2,
never a wrong one (a key enters only above a threshold that every later one is at least), and a
shrink still comes as soon as a round leaves more than 2k.

What reaches memory beyond the keys: S x k x 8 bytes of candidate keys a stream (written, read
back from L2) and M k 4 of indices, against C x 4 of scores written and read twice (SELECT_NOTES).
Offsets are size_t where M C 128 can pass 2^31.
*/

#include "scan_mma_tile.cuh"

#define SEL_THREADS 128
#define SEL_WARPS 4
static_assert(SEL_WARPS * 32 == SEL_THREADS, "warps per CTA");
#define SEL_ROUND_TILES 2                                    // tiles a warp scores between barriers
#define SEL_ROUND_TILES_LONG 16                              // the _r16 kernels' (header, "Long rounds")
// most keys entering in one round of R tiles a warp (the buffer's headroom above 2k)
#define SEL_HEAD_OF(R) (SEL_WARPS * (R) * MMA_TILE_KEYS)
#define SEL_HEAD SEL_HEAD_OF(SEL_ROUND_TILES)
#define SEL_KMAX 4096                                        // largest k (cap = 2k + 128: 66 KiB)
#define MERGE_THREADS 1024
#define MERGE_MAX_SLICES 64                                  // slices a stream at most
#define SEL_BINS 256

typedef unsigned long long u64;

// float -> unsigned in the floats' order; -0 counts as +0 (the reference's equal scores).
__device__ __forceinline__ unsigned ordered_bits(float s) {
    unsigned b = __float_as_uint(s);
    if (b == 0x80000000u) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// NaN and -inf are never chosen (bit tests: --use_fast_math may fold isnan away).
__device__ __forceinline__ bool live_score(float s) {
    const unsigned b = __float_as_uint(s);
    return (b & 0x7FFFFFFFu) <= 0x7F800000u && b != 0xFF800000u;
}

#define ORDERED_POS_INF 0xFF800000u  // ordered_bits(+inf)

__device__ __forceinline__ u64 make_key(float s, int index) {
    return ((u64)ordered_bits(s) << 32) | (u64)(0xFFFFFFFFu - (unsigned)index);
}

__device__ __forceinline__ int key_index(u64 key) {
    return (unsigned)(key >> 32) == ORDERED_POS_INF ? -1 : (int)(0xFFFFFFFFu - (unsigned)key);
}

struct SelState {
    unsigned hist[SEL_BINS];
    u64 prefix;      // select_kth: the digits found so far
    u64 thresh;      // fused: a key enters the buffer only when > thresh
    int want;        // select_kth: rank of the k-th among the keys matching prefix
    int whole;       // select_kth: 1 when the k-th's bin is needed whole (stop)
    int count;       // keys in the buffer
    int keep;        // compaction's output count
};

/*
The k-th largest of src[0 .. n) (n > k >= 1, distinct keys), or a lower bound T of it such that
exactly k keys are >= T: MSB-first radix select, 8-bit digits. Per pass: a histogram of the digit
over the keys matching the digits found so far; warp 0 finds the bin b holding the want-th largest
(suffix sums over lanes: lane l holds bins 255 - 8 l .. 248 - 8 l); if every key in b is needed
(hist[b] == want), T = the prefix with the lower digits 0 and the search stops (always by the 8th
pass: keys are distinct, so the last bin holds one key). Every thread of the block calls it
(NT threads); it starts and ends with a barrier; src may be shared or global memory.
*/
template <int NT>
__device__ __forceinline__ u64 select_kth(const u64* src, int n, int k, SelState& st) {
    const int tid = threadIdx.x, lane = tid & 31;
    u64 prefix = 0;
    int want = k;
#pragma unroll 1
    for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass;
        __syncthreads();  // the previous pass's readers of hist / prefix are done
        for (int b = tid; b < SEL_BINS; b += NT) st.hist[b] = 0u;
        __syncthreads();
        // high digits already found: keys whose bits above `shift` equal prefix's
        const u64 hi_mask = pass == 0 ? 0ull : (~0ull << (shift + 8));
        // Lanes that share a bin add once (__match_any_sync; the first pass puts most keys of a
        // row in 1-3 bins: sign and exponent). Lanes with nothing to count take a value no bin
        // has (256 + lane). The loop bound is uniform, so every lane reaches the match.
        for (int base = 0; base < n; base += NT) {
            const int i = base + tid;
            unsigned bin = 256u + (unsigned)lane;
            if (i < n) {
                const u64 key = src[i];
                if ((key & hi_mask) == prefix) bin = (unsigned)(key >> shift) & 0xFFu;
            }
            const unsigned peers = __match_any_sync(FULL_MASK, bin);
            if (bin < 256u && lane == __ffs(peers) - 1) atomicAdd(&st.hist[bin], (unsigned)__popc(peers));
        }
        __syncthreads();
        if (tid < 32) {
            unsigned h[8], local = 0u;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                h[j] = st.hist[255 - 8 * lane - j];
                local += h[j];
            }
            unsigned incl = local;  // keys in the bins of lanes 0 .. lane (bins >= 248 - 8 lane)
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const unsigned v = __shfl_up_sync(FULL_MASK, incl, d);
                if (lane >= d) incl += v;
            }
            const unsigned excl = incl - local;
            if (excl < (unsigned)want && (unsigned)want <= incl) {  // exactly one lane
                unsigned cum = excl;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (cum + h[j] >= (unsigned)want) {
                        const unsigned bin = 255u - 8u * lane - j;
                        st.prefix = prefix | ((u64)bin << shift);
                        st.want = want - (int)cum;
                        st.whole = (h[j] == (unsigned)(want - (int)cum)) ? 1 : 0;
                        break;
                    }
                    cum += h[j];
                }
            }
        }
        __syncthreads();
        prefix = st.prefix;
        want = st.want;
        if (st.whole) break;  // uniform: every thread read the same st.whole
    }
    __syncthreads();  // everyone has read st before a caller reuses it
    return prefix;
}

// Keep the keys >= T of buf[0 .. n) at its front, in place (any order); returns their count. Chunks
// of NT: every thread reads its key, a barrier, then the kept ones are appended through st.keep.
// After chunk c at most (c + 1) NT keys are kept, so writes land only on already-read slots.
template <int NT>
__device__ __forceinline__ int compact_ge(u64* buf, int n, u64 T, SelState& st) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) st.keep = 0;
    __syncthreads();
#pragma unroll 1
    for (int base = 0; base < n; base += NT) {
        const int i = base + tid;
        const u64 key = i < n ? buf[i] : 0ull;
        const bool keep = i < n && key >= T;
        __syncthreads();  // the whole chunk is read before any write into it
        const unsigned mask = __ballot_sync(FULL_MASK, keep);
        int pos = 0;
        if (lane == 0 && mask) pos = atomicAdd(&st.keep, __popc(mask));
        pos = __shfl_sync(FULL_MASK, pos, 0);
        if (keep) buf[pos + __popc(mask & ((1u << lane) - 1u))] = key;
    }
    __syncthreads();
    return st.keep;
}

// The buffer down to its top k (count > k): thresh and count updated. Block-wide.
__device__ __forceinline__ void shrink(u64* buf, int k, SelState& st) {
    const int n = st.count;
    const u64 T = select_kth<SEL_THREADS>(buf, n, k, st);
    const int kept = compact_ge<SEL_THREADS>(buf, n, T, st);
    if (threadIdx.x == 0) {
        st.count = kept;  // == k (select_kth's contract)
        st.thresh = T > st.thresh ? T : st.thresh;
    }
    __syncthreads();
}

template <bool FP8>
__device__ __forceinline__ void fused_tile(Tile<FP8>& cur, Tile<FP8>& nxt, int j, int nw, int first_tile,
                                           size_t stream, int elig, u64 thr, u64* buf, SelState& st,
                                           const unsigned (&bq)[4][8][2], const float (&wr)[4][2],
                                           const unsigned char* __restrict__ keys,
                                           const float* __restrict__ scales, int g, int t, int lane) {
    if (j + 1 < nw)
        load_tile<FP8>(nxt, keys, scales, stream, (first_tile + SEL_WARPS * (j + 1)) * MMA_TILE_KEYS, elig, g, t);
    const float value = tile_score<FP8>(cur, bq, wr, t);
    const int row = (first_tile + SEL_WARPS * j) * MMA_TILE_KEYS + g + 8 * (t & 1);
    bool enter = false;
    u64 key = 0ull;
    if (t < 2 && row < elig && live_score(value)) {
        key = make_key(value, row);
        enter = key > thr;
    }
    const unsigned mask = __ballot_sync(FULL_MASK, enter);
    if (mask) {  // warp-uniform
        int base = 0;
        if (lane == 0) base = atomicAdd(&st.count, __popc(mask));
        base = __shfl_sync(FULL_MASK, base, 0);
        if (enter) buf[base + __popc(mask & ((1u << lane) - 1u))] = key;
    }
}

template <bool FP8, int R>
__device__ __forceinline__ void select_fused(const bf16* __restrict__ q, const float* __restrict__ w,
                                             const unsigned char* __restrict__ keys,
                                             const float* __restrict__ scales, const int* __restrict__ eligible,
                                             u64* __restrict__ cand_keys, int* __restrict__ cand_counts, int C,
                                             int k, int cap, int slice_tiles) {
    extern __shared__ u64 buf[];  // [cap]
    __shared__ SelState st;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int s = blockIdx.x, S = gridDim.x, m = blockIdx.y;
    const size_t stream = (size_t)m * (size_t)C;
    const int elig = min(ld_nc_s32(eligible + m), C);
    // the slice's tiles that hold an eligible key
    const int etiles = (elig + MMA_TILE_KEYS - 1) / MMA_TILE_KEYS;
    const int t0 = s * slice_tiles;
    const int nt = max(0, min(t0 + slice_tiles, etiles) - t0);
    const int first_tile = t0 + warp;
    const int nw = nt > warp ? (nt - warp + SEL_WARPS - 1) / SEL_WARPS : 0;   // this warp's tiles
    const int rounds = ((nt + SEL_WARPS - 1) / SEL_WARPS + R - 1) / R;  // uniform

    if (threadIdx.x == 0) {
        st.count = 0;
        st.thresh = 0ull;
    }
    unsigned bq[4][8][2];
    float wr[4][2];
    Tile<FP8> a, b;
    if (nw > 0) {
        stream_setup<FP8>(bq, wr, q, w, m, g, t);
        load_tile<FP8>(a, keys, scales, stream, first_tile * MMA_TILE_KEYS, elig, g, t);
    }
    __syncthreads();
#pragma unroll 1
    for (int r = 0; r < rounds; ++r) {
        const u64 thr = st.thresh;  // stable: written only inside shrink, between barriers
        const int j = R * r;
#pragma unroll
        for (int u = 0; u < R; u += 2) {  // the two tile buffers alternate: R is even
            if (j + u < nw)
                fused_tile<FP8>(a, b, j + u, nw, first_tile, stream, elig, thr, buf, st, bq, wr, keys, scales, g, t,
                                lane);
            if (j + u + 1 < nw)
                fused_tile<FP8>(b, a, j + u + 1, nw, first_tile, stream, elig, thr, buf, st, bq, wr, keys, scales, g,
                                t, lane);
        }
        __syncthreads();
        const int count = st.count;
        __syncthreads();  // every thread has read the count before the next round adds to it
        if (count > cap - SEL_HEAD_OF(R)) shrink(buf, k, st);  // uniform
    }
    if (st.count > k) shrink(buf, k, st);
    const int n = st.count;  // <= k
    u64* out = cand_keys + ((size_t)m * S + s) * (size_t)k;
    for (int i = threadIdx.x; i < n; i += SEL_THREADS) out[i] = buf[i];
    if (threadIdx.x == 0) cand_counts[m * S + s] = n;
}

// The fused kernels: select_fused_mma<TAG>_{bf16,fp8} is select_fused<FP8, R>; the launcher gives
// cap = 2k + SEL_HEAD_OF(R) keys of dynamic shared memory.
#define SEL_FUSED_KERNELS(TAG, R)                                                                            \
    extern "C" __global__ void __launch_bounds__(SEL_THREADS, 3)                                             \
    select_fused_mma##TAG##_bf16(const bf16* __restrict__ q, const float* __restrict__ w,                    \
                                 const unsigned char* __restrict__ keys, const int* __restrict__ eligible,   \
                                 u64* __restrict__ cand_keys, int* __restrict__ cand_counts, int C, int k,   \
                                 int cap, int slice_tiles) {                                                 \
        select_fused<false, R>(q, w, keys, nullptr, eligible, cand_keys, cand_counts, C, k, cap, slice_tiles); \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(SEL_THREADS, 3)                                             \
    select_fused_mma##TAG##_fp8(const bf16* __restrict__ q, const float* __restrict__ w,                     \
                                const unsigned char* __restrict__ keys, const float* __restrict__ scales,    \
                                const int* __restrict__ eligible, u64* __restrict__ cand_keys,               \
                                int* __restrict__ cand_counts, int C, int k, int cap, int slice_tiles) {     \
        select_fused<true, R>(q, w, keys, scales, eligible, cand_keys, cand_counts, C, k, cap, slice_tiles);  \
    }
SEL_FUSED_KERNELS(, SEL_ROUND_TILES)
SEL_FUSED_KERNELS(_r16, SEL_ROUND_TILES_LONG)

// grid M, block MERGE_THREADS, dynamic shared memory S k x 8 bytes; S <= MERGE_MAX_SLICES.
extern "C" __global__ void __launch_bounds__(MERGE_THREADS, 1)
select_merge(const u64* __restrict__ cand_keys, const int* __restrict__ cand_counts, int* __restrict__ indices,
             int S, int k) {
    extern __shared__ u64 pool[];  // [S k]
    __shared__ SelState st;
    __shared__ int offs[MERGE_MAX_SLICES + 1];
    const int m = blockIdx.x, tid = threadIdx.x;
    if (tid == 0) {
        int total = 0;
        for (int s = 0; s < S; ++s) {
            offs[s] = total;
            total += max(0, min(cand_counts[m * S + s], k));  // a count is <= k; clamped all the same
        }
        offs[S] = total;
    }
    __syncthreads();
    const int n = offs[S];
    for (int s = 0; s < S; ++s) {
        const int cnt = offs[s + 1] - offs[s];
        const u64* src = cand_keys + ((size_t)m * S + s) * (size_t)k;
        for (int i = tid; i < cnt; i += MERGE_THREADS) pool[offs[s] + i] = src[i];
    }
    __syncthreads();
    const u64 T = n > k ? select_kth<MERGE_THREADS>(pool, n, k, st) : 0ull;   // 0: keep every key
    if (tid == 0) st.keep = 0;
    __syncthreads();
    int* row = indices + (size_t)m * (size_t)k;
    const int lane = tid & 31;
    for (int base = 0; base < n; base += MERGE_THREADS) {
        const int i = base + tid;
        const bool keep = i < n && pool[i] >= T;
        const unsigned mask = __ballot_sync(FULL_MASK, keep);
        int pos = 0;
        if (lane == 0 && mask) pos = atomicAdd(&st.keep, __popc(mask));
        pos = __shfl_sync(FULL_MASK, pos, 0);
        if (keep) row[pos + __popc(mask & ((1u << lane) - 1u))] = key_index(pool[i]);
    }
    __syncthreads();
    for (int i = st.keep + tid; i < k; i += MERGE_THREADS) row[i] = -1;
}
