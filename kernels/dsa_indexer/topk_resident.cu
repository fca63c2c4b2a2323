/*
DSA top-k, resident design (issue 14): per stream m, the k candidates of highest score out of C,
with the row read from global memory ONCE and kept on chip (half in registers, half in shared
memory) for every radix digit pass. topk_model.select_row_resident is the NumPy emulation of this
logic (the same slices, element mapping, histograms, quota split, packed tie scan and slot claims).

The op and its conventions: exactly those of topk_radix.cu (reference.topk is the rule):
    scores [M][C] float32 row-major; out [M][k] int32: the members (finite scores among the top k,
    the lower index winning among equal scores, NaN as -inf, -0 == +0), in no particular order, in
    slots [0, F), then -1 in [F, k). The key map (topk_key) is topk_common.cuh's: -inf / NaN -> 0
    (never a member, never counted), +inf -> 0xff800000 (chosen first, then -1).

Design (dsa_topk_resident_c{1,2,4}): grid (CS, M), CS CTAs a row (a thread-block cluster when
CS > 1; CS = 1 uses no cluster instruction at all), 1024 threads a CTA, one CTA an SM.
CTA rank c holds the index range [lo, hi) = [c L, c L + L) of its row (clamped to C), L = ceil(C /
CS) rounded up to 4, L <= 65536 (the launcher refuses longer slices). Element e = lo + 4 (t + 1024
j) + s of the slice is thread t's value (j, s), j < 16 chunks of 4: chunks 0..5 (24 keys) stay in
registers, chunks 6..15 (40 keys) in shared memory at keys[(j - 6) 1024 + t] (a uint4 a chunk:
conflict-free; 32 + 32 or 28 + 36 spill at the 64 registers 1024 threads allow, 24 + 40 does not). Loads: all 16 chunks issued at once (16-byte ld.global.nc into registers, 16-byte
cp.async into shared memory; 4-byte forms when C % 4 != 0), 256 KiB a CTA in flight.
Positions past hi read as -inf (key 0). Lower index = smaller (j, t, s) in that order, which the
tie scan below uses.
  digit 0 (bits 31..21, 2048 bins): the register chunks are converted and counted as they arrive
    (overlapping the HBM stream), then the shared chunks (converted in place). Key 0 is not
    counted. 4 interleaved copies h0c[bin * 4 + (lane & 3)] cut the lanes of a warp that hit one
    address (N(0,1) keys of a warp fall on ~22 bins) by ~4x; summed into h0 afterwards.
  merge: CS > 1: barrier.cluster, then every CTA sums every rank's bins through DSMEM (thread t:
    bins t and t + 1024, CS remote words each) into its merged copy m; every CTA finds the same
    bin by one block scan in descending bin order (block_find). CS = 1: the search runs on h0.
  digit 1 (bits 20..10) over the keys whose digit 0 is b0, digit 2 (bits 9..0) over those whose
    22-bit prefix matches, the same way: T = the k-th key, G = #(key > T), Q = k - G keys == T to
    take. If fewer than k nonzero keys exist, b0 = 0 and T = 0: every nonzero key is above T.
  quota: E_r = rank r's h2[b2] (keys == T) read remotely; q_c = clamp(Q - sum_{r<c} E_r, 0, E_c)
    (lower ranks hold lower indices). Members of CTA c: n_c = #(key > T, not +inf) + q_c.
  write: one sweep counts per thread its members and its ties per chunk (16 chunk counts <= 4
    each, packed as 16-bit fields, 2 a word: a chunk's block total is <= 4096), one 9-word block
    exclusive scan gives every thread its member offset and, per chunk, the ties of lower threads;
    a tie's rank in index order = ties of earlier chunks + of lower threads in its chunk + of its
    own earlier s; it is written at base + #members above + rank when rank < q_c. base: an
    atomicAdd of n_c on rank 0's shared counter through DSMEM (any order: the output is a set).
    F = (T < +inf ? G - #(+inf) : 0) + (T finite ? Q : 0), from merged counts; rank 0 writes the -1.
  Cluster barriers: 3 (one a digit) + the exit barrier split into arrive (after the last remote
  access) and wait (before exit), so that no CTA leaves while another reads its shared memory.
Shared memory: 160 KiB of keys + 32 KiB h0c + 20 KiB h0 / h1 / h2 + 8 KiB merged + scan scratch:
DSA_TOPK_RES_SMEM_BYTES (221.25 KiB) of dynamic shared memory; __launch_bounds__(1024, 1): <= 64 registers.
*/

#include "topk_common.cuh"
#include "topk_timeline.cuh"

