// The one-CTA top-k select of topk_onecta.cu (its header comment is the design), over any source of
// keys and any sink of members: dsa_topk_onecta runs it over a score row (OneRowSrc, OneRowOut);
// topk_split.cu runs it twice, over a slice of the row (its top-k as (key, index) candidates) and
// over the row's candidates (the final top-k). topk_model._one_select is the NumPy emulation.
//
// A source Src gives, for the whole block together (block-uniform trip counts):
//   Src::KEYS              keys a thread a batch (onecta: ONE_KEYS)
//   src.batches<PASS1>(f)  f(base, key[KEYS]) for every batch; key 0 past its end (never
//                          counted); PASS1: the first pass (onecta prefetches the row into L2 ahead)
//   src.index(base, j)     the position (0 .. n - 1 in the source) of key j of the batch at base
// A sink Out gives:
//   out.put(slot, pos, key)       member slot <- the source's position pos (whose key is key)
//   out.take_ties(T, Q, at, scan) the Q keys == T of lowest index at slots at .. at + Q - 1
//                                 (block-uniform; reads the row in index order)
//   out.fill(F, k)                slots F .. k - 1 hold no member
// DROP: +inf keys count towards k but are never members (the op's rule: a chosen non-finite score
// is -1); without DROP +inf is a key like any other (a slice's candidates must carry it).
#pragma once

#include "topk_common.cuh"
#include "topk_timeline.cuh"

// A CTA's threads: 1024 everywhere but where a source defines it before this header
// (topk_union_half.cu: 512, two CTAs an SM); every loop and search below is written for either.
#ifndef ONE_THREADS
#define ONE_THREADS 1024
#endif
#define ONE_WARPS (ONE_THREADS / 32)
#define ONE_CAP 2560                // buffered (key, index) entries of the threshold bin
#define ONE_NB0 4096                // digit 0: key bits 31..20
#define ONE_NB1 1024                // digit 1: key bits 19..10
#define ONE_NB2 1024                // digit 2: key bits 9..0
#define ONE_BIN_POSINF 4088         // digit 0 of +inf; the bin holds +inf alone (NaN maps to key 0)
#define ONE_VECS 4                  // float4 a thread a batch (64 KiB of loads a CTA)
#define ONE_AHEAD 3                 // pass 1: batches prefetched into L2 ahead of the one loaded
#define ONE_KEYS (4 * ONE_VECS)     // keys a thread a batch

struct OneShared {
    unsigned h0[ONE_NB0], h1[ONE_NB1], h2[ONE_NB2];
    unsigned buf_key[ONE_CAP], buf_idx[ONE_CAP];
    unsigned scan[ONE_WARPS];
    unsigned n_buf;                 // bin-b0 keys appended (may pass ONE_CAP: overflow)
    unsigned cnt;                   // members written through the shared counter
    unsigned found_bin, found_above;
};

// Exclusive prefix sum of v over the block in thread order (topk_common.cuh); ends with a barrier.
__device__ __forceinline__ unsigned one_block_scan(unsigned v, unsigned* scratch, unsigned* total) {
    return topk_block_scan<ONE_WARPS>(v, scratch, total);
}

