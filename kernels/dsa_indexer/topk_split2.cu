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

#include "topk_onecta.cuh"

#define S2_VECS 2                       // float4 a thread a batch
#define S2_RING_BATCHES 4               // batches in the ring (3-4 in flight)
#define S2_RING_BYTES 131072            // S2_RING_BATCHES x S2_VECS x ONE_THREADS x 16 B, dynamic

static_assert(S2_RING_BYTES == S2_RING_BATCHES * S2_VECS * ONE_THREADS * 16, "the ring's bytes");

// 4 bytes global -> shared (cp.async.cg takes 16 B only; .ca: the scores are read-only here)
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// A source through the ring. PAIRS false: n scores at p (vec: p 16-B aligned; else 4-B copies),
// keys topk_key(score), payload base_idx + element. PAIRS true: n (key, index) uint2 at p (16-B
// aligned, n even), payload the index. KEYS keys a thread a batch.
template <bool PAIRS>
struct S2Src {
    static constexpr unsigned KEYS = PAIRS ? 2 * S2_VECS : 4 * S2_VECS;
    static constexpr unsigned PER = PAIRS ? 2u : 4u;        // keys a float4 slot
    static constexpr unsigned STEP = S2_VECS * ONE_THREADS; // float4 slots a batch
    const void* p;
    unsigned n;          // keys (elements or pairs)
    unsigned base_idx;   // scores: the row index of element 0
    bool vec;
    float4* ring;

    __device__ __forceinline__ unsigned nbatches() const { return (n + PER * STEP - 1u) / (PER * STEP); }
    // float4 slot (of the source) of key j of this thread's batch b, and its ring address
    __device__ __forceinline__ unsigned slot(unsigned b, unsigned j) const {
        return b * STEP + (j / PER) * ONE_THREADS + threadIdx.x;
    }
    __device__ __forceinline__ unsigned ring_slot(unsigned b, unsigned j) const {
        return ((b % S2_RING_BATCHES) * S2_VECS + j / PER) * ONE_THREADS + threadIdx.x;
    }
    // position of key j of batch b in the source
    __device__ __forceinline__ unsigned pos(unsigned b, unsigned j) const { return PER * slot(b, j) + j % PER; }

    __device__ __forceinline__ void issue(unsigned b) const {
#pragma unroll
        for (unsigned u = 0; u < S2_VECS; ++u) {
            const unsigned i = b * STEP + u * ONE_THREADS + threadIdx.x;
            float4* dst = ring + ((b % S2_RING_BATCHES) * S2_VECS + u) * ONE_THREADS + threadIdx.x;
            if (PAIRS || vec) {
                if (PER * i < n) cp_async16(dst, static_cast<const float4*>(p) + i);
            } else {
#pragma unroll
                for (unsigned s = 0; s < 4; ++s)
                    if (4u * i + s < n)
                        cp_async4(reinterpret_cast<float*>(dst) + s, static_cast<const float*>(p) + 4u * i + s);
            }
        }
        cp_async_commit();
    }

    // key j of batch b and its payload, from the ring (any j: a dynamic shared-memory address).
    // conv: the ring holds the converted keys (a held source after pass 1), not the scores.
    __device__ __forceinline__ void reload(unsigned b, unsigned j, bool conv, unsigned& key, unsigned& pay) const {
        if constexpr (PAIRS) {
            const uint2 v = reinterpret_cast<const uint2*>(ring + ring_slot(b, j))[j % 2u];
            key = v.x;
            pay = v.y;
        } else {
            const unsigned w = reinterpret_cast<const unsigned*>(ring + ring_slot(b, j))[j % 4u];
            key = conv ? w : topk_key(__uint_as_float(w));
            pay = base_idx + pos(b, j);
        }
    }