#define DSA_TOPK_RES_THREADS 1024
#define DSA_TOPK_RES_WARPS 32
#define DSA_TOPK_RES_REG_CHUNKS 6        // float4 chunks a thread holds in registers (24 keys: 8 or 7 spill)
#define DSA_TOPK_RES_SMEM_CHUNKS 10      // float4 chunks a thread holds in shared memory (40 keys)
#define DSA_TOPK_RES_SLICE 65536         // keys a CTA holds: 4 x 1024 x (6 + 10)
#define DSA_TOPK_RES_COPIES 4            // interleaved copies of the digit-0 histogram
#define DSA_TOPK_RES_SCAN 9              // words of the write sweep's block scan: members + 8 packed tie words
#define DSA_TOPK_RES_SMEM_BYTES 226560   // dynamic shared memory the launcher gives (>= sizeof(ResShared))

struct ResShared {
    uint4 keys[DSA_TOPK_RES_SMEM_CHUNKS * DSA_TOPK_RES_THREADS];   // chunks 6..15: floats, then keys
    unsigned h0c[2048 * DSA_TOPK_RES_COPIES];
    unsigned h0[2048], h1[2048], h2[1024];   // this CTA's histograms (read by the cluster)
    unsigned m[2048];                         // the merged histogram of the digit being searched
    unsigned scan[DSA_TOPK_RES_WARPS * DSA_TOPK_RES_SCAN];
    unsigned found_bin, found_above;
    unsigned counter;                         // rank 0: output slots claimed by the cluster's CTAs
    unsigned base, quota, p_total;
    unsigned chunk_before[2 * (DSA_TOPK_RES_SCAN - 1)];   // ties of this CTA in chunks before j
};
static_assert(sizeof(ResShared) <= DSA_TOPK_RES_SMEM_BYTES, "DSA_TOPK_RES_SMEM_BYTES too small");
static_assert(DSA_TOPK_RES_SLICE == 4 * DSA_TOPK_RES_THREADS * (DSA_TOPK_RES_REG_CHUNKS + DSA_TOPK_RES_SMEM_CHUNKS),
              "slice = 4 x threads x chunks");

// atomicAdd on the word at `local`'s offset in CTA `rank` of the cluster; returns the old value.
__device__ __forceinline__ unsigned atomic_add_rank(unsigned* local, unsigned rank, unsigned v) {
    unsigned ra, old;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(ra), "r"(v) : "memory");
    return old;
}

// (smem_addr, cp_async16 and cp_async_wait_all: topk_common.cuh)
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// Inclusive-then-exclusive block scan of N words in thread order: x[i] becomes the sum of x[i]
// over lower threads; the block totals are left in scratch[31 N + i] (valid until the next call).
template <int N>
__device__ __forceinline__ void res_block_scan(unsigned (&x)[N], unsigned* scratch) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const unsigned v = x[i];
        x[i] = topk_warp_inclusive_sum(x[i]);
        if (lane == 31) scratch[warp * N + i] = x[i];
        x[i] -= v;                                     // exclusive within the warp
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            unsigned w = topk_warp_inclusive_sum(scratch[lane * N + i]);
            scratch[lane * N + i] = w;                 // inclusive over warps
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] += warp ? scratch[(warp - 1) * N + i] : 0u;
}

// The bin of histogram h (NB = 2048 or 1024 bins) holding the kk-th largest counted key and the
// count above it, into s->found_bin / found_above (0 and the total when fewer than kk are
// counted). Thread t sums bins [NB - P (t + 1), NB - P t), P = NB / 1024, so thread order is
// descending bin order. Every thread reads the result after the call.
template <int NB>
__device__ __forceinline__ void block_find(const unsigned* h, unsigned kk, ResShared* s) {
    constexpr unsigned P = NB / DSA_TOPK_RES_THREADS;
    const unsigned top = NB - P * threadIdx.x;         // one past this thread's highest bin
    unsigned v[1] = {0u};
#pragma unroll
    for (unsigned b = 1; b <= P; ++b) v[0] += h[top - b];
    const unsigned mine = v[0];
    res_block_scan<1>(v, s->scan);
    const unsigned total = s->scan[31];
    unsigned before = v[0];
    if (total < kk) {
        if (threadIdx.x == 0) {
            s->found_bin = 0u;
            s->found_above = total;
        }
    } else if (before < kk && before + mine >= kk) {   // exactly one thread
#pragma unroll
        for (unsigned b = 1; b <= P; ++b) {
            const unsigned c = h[top - b];
            if (before + c >= kk) {
                s->found_bin = top - b;
                s->found_above = before;
                break;
            }
            before += c;
        }
    }
    __syncthreads();
}