// The bin of histogram h (NB bins, complete: called after a barrier) holding the kk-th largest
// counted key, and the count in the bins above it, into s->found_bin / found_above; (0, total)
// when fewer than kk are counted. Thread t owns bins [NB - P (t + 1), NB - P t), P = NB / ONE_THREADS, so
// thread order is descending bin order. Ends with a barrier: every thread may read the result.
template <int NB>
__device__ __forceinline__ void one_find(const unsigned* h, unsigned kk, OneShared* s) {
    constexpr unsigned P = NB / ONE_THREADS;
    static_assert(P * ONE_THREADS == NB, "whole bins a thread");
    const unsigned top = NB - P * threadIdx.x;
    unsigned mine = 0u;
#pragma unroll
    for (unsigned b = 1; b <= P; ++b) mine += h[top - b];
    unsigned total;
    unsigned before = one_block_scan(mine, s->scan, &total);
    if (total < kk) {
        if (threadIdx.x == 0) {
            s->found_bin = 0u;
            s->found_above = total;
        }
    } else if (before < kk && before + mine >= kk) {  // exactly one thread
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

// Element index of key j (< ONE_KEYS) of the thread's batch at `base` (float4 index for vec,
// element index otherwise): vec: float4 base + u T + tid, lane s of it; scalar: base + j T + tid.
__device__ __forceinline__ unsigned one_index(bool vec, unsigned base, unsigned j) {
    return vec ? 4u * (base + (j >> 2) * ONE_THREADS + threadIdx.x) + (j & 3u) : base + j * ONE_THREADS + threadIdx.x;
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The thread's keys of the batch at `base`; key 0 past the row's end (never counted or taken).
__device__ __forceinline__ void one_load(const float* __restrict__ row, unsigned C, bool vec, unsigned base,
                                         unsigned (&key)[ONE_KEYS]) {
    float v[ONE_KEYS];
    if (vec) {
        const float4* p = reinterpret_cast<const float4*>(row);
#pragma unroll
        for (unsigned u = 0; u < ONE_VECS; ++u) {
            const unsigned i = base + u * ONE_THREADS + threadIdx.x;
            const float4 x = 4u * i < C ? ld_nc_f32x4(p + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[4 * u] = x.x, v[4 * u + 1] = x.y, v[4 * u + 2] = x.z, v[4 * u + 3] = x.w;
        }
    } else {
#pragma unroll
        for (unsigned j = 0; j < ONE_KEYS; ++j) {
            const unsigned e = base + j * ONE_THREADS + threadIdx.x;
            v[j] = e < C ? ld_nc_f32(row + e) : 0.f;
        }
    }
#pragma unroll
    for (unsigned j = 0; j < ONE_KEYS; ++j) key[j] = one_index(vec, base, j) < C ? topk_key(v[j]) : 0u;
}

// f(base, key) for every batch of the row, the whole block together (the trip count is
// block-uniform, so warp intrinsics inside f see every lane). PREFETCH (pass 1, from HBM): batch
// b + ONE_AHEAD is prefetched into L2 while batch b is loaded, so ~4 batches (256 KiB) of the row
// are in flight an SM without the registers to hold them.
template <bool PREFETCH, class F>
__device__ __forceinline__ void one_batches(const float* __restrict__ row, unsigned C, bool vec, F&& f) {
    const unsigned n = vec ? C / 4u : C;
    const unsigned step = (vec ? ONE_VECS : ONE_KEYS) * ONE_THREADS;   // batch stride in float4 / elements
    const unsigned bytes = vec ? 16u : 4u;                            // of one unit of base
    if (PREFETCH) {
        // batches 1 .. ONE_AHEAD - 1 now (batch 0 is loaded at once); one unit a thread and u
        // (a warp covers 512 contiguous bytes in vec mode: 4 lines, one request each)
        for (unsigned b = 1; b < ONE_AHEAD; ++b)
#pragma unroll
            for (unsigned u = 0; u < ONE_VECS; ++u) {
                const unsigned i = b * step + u * ONE_THREADS * (vec ? 1u : 4u) + threadIdx.x * (vec ? 1u : 4u);
                if (i < n) prefetch_l2(reinterpret_cast<const char*>(row) + (size_t)i * bytes);
            }
    }
    for (unsigned base = 0; base < n; base += step) {
        if (PREFETCH) {
#pragma unroll
            for (unsigned u = 0; u < ONE_VECS; ++u) {
                const unsigned i = base + ONE_AHEAD * step + u * ONE_THREADS * (vec ? 1u : 4u) +
                                   threadIdx.x * (vec ? 1u : 4u);
                if (i < n) prefetch_l2(reinterpret_cast<const char*>(row) + (size_t)i * bytes);
            }
        }
        unsigned key[ONE_KEYS];
        one_load(row, C, vec, base, key);
        f(base, key);
    }
}

// Histograms and counters zeroed; ends with a barrier.
__device__ __forceinline__ void one_reset(OneShared& s) {
    for (unsigned b = threadIdx.x; b < ONE_NB0; b += ONE_THREADS) s.h0[b] = 0u;
    static_assert(ONE_NB1 % ONE_THREADS == 0 && ONE_NB2 == ONE_NB1, "whole bins a thread");
#pragma unroll
    for (unsigned b = 0; b < ONE_NB1; b += ONE_THREADS) {
        s.h1[b + threadIdx.x] = 0u;
        s.h2[b + threadIdx.x] = 0u;
    }
    if (threadIdx.x == 0) {
        s.n_buf = 0u;
        s.cnt = 0u;
    }
    __syncthreads();
}

// dsa_topk_onecta's source: the row of C scores itself, C % 4 == 0: float4 loads (vec).
struct OneRowSrc {
    static constexpr unsigned KEYS = ONE_KEYS;
    const float* __restrict__ row;
    unsigned C;
    bool vec;
    template <bool PASS1, class F>
    __device__ __forceinline__ void batches(F&& f) const {
        one_batches<PASS1>(row, C, vec, f);
    }
    __device__ __forceinline__ unsigned index(unsigned base, unsigned j) const { return one_index(vec, base, j); }
};

// dsa_topk_onecta's sink: the row's output, position = index; -1 past the members.
struct OneRowOut {
    const float* __restrict__ row;
    unsigned C;
    int* __restrict__ orow;
    __device__ __forceinline__ void put(unsigned slot, unsigned pos, unsigned) const { orow[slot] = (int)pos; }
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        topk_take_ties<ONE_WARPS>(row, 0u, C, T, Q, orow, at, scan);
    }
    __device__ __forceinline__ void fill(unsigned F, unsigned k) const {
        for (unsigned j = F + threadIdx.x; j < k; j += ONE_THREADS) orow[j] = -1;
    }
};

// The k best keys of src into out (the design: topk_onecta.cu). MARKS: the timeline probes of its
// phases (off where a kernel runs it a second time, so as not to overwrite the first run's marks).
template <bool DROP, bool MARKS, class Src, class Out>
__device__ __forceinline__ void one_select(const Src& src, const Out& out, unsigned k, OneShared& s) {
    constexpr unsigned NK = Src::KEYS;                 // keys a thread a batch
    const unsigned tid = threadIdx.x, lane = tid & 31u;

    // pass 1: digit 0 of every nonzero key
    src.template batches<true>([&](unsigned, const unsigned (&key)[NK]) {
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
    if (MARKS) TK_MARK(TK_READ);
    one_find<ONE_NB0>(s.h0, k, &s);
    if (MARKS) TK_MARK(TK_DIGIT0);
    const unsigned b0 = s.found_bin, G0 = s.found_above;
    const unsigned P = DROP ? s.h0[ONE_BIN_POSINF] : 0u;   // +inf keys (bin 4088 holds them alone)

    // pass 2: bins above b0 written out (their digit 0 > b0 >= 0 makes them nonzero); bin b0 buffered
    src.template batches<false>([&](unsigned base, const unsigned (&key)[NK]) {
        unsigned nm = 0u, nb = 0u;
#pragma unroll
        for (unsigned j = 0; j < NK; ++j) {
            const unsigned bin = key[j] >> 20;
            nm += (bin > b0 && (!DROP || key[j] != DSA_TOPK_KEY_POSINF)) ? 1u : 0u;
            nb += (key[j] != 0u && bin == b0) ? 1u : 0u;
        }
        const unsigned packed = nm | (nb << 16);       // a warp's counts are <= 1024 each: no carry
        if (__any_sync(FULL_MASK, packed != 0u)) {
            unsigned incl = topk_warp_inclusive_sum(packed);
            unsigned wm = 0u, wb = 0u;
            if (lane == 31u) {                         // incl of lane 31: the warp's totals
                wm = atomicAdd(&s.cnt, incl & 0xffffu);
                wb = atomicAdd(&s.n_buf, incl >> 16);
            }
            const unsigned excl = incl - packed;
            unsigned pm = __shfl_sync(FULL_MASK, wm, 31) + (excl & 0xffffu);
            unsigned pb = __shfl_sync(FULL_MASK, wb, 31) + (excl >> 16);
#pragma unroll
            for (unsigned j = 0; j < NK; ++j) {
                const unsigned bin = key[j] >> 20;
                if (bin > b0 && (!DROP || key[j] != DSA_TOPK_KEY_POSINF)) {
                    const unsigned e = src.index(base, j);   // before pm++, as onecta's orow[pm++] = e
                    out.put(pm++, e, key[j]);
                }
                if (key[j] != 0u && bin == b0) {
                    if (pb < ONE_CAP) {
                        s.buf_key[pb] = key[j];
                        s.buf_idx[pb] = src.index(base, j);
                    }
                    ++pb;
                }
            }
        }
    });
    __syncthreads();
    if (MARKS) TK_MARK(TK_PASS2);
    const unsigned nbuf = s.n_buf;
    const bool overflow = nbuf > ONE_CAP;

    // f(position, key) for every nonzero key of bin b0: the buffer, or the source again on
    // overflow. No warp intrinsics inside f (the buffer loop's trip count differs between lanes).
    auto for_bin = [&](auto&& f) {
        if (!overflow) {
            for (unsigned j = tid; j < nbuf; j += ONE_THREADS) f(s.buf_idx[j], s.buf_key[j]);
        } else {
            src.template batches<false>([&](unsigned base, const unsigned (&key)[NK]) {
#pragma unroll
                for (unsigned j = 0; j < NK; ++j)
                    if (key[j] != 0u && (key[j] >> 20) == b0) f(src.index(base, j), key[j]);
            });
        }
    };

    unsigned T = 0u, G = G0;
    if (b0 != 0u) {                                    // block-uniform
        const unsigned kk1 = k - G0;
        for_bin([&](unsigned, unsigned key) { atomicAdd(&s.h1[(key >> 10) & 0x3ffu], 1u); });
        __syncthreads();
        one_find<ONE_NB1>(s.h1, kk1, &s);
        if (MARKS) TK_MARK(TK_DIGIT1);
        const unsigned prefix = (b0 << 10) | s.found_bin;
        const unsigned kk2 = kk1 - s.found_above;
        G += s.found_above;
        for_bin([&](unsigned, unsigned key) {
            if ((key >> 10) == prefix) atomicAdd(&s.h2[key & 0x3ffu], 1u);
        });
        __syncthreads();
        one_find<ONE_NB2>(s.h2, kk2, &s);
        if (MARKS) TK_MARK(TK_DIGIT2);
        G += s.found_above;
        T = (prefix << 10) | s.found_bin;
    }
    // without DROP a threshold of +inf is a level like any other (its ties taken by index)
    const bool t_finite = b0 != 0u && (!DROP || T != DSA_TOPK_KEY_POSINF);
    const unsigned above = (!DROP || T < DSA_TOPK_KEY_POSINF) ? G - P : 0u;   // members > T (G counts +inf too)
    const unsigned Q = k - G;                          // keys == T to take (when T is finite)
    const unsigned E = t_finite ? s.h2[T & 0x3ffu] : 0u;   // keys == T in the source (all in bin b0)
    const bool take_all = t_finite && Q == E;
    if (MARKS) TK_MARK(TK_COUNTS);

    // write: bin b0's members through the counter (after pass 2's direct members)
    if (b0 != 0u) {
        for_bin([&](unsigned e, unsigned key) {
            if ((key > T && (!DROP || key != DSA_TOPK_KEY_POSINF)) || (take_all && key == T))
                out.put(atomicAdd(&s.cnt, 1u), e, key);
        });
    }
    // a partial quota of keys == T: the lowest indices, in index order, at slots above + rank
    if (t_finite && Q > 0u && Q < E) {                 // block-uniform
        out.take_ties(T, Q, above, s.scan);
    }
    const unsigned F = above + (t_finite ? Q : 0u);
    out.fill(F, k);
    if (MARKS) TK_MARK(TK_WRITE);
}