    // f(b, key[KEYS], conv) for every batch b, the whole block together (block-uniform trip
    // count); key 0 past the end. Pass 1 (PASS1) streams the source through the ring; a source
    // of at most S2_RING_BATCHES batches stays there and pass 1 writes its converted keys back
    // (scores only), so every later pass reads keys from shared memory (held) and converts nothing.
    template <bool PASS1, class F>
    __device__ __forceinline__ void batches(F&& f) const {
        const unsigned nb = nbatches();
        const bool fits = nb <= S2_RING_BATCHES;
        const bool held = !PASS1 && fits;
        if (!held) {
#pragma unroll
            for (unsigned b = 0; b < S2_RING_BATCHES; ++b) issue(b);
        }
        for (unsigned b = 0; b < nb; ++b) {
            if (!held) cp_async_wait_group<S2_RING_BATCHES - 1>();   // groups 0 .. b complete
            unsigned key[KEYS];
#pragma unroll
            for (unsigned u = 0; u < S2_VECS; ++u) {
                float4* at = ring + ((b % S2_RING_BATCHES) * S2_VECS + u) * ONE_THREADS + threadIdx.x;
                const uint4 x = *reinterpret_cast<const uint4*>(at);
                const unsigned i = b * STEP + u * ONE_THREADS + threadIdx.x;
                if constexpr (PAIRS) {
                    key[2 * u] = 2u * i < n ? x.x : 0u;
                    key[2 * u + 1] = 2u * i + 1u < n ? x.z : 0u;
                } else {
                    const unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                    for (unsigned s = 0; s < 4; ++s)
                        key[4 * u + s] = 4u * i + s >= n ? 0u : held ? w[s] : topk_key(__uint_as_float(w[s]));
                    if (PASS1 && fits)   // only this thread reads these slots: no barrier
                        *reinterpret_cast<uint4*>(at) = make_uint4(key[4 * u], key[4 * u + 1], key[4 * u + 2],
                                                                   key[4 * u + 3]);
                }
            }
            f(b, key, held);
            if (!held) issue(b + S2_RING_BATCHES);   // into b's slots: f is done with them
        }
        if (!held) cp_async_wait_all();
    }
};

// The bin of histogram h (NB bins, complete) holding the kk-th largest counted key and the count
// above it, into s->found_bin / found_above ((0, total) when fewer than kk): one_find's answer with
// 2 block barriers. Thread t owns bins [NB - PB (t + 1), NB - PB t) (descending bin order is thread
// order); each warp scans its lanes, lane 31 publishes the warp's total; after one barrier every
// warp reads the 32 totals and scans them itself, so each thread knows its exclusive prefix and
// the one thread holding the crossing writes the answer. Ends with a barrier. s->scan: free on
// entry (every earlier reader passed a barrier since), free again on exit.
template <int NB>
__device__ __forceinline__ void s2_find(const unsigned* h, unsigned kk, OneShared* s) {
    constexpr unsigned PB = NB / ONE_THREADS;
    static_assert(PB * ONE_THREADS == NB && (PB == 1 || PB == 4), "1 or 4 bins a thread");
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned top = NB - PB * threadIdx.x;
    unsigned c[PB];                      // c[b - 1] = h[top - b]: descending
    if constexpr (PB == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(h + top - 4u);
        c[0] = v.w, c[1] = v.z, c[2] = v.y, c[3] = v.x;
    } else {
        c[0] = h[top - 1u];
    }
    unsigned mine = 0u;
#pragma unroll
    for (unsigned b = 0; b < PB; ++b) mine += c[b];
    const unsigned incl = topk_warp_inclusive_sum(mine);
    if (lane == 31u) s->scan[warp] = incl;
    __syncthreads();
    const unsigned wv = s->scan[lane];   // ONE_WARPS == 32: one warp total a lane
    const unsigned wincl = topk_warp_inclusive_sum(wv);
    const unsigned total = __shfl_sync(FULL_MASK, wincl, 31);
    unsigned before = __shfl_sync(FULL_MASK, wincl - wv, warp) + incl - mine;
    if (total < kk) {
        if (threadIdx.x == 0) {
            s->found_bin = 0u;
            s->found_above = total;
        }
    } else if (before < kk && before + mine >= kk) {   // exactly one thread
#pragma unroll
        for (unsigned b = 0; b < PB; ++b) {
            if (before + c[b] >= kk) {
                s->found_bin = top - 1u - b;
                s->found_above = before;
                break;
            }
            before += c[b];
        }
    }
    __syncthreads();
}
static_assert(ONE_WARPS == 32, "s2_find reads one warp total a lane");

// For every hit of this lane's batch (bit j of hits), in increasing j: g(key, payload, j).
template <class Src, class G>
__device__ __forceinline__ void s2_hits(const Src& src, unsigned b, bool conv, unsigned hits, G&& g) {
    while (hits) {
        const unsigned j = __ffs(hits) - 1u;
        hits &= hits - 1u;
        unsigned key, pay;
        src.reload(b, j, conv, key, pay);
        g(key, pay, j);
    }
}