// Digit search over the cluster: CS = 1 on the CTA's own histogram; else every rank's bins
// summed through DSMEM into s->m (after the barrier that makes every rank's histogram final).
template <int NB, int CS>
__device__ __forceinline__ void cluster_find(const unsigned* h, unsigned kk, ResShared* s, unsigned sync_mark) {
    (void)sync_mark;  // the timeline build's probe id only
    if constexpr (CS == 1) {
        __syncthreads();
        TK_MARK(sync_mark);
        block_find<NB>(h, kk, s);
    } else {
        cluster_sync();
        TK_MARK(sync_mark);
        for (unsigned b = threadIdx.x; b < (unsigned)NB; b += DSA_TOPK_RES_THREADS) {
            unsigned sum = 0u;
#pragma unroll
            for (unsigned r = 0; r < (unsigned)CS; ++r) sum += ld_rank(&h[b], r);
            s->m[b] = sum;
        }
        __syncthreads();
        block_find<NB>(s->m, kk, s);
    }
}

// f(key) for each of the thread's 64 keys in (j, s) order: rk[4 j + s] for j < 6, then the
// shared chunks (read as uint4, conflict-free).
#define RES_FOR_KEYS(...)                                                                    \
    do {                                                                                      \
        _Pragma("unroll") for (int q_ = 0; q_ < 4 * DSA_TOPK_RES_REG_CHUNKS; ++q_) {          \
            const unsigned key = rk[q_];                                                      \
            __VA_ARGS__;                                                                      \
        }                                                                                     \
        _Pragma("unroll") for (int j_ = 0; j_ < DSA_TOPK_RES_SMEM_CHUNKS; ++j_) {             \
            const uint4 w_ = s.keys[j_ * DSA_TOPK_RES_THREADS + threadIdx.x];                 \
            const unsigned ks_[4] = {w_.x, w_.y, w_.z, w_.w};                                 \
            _Pragma("unroll") for (int s_ = 0; s_ < 4; ++s_) {                                \
                const unsigned key = ks_[s_];                                                 \
                __VA_ARGS__;                                                                  \
            }                                                                                 \
        }                                                                                     \
    } while (0)

template <int CS>
__device__ __forceinline__ void resident_body(const float* __restrict__ scores, int* __restrict__ out,
                                              int C_, int k_) {
    extern __shared__ __align__(16) unsigned char res_smem[];
    ResShared& s = *reinterpret_cast<ResShared*>(res_smem);
    const unsigned C = (unsigned)C_, k = (unsigned)k_;
    const unsigned tid = threadIdx.x, lane = tid & 31u;
    unsigned rank = 0u;
    if constexpr (CS > 1) {
        if (cluster_nctarank() != (unsigned)CS) __trap();  // launched without the compiled cluster shape
        rank = cluster_ctarank();
    }
    TK_ENTER(rank);
    const unsigned L = ((C + CS - 1) / CS + 3u) & ~3u;
    const unsigned lo = min(C, rank * L), hi = min(C, lo + L), n = hi - lo;
    const float* row = scores + (size_t)blockIdx.y * C + lo;
    int* orow = out + (size_t)blockIdx.y * k;
    const bool vec = (C & 3u) == 0u;                   // lo and n are then multiples of 4
    const float NEG_INF = __uint_as_float(0xff800000u);

    // ---- loads: shared chunks by cp.async, register chunks by ld.global.nc, all in flight ----
#pragma unroll
    for (int j = 0; j < DSA_TOPK_RES_SMEM_CHUNKS; ++j) {
        const unsigned e = 4u * (tid + DSA_TOPK_RES_THREADS * (DSA_TOPK_RES_REG_CHUNKS + j));
        uint4* dst = &s.keys[j * DSA_TOPK_RES_THREADS + tid];
        if (vec && e < n) {
            cp_async16(dst, row + e);
        } else if (vec) {
            *dst = make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u);
        } else {
            unsigned* d = reinterpret_cast<unsigned*>(dst);
#pragma unroll
            for (unsigned q = 0; q < 4u; ++q) {
                if (e + q < n) cp_async4(d + q, row + e + q);
                else d[q] = 0xff800000u;
            }
        }
    }
    float v[4 * DSA_TOPK_RES_REG_CHUNKS];