// The k best keys of src into out: one_select's decisions exactly (topk_onecta.cuh's design; DROP
// the same), with pass 2 over the hits only and s2_find. Out: put(slot, payload, key),
// take_ties(T, Q, at, scan), fill(F, k). MARKS: 1 stage 1's marks (read, digit0, pass2, digit1,
// digit2, counts, write); 2 the final stage's (fread, fpass2, fdigits); 0 none.
template <bool DROP, int MARKS, class Src, class Out>
__device__ __forceinline__ void s2_select(const Src& src, const Out& out, unsigned k, OneShared& s) {
    constexpr unsigned NK = Src::KEYS;
    const unsigned lane = threadIdx.x & 31u;

    // pass 1: digit 0 of every nonzero key (one add a warp when its keys share one bin)
    src.template batches<true>([&](unsigned, const unsigned (&key)[NK], bool) {
        const unsigned lead = __shfl_sync(FULL_MASK, key[0] >> 20, 0);
        bool same = true;
#pragma unroll
        for (unsigned j = 0; j < NK; ++j) same = same && key[j] != 0u && (key[j] >> 20) == lead;
        if (__all_sync(FULL_MASK, same)) {
            if (lane == 0) atomicAdd(&s.h0[lead], 32u * NK);
        } else {
#pragma unroll
            for (unsigned j = 0; j < NK; ++j)
                if (key[j] != 0u) atomicAdd(&s.h0[key[j] >> 20], 1u);
        }
    });
    __syncthreads();
    if (MARKS == 1) TK_MARK(TK_READ);
    if (MARKS == 2) TK_MARK(TK_FREAD);
    s2_find<ONE_NB0>(s.h0, k, &s);
    if (MARKS == 1) TK_MARK(TK_DIGIT0);
    const unsigned b0 = s.found_bin, G0 = s.found_above;
    const unsigned P = DROP ? s.h0[ONE_BIN_POSINF] : 0u;   // +inf keys (bin 4088 holds them alone)

    // pass 2: the bins above b0 written out (digit 0 > b0 >= 0: nonzero), bin b0 buffered.
    // A lane's members take slots pm.., its bin keys pb.. (one warp scan, one atomic each a warp).
    src.template batches<false>([&](unsigned b, const unsigned (&key)[NK], bool conv) {
        unsigned mm = 0u, bm = 0u;
#pragma unroll
        for (unsigned j = 0; j < NK; ++j) {
            const unsigned bin = key[j] >> 20;
            if (bin > b0 && (!DROP || key[j] != DSA_TOPK_KEY_POSINF)) mm |= 1u << j;
            if (key[j] != 0u && bin == b0) bm |= 1u << j;
        }
        const unsigned packed = __popc(mm) | (__popc(bm) << 16);   // <= 1024 each a warp: no carry
        if (__any_sync(FULL_MASK, packed != 0u)) {
            const unsigned incl = topk_warp_inclusive_sum(packed);
            unsigned wm = 0u, wb = 0u;
            if (lane == 31u) {
                wm = atomicAdd(&s.cnt, incl & 0xffffu);
                wb = atomicAdd(&s.n_buf, incl >> 16);
            }
            const unsigned excl = incl - packed;
            unsigned pm = __shfl_sync(FULL_MASK, wm, 31) + (excl & 0xffffu);
            unsigned pb = __shfl_sync(FULL_MASK, wb, 31) + (excl >> 16);
            s2_hits(src, b, conv, mm | bm, [&](unsigned kj, unsigned pay, unsigned j) {
                if ((mm >> j) & 1u) {
                    out.put(pm++, pay, kj);
                } else {
                    if (pb < ONE_CAP) {
                        s.buf_key[pb] = kj;
                        s.buf_idx[pb] = pay;
                    }
                    ++pb;
                }
            });
        }
    });
    __syncthreads();
    if (MARKS == 1) TK_MARK(TK_PASS2);
    if (MARKS == 2) TK_MARK(TK_FPASS2);
    const unsigned nbuf = s.n_buf;
    const bool overflow = nbuf > ONE_CAP;

    // f(payload, key) for every nonzero key of bin b0: the buffer, or the source again on
    // overflow. No warp intrinsics inside f (the trip counts differ between lanes).
    auto for_bin = [&](auto&& f) {
        if (!overflow) {
            for (unsigned j = threadIdx.x; j < nbuf; j += ONE_THREADS) f(s.buf_idx[j], s.buf_key[j]);
        } else {
            src.template batches<false>([&](unsigned b, const unsigned (&key)[NK], bool conv) {
                unsigned bm = 0u;
#pragma unroll
                for (unsigned j = 0; j < NK; ++j)
                    if (key[j] != 0u && (key[j] >> 20) == b0) bm |= 1u << j;
                s2_hits(src, b, conv, bm, [&](unsigned kj, unsigned pay, unsigned) { f(pay, kj); });
            });
        }
    };

    unsigned T = 0u, G = G0;
    if (b0 != 0u) {                                    // block-uniform
        const unsigned kk1 = k - G0;
        for_bin([&](unsigned, unsigned key) { atomicAdd(&s.h1[(key >> 10) & 0x3ffu], 1u); });
        __syncthreads();
        s2_find<ONE_NB1>(s.h1, kk1, &s);
        if (MARKS == 1) TK_MARK(TK_DIGIT1);
        const unsigned prefix = (b0 << 10) | s.found_bin;
        const unsigned kk2 = kk1 - s.found_above;
        G += s.found_above;
        for_bin([&](unsigned, unsigned key) {
            if ((key >> 10) == prefix) atomicAdd(&s.h2[key & 0x3ffu], 1u);
        });
        __syncthreads();
        s2_find<ONE_NB2>(s.h2, kk2, &s);
        if (MARKS == 1) TK_MARK(TK_DIGIT2);
        G += s.found_above;
        T = (prefix << 10) | s.found_bin;
    }
    if (MARKS == 2) TK_MARK(TK_FDIGITS);
    const bool t_finite = b0 != 0u && (!DROP || T != DSA_TOPK_KEY_POSINF);
    const unsigned above = (!DROP || T < DSA_TOPK_KEY_POSINF) ? G - P : 0u;   // members > T (G counts +inf too)
    const unsigned Q = k - G;                          // keys == T to take (when T is finite)
    const unsigned E = t_finite ? s.h2[T & 0x3ffu] : 0u;   // keys == T in the source (all in bin b0)
    const bool take_all = t_finite && Q == E;
    if (MARKS == 1) TK_MARK(TK_COUNTS);

    if (b0 != 0u) {
        for_bin([&](unsigned pay, unsigned key) {
            if ((key > T && (!DROP || key != DSA_TOPK_KEY_POSINF)) || (take_all && key == T))
                out.put(atomicAdd(&s.cnt, 1u), pay, key);
        });
    }
    if (t_finite && Q > 0u && Q < E) {                 // block-uniform
        out.take_ties(T, Q, above, s.scan);
    }
    const unsigned F = above + (t_finite ? Q : 0u);
    out.fill(F, k);
    if (MARKS == 1) TK_MARK(TK_WRITE);
}

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

// Stage 2's sink: the row's output; a member's payload is its row index.
struct S2FinalOut {
    const float* __restrict__ row;
    unsigned C;
    int* __restrict__ orow;
    __device__ __forceinline__ void put(unsigned slot, unsigned pay, unsigned) const { orow[slot] = (int)pay; }
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        topk_take_ties<ONE_WARPS>(row, 0u, C, T, Q, orow, at, scan);
    }
    __device__ __forceinline__ void fill(unsigned F, unsigned k) const {
        for (unsigned j = F + threadIdx.x; j < k; j += ONE_THREADS) orow[j] = -1;
    }
};

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_split2(const float* __restrict__ scores, int* __restrict__ out, uint2* ws, unsigned* count, int C_,
                    int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned last;
    extern __shared__ __align__(16) float4 ring[];
    const unsigned r = blockIdx.x, P = gridDim.x, m = blockIdx.y;
    TK_ENTER(r);
    const unsigned C = (unsigned)C_, k = (unsigned)k_, kp = (k + 3u) & ~3u;
    const float* row = scores + (size_t)m * C;
    unsigned lo, hi;
    split_slice(C, P, r, lo, hi);
    uint2* seg = ws + ((size_t)m * P + r) * kp;
    one_reset(s);

    // stage 1: the slice's top k as candidates (+inf kept as a key: DROP false)
    s2_select<false, 1>(S2Src<false>{row + lo, hi - lo, lo, (C & 3u) == 0u, ring}, S2CandOut{row, lo, hi, kp, seg},
                        k, s);
    if (!split_last_cta(count, m, P, &last)) {
        TK_MARK(TK_EXIT);
        return;
    }

    // stage 2: the row's k best of its P kp candidate pairs (read by cp.async.cg: L2, where the
    // other CTAs' fenced writes are)
    TK_MARK(TK_FSTART);
    one_reset(s);
    s2_select<true, 2>(S2Src<true>{ws + (size_t)m * P * kp, P * kp, 0u, true, ring},
                       S2FinalOut{row, C, out + (size_t)m * k}, k, s);
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}