#pragma unroll
    for (int j = 0; j < DSA_TOPK_RES_REG_CHUNKS; ++j) {
        const unsigned e = 4u * (tid + DSA_TOPK_RES_THREADS * j);
        if (vec) {
            const float4 x = e < n ? ld_nc_f32x4(reinterpret_cast<const float4*>(row + e))
                                   : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
        } else {
#pragma unroll
            for (unsigned q = 0; q < 4u; ++q) v[4 * j + q] = e + q < n ? ld_nc_f32(row + e + q) : NEG_INF;
        }
    }

    // zero the histograms while the loads fly
    for (unsigned i = tid; i < 2048u * DSA_TOPK_RES_COPIES; i += DSA_TOPK_RES_THREADS) s.h0c[i] = 0u;
    for (unsigned i = tid; i < 2048u; i += DSA_TOPK_RES_THREADS) s.h1[i] = 0u;
    s.h2[tid] = 0u;
    if (tid == 0) s.counter = 0u;
    __syncthreads();
    TK_MARK(TK_ISSUE);

    // ---- digit 0: register chunks as they arrive, then the shared chunks converted in place ----
    unsigned* h0c = s.h0c + (lane & (DSA_TOPK_RES_COPIES - 1u));
    unsigned rk[4 * DSA_TOPK_RES_REG_CHUNKS];
#pragma unroll
    for (int q = 0; q < 4 * DSA_TOPK_RES_REG_CHUNKS; ++q) {
        rk[q] = topk_key(v[q]);
        if (rk[q]) atomicAdd(&h0c[(rk[q] >> 21) * DSA_TOPK_RES_COPIES], 1u);
    }
    cp_async_wait_all();                                 // this thread's own copies have landed
#pragma unroll
    for (int j = 0; j < DSA_TOPK_RES_SMEM_CHUNKS; ++j) {
        uint4 w = s.keys[j * DSA_TOPK_RES_THREADS + tid];
        w.x = topk_key(__uint_as_float(w.x));
        w.y = topk_key(__uint_as_float(w.y));
        w.z = topk_key(__uint_as_float(w.z));
        w.w = topk_key(__uint_as_float(w.w));
        s.keys[j * DSA_TOPK_RES_THREADS + tid] = w;    // only this thread reads or writes it
        if (w.x) atomicAdd(&h0c[(w.x >> 21) * DSA_TOPK_RES_COPIES], 1u);
        if (w.y) atomicAdd(&h0c[(w.y >> 21) * DSA_TOPK_RES_COPIES], 1u);
        if (w.z) atomicAdd(&h0c[(w.z >> 21) * DSA_TOPK_RES_COPIES], 1u);
        if (w.w) atomicAdd(&h0c[(w.w >> 21) * DSA_TOPK_RES_COPIES], 1u);
    }
    __syncthreads();
    TK_MARK(TK_READ);
    for (unsigned b = tid; b < 2048u; b += DSA_TOPK_RES_THREADS) {
        unsigned sum = 0u;
#pragma unroll
        for (unsigned c = 0; c < DSA_TOPK_RES_COPIES; ++c) sum += s.h0c[b * DSA_TOPK_RES_COPIES + c];
        s.h0[b] = sum;
    }
    cluster_find<2048, CS>(s.h0, k, &s, TK_SYNC0);     // its barrier orders the h0 writes
    TK_MARK(TK_DIGIT0);
    const unsigned b0 = s.found_bin;
    unsigned G = s.found_above;
    if (tid == 0) s.p_total = (CS == 1 ? s.h0 : s.m)[DSA_TOPK_BIN_POSINF];
    unsigned T = 0u;
    if (b0 != 0u) {                                    // block-uniform (and cluster-uniform)
        RES_FOR_KEYS(if ((key >> 21) == b0) atomicAdd(&s.h1[(key >> 10) & 0x7ffu], 1u));
        cluster_find<2048, CS>(s.h1, k - G, &s, TK_SYNC1);
        TK_MARK(TK_DIGIT1);
        const unsigned b1 = s.found_bin;
        const unsigned kk2 = k - G - s.found_above;
        G += s.found_above;
        const unsigned prefix = (b0 << 11) | b1;
        RES_FOR_KEYS(if ((key >> 10) == prefix) atomicAdd(&s.h2[key & 0x3ffu], 1u));
        cluster_find<1024, CS>(s.h2, kk2, &s, TK_SYNC2);
        TK_MARK(TK_DIGIT2);
        G += s.found_above;
        T = (prefix << 10) | s.found_bin;
    }                                                  // (every rank takes the same branch: barrier counts match)
    const bool t_finite = b0 != 0u && T != DSA_TOPK_KEY_POSINF;
    const unsigned b2 = T & 0x3ffu;
    const unsigned Q = k - G;                          // keys == T to take (when T is finite)

    // ---- count sweep: members above T and ties per chunk (16-bit fields, 2 chunks a word) ----
    unsigned cnt[DSA_TOPK_RES_SCAN];
#pragma unroll
    for (int i = 0; i < DSA_TOPK_RES_SCAN; ++i) cnt[i] = 0u;
    {
        int q = 0;  // the key's position (j, s) = (q / 4, q % 4), unrolled
        RES_FOR_KEYS({
            cnt[0] += (key > T && key != DSA_TOPK_KEY_POSINF) ? 1u : 0u;
            cnt[1 + (q >> 3)] += (t_finite && key == T) ? (1u << (16 * ((q >> 2) & 1))) : 0u;
            ++q;
        });
    }
    res_block_scan<DSA_TOPK_RES_SCAN>(cnt, s.scan);    // cnt: sums over lower threads
    // the tie words to shared memory (h0c is free: its last read, the h0 sums, is behind barriers), read
    // back only at a tie, so that the write sweep holds 8 fewer live registers
#pragma unroll
    for (int i = 1; i < DSA_TOPK_RES_SCAN; ++i) s.h0c[(i - 1) * DSA_TOPK_RES_THREADS + tid] = cnt[i];

    // ---- quota and output base (thread 0), F ----
    if (tid == 0) {
        const unsigned* tot = s.scan + 31 * DSA_TOPK_RES_SCAN;
        unsigned e_local = 0u;                         // ties in this CTA; chunk_before[j]: in chunks < j
#pragma unroll
        for (int j = 0; j < 2 * (DSA_TOPK_RES_SCAN - 1); ++j) {
            s.chunk_before[j] = e_local;
            e_local += (tot[1 + (j >> 1)] >> (16 * (j & 1))) & 0xffffu;
        }
        unsigned eq_before = 0u;
        if constexpr (CS > 1) {
            if (t_finite)
                for (unsigned r = 0; r < rank; ++r) eq_before += ld_rank(&s.h2[b2], r);
        }
        const unsigned quota = t_finite ? min(e_local, Q > eq_before ? Q - eq_before : 0u) : 0u;
        s.quota = quota;
        if constexpr (CS > 1) {
            s.base = atomic_add_rank(&s.counter, 0u, tot[0] + quota);
        } else {
            s.base = 0u;
        }
    }
    if constexpr (CS > 1) cluster_arrive();            // split barrier: this CTA's last remote access is above; wait before exit
    __syncthreads();
    TK_MARK(TK_COUNTS);
    const unsigned base = s.base, quota = s.quota;
    const unsigned above = s.scan[31 * DSA_TOPK_RES_SCAN];   // this CTA's members above T

    // ---- write sweep ----
    {
        unsigned pos = base + cnt[0];
        unsigned run = 0u;                             // ties of this thread earlier in its chunk
        int q = 0;
        RES_FOR_KEYS({
            const unsigned j = (unsigned)q >> 2;
            const unsigned e = lo + 4u * (tid + DSA_TOPK_RES_THREADS * j) + ((unsigned)q & 3u);
            if (key > T && key != DSA_TOPK_KEY_POSINF) orow[pos++] = (int)e;
            if (t_finite && key == T) {                // rank in index order: earlier chunks, lower threads, own
                const unsigned lower = (s.h0c[(j >> 1) * DSA_TOPK_RES_THREADS + tid] >> (16 * (j & 1))) & 0xffffu;
                const unsigned r = s.chunk_before[j] + lower + run;
                if (r < quota) orow[base + above + r] = (int)e;
                ++run;
            }
            if ((q & 3) == 3) run = 0u;
            ++q;
        });
    }

    if (rank == 0u) {
        const unsigned F = (T < DSA_TOPK_KEY_POSINF ? G - s.p_total : 0u) + (t_finite ? Q : 0u);
        for (unsigned j = F + tid; j < k; j += DSA_TOPK_RES_THREADS) orow[j] = -1;
    }
    TK_MARK(TK_WRITE);
    if constexpr (CS > 1) cluster_wait();
    TK_MARK(TK_EXIT);
}

#define DSA_TOPK_RES_KERNEL(CS, DIMS)                                                                 \
    extern "C" __global__ void DIMS __launch_bounds__(DSA_TOPK_RES_THREADS, 1)                         \
        dsa_topk_resident_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) { \
        resident_body<CS>(scores, out, C, k);                                                         \
    }

DSA_TOPK_RES_KERNEL(1, )
DSA_TOPK_RES_KERNEL(2, __cluster_dims__(2, 1, 1))
DSA_TOPK_RES_KERNEL(4, __cluster_dims__(4, 1, 1))
