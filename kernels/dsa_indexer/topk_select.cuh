// The one-CTA select of the split top-k designs over any source of (key, payload) pairs
// (topk_split2.cu's radix_split2 / radix_sample / radix_share, topk_union.cu's radix_union):
// s2_select, its sources (S2Src: a row or a slice through the cp.async ring; SmpBufSrc: pairs
// held in shared memory) and its row sinks (S2FinalOut; ShrFinalOut, whose partial tie level is
// taken from a union in shared memory). The design and its measurements: topk_split2.cu's header
// and TOPK_NOTES.md; topk_model._one_select emulates s2_select.
#pragma once

#include "topk_onecta.cuh"

#define S2_VECS 2                       // float4 a thread a batch
#define S2_RING_BATCHES 4               // batches in the ring (3-4 in flight)
#ifndef S2_RING_BYTES                   // a source of 512-thread CTAs defines its own (65536)
#define S2_RING_BYTES 131072            // S2_RING_BATCHES x S2_VECS x ONE_THREADS x 16 B, dynamic
#endif

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

    // batch b's 128-B lines into L2 (scores only: the sample kernel's look-ahead); a batch is
    // STEP float4 = 256 lines, one for each of the first 256 threads
    __device__ __forceinline__ void prefetch(unsigned b) const {
        static_assert(!PAIRS && STEP * 16u / 128u <= ONE_THREADS, "one line a thread at most");
        const unsigned line = b * STEP * 16u / 128u + threadIdx.x;    // 128-B line of the source
        if (threadIdx.x < STEP * 16u / 128u && 32u * line < n)
            prefetch_l2(static_cast<const float*>(p) + 32u * line);
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

// For each target i < NT: the bin holding its kk[i]-th largest counted key and the count above
// it, into *bin[i] / *above[i] ((0, total) when fewer than kk[i]), from this thread's counts
// c[i][b] = the count of bin top - 1 - b (descending), thread t owning bins [NB - PB (t + 1),
// NB - PB t), so that descending bin order is thread order: one_find's answer with 2 block
// barriers, whatever NT. Each warp scans its lanes, lane 31 publishes the warp's total; after one
// barrier every warp reads the ONE_WARPS totals (a lane each, 0 past them) and scans them itself, so
// each thread knows its exclusive prefix and the one thread holding the crossing writes the answer.
// Ends with a barrier. scan (NT x ONE_WARPS words): free on entry (every earlier reader passed a
// barrier since), free again on exit.
template <int NB, int NT>
__device__ __forceinline__ void s2_find_counts(const unsigned (&c)[NT][NB / ONE_THREADS], const unsigned (&kk)[NT],
                                               unsigned* scan, unsigned* const (&bin)[NT],
                                               unsigned* const (&above)[NT]) {
    constexpr unsigned PB = NB / ONE_THREADS;
    static_assert(PB * ONE_THREADS == NB && (PB == 1 || PB == 2 || PB == 4 || PB == 8), "1, 2, 4 or 8 bins a thread");
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned top = NB - PB * threadIdx.x;
    unsigned mine[NT], incl[NT];
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        mine[i] = 0u;
#pragma unroll
        for (unsigned b = 0; b < PB; ++b) mine[i] += c[i][b];
        incl[i] = topk_warp_inclusive_sum(mine[i]);
        if (lane == 31u) scan[ONE_WARPS * i + warp] = incl[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        const unsigned wv = lane < ONE_WARPS ? scan[ONE_WARPS * i + lane] : 0u;   // one warp total a lane
        const unsigned wincl = topk_warp_inclusive_sum(wv);
        const unsigned total = __shfl_sync(FULL_MASK, wincl, 31);
        unsigned before = __shfl_sync(FULL_MASK, wincl - wv, warp) + incl[i] - mine[i];
        if (total < kk[i]) {
            if (threadIdx.x == 0) {
                *bin[i] = 0u;
                *above[i] = total;
            }
        } else if (before < kk[i] && before + mine[i] >= kk[i]) {   // exactly one thread
#pragma unroll
            for (unsigned b = 0; b < PB; ++b) {
                if (before + c[i][b] >= kk[i]) {
                    *bin[i] = top - 1u - b;
                    *above[i] = before;
                    break;
                }
                before += c[i][b];
            }
        }
    }
    __syncthreads();
}

// s2_find_counts over histograms h[i] (NB bins each, complete) in this CTA's shared memory.
template <int NB, int NT>
__device__ __forceinline__ void s2_find_n(const unsigned* const (&h)[NT], const unsigned (&kk)[NT], unsigned* scan,
                                          unsigned* const (&bin)[NT], unsigned* const (&above)[NT]) {
    constexpr unsigned PB = NB / ONE_THREADS;
    const unsigned top = NB - PB * threadIdx.x;
    unsigned c[NT][PB];   // c[i][b - 1] = h[i][top - b]: descending
#pragma unroll
    for (int i = 0; i < NT; ++i) {
        if constexpr (PB >= 4) {                       // 4 or 8 bins: one or two uint4
#pragma unroll
            for (unsigned q = 0; q < PB / 4u; ++q) {
                const uint4 v = *reinterpret_cast<const uint4*>(h[i] + top - 4u * (q + 1u));
                c[i][4 * q] = v.w, c[i][4 * q + 1] = v.z, c[i][4 * q + 2] = v.y, c[i][4 * q + 3] = v.x;
            }
        } else if constexpr (PB == 2) {
            const uint2 v = *reinterpret_cast<const uint2*>(h[i] + top - 2u);
            c[i][0] = v.y, c[i][1] = v.x;
        } else {
            c[i][0] = h[i][top - 1u];
        }
    }
    s2_find_counts<NB, NT>(c, kk, scan, bin, above);
}

// s2_find_n for one target: into s->found_bin / found_above, s->scan the scratch.
template <int NB>
__device__ __forceinline__ void s2_find(const unsigned* h, unsigned kk, OneShared* s) {
    const unsigned* const hs[1] = {h};
    const unsigned ks[1] = {kk};
    unsigned* const bins[1] = {&s->found_bin};
    unsigned* const aboves[1] = {&s->found_above};
    s2_find_n<NB, 1>(hs, ks, s->scan, bins, aboves);
}
static_assert(ONE_WARPS <= 32, "s2_find reads one warp total a lane");

// s2_find's answer (found_bin, found_above; (0, total) when fewer than kk are counted; nothing
// written when kk is 0, as there) found by warp 0 alone while the other warps wait at the closing
// barrier. Why: s2_find's two block barriers, with 1024 threads each running two 5-shuffle scans,
// took 0.59 us over 4096 bins and 0.78 over 1024 in radix_union_own's H200 timeline at M = 32
// (ec9fb09, reports/2026-12-07-dsa_select-h200-175257): the work is a few thousand counts, the
// cost the block's barriers and its shuffles through the MIO queue. Here the bins go in chunks of
// 128 from the top, one uint4 a lane (4 bins; a warp's LDS.128 of 512 contiguous bytes, no bank
// conflict) summed by one redux a chunk; the chunk holding the kk-th key follows from the chunk
// counts (warp-uniform), then the lane from one suffix scan of its 4-bin sums over that chunk, and
// the bin from that lane's 4 counts. One block barrier. h 16-B aligned.
template <int NB>
__device__ __forceinline__ void s2_find_warp(const unsigned* h, unsigned kk, OneShared* s) {
    constexpr unsigned CHUNK = 128u, NCH = NB / CHUNK;
    static_assert(NCH * CHUNK == NB && NCH >= 1u, "whole chunks of 128 bins");
    if (threadIdx.x < 32u) {
        const unsigned lane = threadIdx.x;
        unsigned above = 0u, chunk = NCH;              // chunk NCH: not found (fewer than kk counted)
#pragma unroll 8
        for (unsigned c = NCH; c-- > 0u;) {            // descending: the top chunk first
            const uint4 v = *reinterpret_cast<const uint4*>(h + c * CHUNK + 4u * lane);
            const unsigned n = __reduce_add_sync(FULL_MASK, v.x + v.y + v.z + v.w);
            if (chunk == NCH) {                        // warp-uniform
                if (above + n >= kk) chunk = c;
                else above += n;
            }
        }
        if (chunk == NCH) {
            if (lane == 0u) {
                s->found_bin = 0u;
                s->found_above = above;
            }
        } else {
            const uint4 v = *reinterpret_cast<const uint4*>(h + chunk * CHUNK + 4u * lane);
            const unsigned mine = v.x + v.y + v.z + v.w;
            unsigned incl = mine;                      // this lane's bins and every higher lane's
#pragma unroll
            for (unsigned o = 1; o < 32u; o <<= 1) {
                const unsigned y = __shfl_down_sync(FULL_MASK, incl, o);
                if (lane + o < 32u) incl += y;
            }
            unsigned before = above + incl - mine;     // counted in the bins above this lane's 4
            if (before < kk && before + mine >= kk) {  // exactly one lane
                const unsigned c4[4] = {v.w, v.z, v.y, v.x};   // descending bins 4 lane + 3 .. 4 lane
#pragma unroll
                for (unsigned i = 0; i < 4u; ++i) {
                    if (before + c4[i] >= kk) {
                        s->found_bin = chunk * CHUNK + 4u * lane + 3u - i;
                        s->found_above = before;
                        break;
                    }
                    before += c4[i];
                }
            }
        }
    }
    __syncthreads();
}

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

// The partial tie take from bin b0's buffer when it did not overflow (it then holds every key == T
// of the source with its payload, the row index): the Q lowest payloads among its keys == T at
// slots at .. at + Q - 1 through out.put. That is what out.take_ties writes by re-reading the row in
// index order: over the row's slice (stage 1), trivially; over the candidates of P slices or a union
// of share groups (the finals), by the argument in ShrFinalOut's comment (each slice hands on its
// lowest-index keys == T, at least as many as the row can take from it). The payloads set bits of a
// bitmap over a window of ONE_NB0 x 32 indices from the lowest tie (s.h0: free once digit 0's
// search has been read), ranked by one block scan; windows follow until Q are taken (one, unless
// the ties span more than 131072 indices). Why: the DSA layer's quantized score rows cut a level at
// the k-th in most rows, and the take by index order costs one CTA a pass over the whole row in
// the final (radix_split2 paid ~14 us of its 32.5 in the pooled layer step: TOPK_NOTES.md).
// Block-uniform; 4 barriers and a block scan a window.
template <class Out>
__device__ __forceinline__ void s2_take_buffered(unsigned T, unsigned Q, unsigned at, unsigned nbuf, const Out& out,
                                                 OneShared& s) {
    constexpr unsigned WBITS = ONE_NB0 * 32u;
    constexpr unsigned WV = ONE_NB0 / (4u * ONE_THREADS);   // uint4 of bitmap words a thread: 1 (2 at 512 threads)
    static_assert(WV * 4u * ONE_THREADS == ONE_NB0 && WV >= 1u, "whole uint4 of bitmap words a thread");
    __syncthreads();                                   // every thread past its reads of s.found_bin
    if (threadIdx.x == 0) s.found_bin = ~0u;
    __syncthreads();
    unsigned lo = ~0u;
    for (unsigned j = threadIdx.x; j < nbuf; j += ONE_THREADS)
        if (s.buf_key[j] == T) lo = min(lo, s.buf_idx[j]);
    lo = __reduce_min_sync(FULL_MASK, lo);
    if ((threadIdx.x & 31u) == 0u && lo != ~0u) atomicMin(&s.found_bin, lo);
    __syncthreads();
    unsigned w0 = s.found_bin, taken = 0u;
    while (taken < Q) {                                // block-uniform: taken adds the scans' totals
#pragma unroll
        for (unsigned q = 0; q < WV; ++q) reinterpret_cast<uint4*>(s.h0)[WV * threadIdx.x + q] = make_uint4(0u, 0u, 0u, 0u);
        __syncthreads();
        for (unsigned j = threadIdx.x; j < nbuf; j += ONE_THREADS) {
            const unsigned d = s.buf_idx[j] - w0;      // wraps past WBITS below the window
            if (s.buf_key[j] == T && d < WBITS) atomicOr(&s.h0[d >> 5], 1u << (d & 31u));
        }
        __syncthreads();
        unsigned w[4 * WV], n = 0u;                    // this thread's words 4 WV t .. 4 WV t + 4 WV - 1
#pragma unroll
        for (unsigned q = 0; q < WV; ++q) {
            const uint4 v = reinterpret_cast<const uint4*>(s.h0)[WV * threadIdx.x + q];
            w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
            const unsigned nq = __popc(v.x) + __popc(v.y) + __popc(v.z) + __popc(v.w);
            n = q == 0u ? nq : n + nq;
        }
        unsigned total;                                // the scan's barriers also free s.h0 for the next window
        unsigned r = taken + topk_block_scan<ONE_WARPS>(n, s.scan, &total);
#pragma unroll
        for (unsigned i = 0; i < 4u * WV; ++i) {
            for (unsigned bits = w[i]; bits != 0u && r < Q; bits &= bits - 1u, ++r)
                out.put(at + r, w0 + 32u * (4u * WV * threadIdx.x + i) + (__ffs(bits) - 1u), T);
        }
        taken += total;
        w0 += WBITS;
    }
}

// The k best keys of src into out: one_select's decisions exactly (topk_onecta.cuh's design; DROP
// the same), with pass 2 over the hits only and s2_find. Out: put(slot, payload, key),
// take_ties(T, Q, at, scan) (a partial tie level when bin b0's buffer overflowed; else
// s2_take_buffered through put), fill(F, k). MARKS: 1 stage 1's marks (read, digit0, pass2, digit1,
// digit2, counts, write); 2 the final stage's (fread, fpass2, fdigits); 0 none. Returns T, the k-th
// key (0 when fewer than k nonzero keys): dsa_topk_share tests its union with it.
template <bool DROP, int MARKS, class Src, class Out>
__device__ __forceinline__ unsigned s2_select(const Src& src, const Out& out, unsigned k, OneShared& s) {
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
        if (!overflow)
            s2_take_buffered(T, Q, above, nbuf, out, s);
        else
            out.take_ties(T, Q, above, s.scan);
    }
    const unsigned F = above + (t_finite ? Q : 0u);
    out.fill(F, k);
    if (MARKS == 1) TK_MARK(TK_WRITE);
    return T;                                          // the k-th key; 0 when fewer than k nonzero keys
}

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

// The buffer as a held source of (key, row index) pairs: entry (b KEYS + j) T + t is key j of
// thread t's batch b (consecutive threads read consecutive pairs).
struct SmpBufSrc {
    static constexpr unsigned KEYS = 4;
    const uint2* buf;
    unsigned n;
    __device__ __forceinline__ unsigned at(unsigned b, unsigned j) const {
        return (b * KEYS + j) * ONE_THREADS + threadIdx.x;
    }
    template <bool PASS1, class F>
    __device__ __forceinline__ void batches(F&& f) const {
        const unsigned nb = (n + KEYS * ONE_THREADS - 1u) / (KEYS * ONE_THREADS);
        for (unsigned b = 0; b < nb; ++b) {
            unsigned key[KEYS];
#pragma unroll
            for (unsigned j = 0; j < KEYS; ++j) key[j] = at(b, j) < n ? buf[at(b, j)].x : 0u;
            f(b, key, true);
        }
    }
    __device__ __forceinline__ void reload(unsigned b, unsigned j, bool, unsigned& key, unsigned& pay) const {
        const uint2 v = buf[at(b, j)];
        key = v.x;
        pay = v.y;
    }
};

// dsa_topk_share's final sink: S2FinalOut with the tie take over the union u (shared memory)
// instead of the row. Exact: the union holds every key of the row >= T from the type-H / buffered
// segments, and from a segment holding its slice's k best (lower index first among equal keys)
// that slice's lowest-index keys == T, at least as many as the row can take from it (the row takes
// at most k - (its keys > T) <= k - (the slice's keys > T) of them), so the Q lowest indices among
// the union's keys == T are the row's. The union's ties gathered into s.buf_idx (free once the
// select's bin passes are done; ONE_CAP entries), each ranked by the count of lower indices (E^2 /
// 1024 compares a thread, E the union's keys == T); more than ONE_CAP: the row's index-order take.
struct ShrFinalOut {
    S2FinalOut row_out;
    const uint2* u;
    unsigned nu;
    unsigned* list;       // s.buf_idx
    unsigned* nlist;      // a free shared word (s.n_buf: the select's counts are read by now)
    __device__ __forceinline__ void put(unsigned slot, unsigned pay, unsigned key) const { row_out.put(slot, pay, key); }
    __device__ __forceinline__ void fill(unsigned F, unsigned k) const { row_out.fill(F, k); }
    __device__ __forceinline__ void take_ties(unsigned T, unsigned Q, unsigned at, unsigned* scan) const {
        __syncthreads();                               // every thread past the select's reads of s.n_buf
        if (threadIdx.x == 0) *nlist = 0u;
        __syncthreads();
        for (unsigned j = threadIdx.x; j < nu; j += ONE_THREADS) {
            const uint2 v = u[j];
            if (v.x == T) {
                const unsigned slot = atomicAdd(nlist, 1u);
                if (slot < ONE_CAP) list[slot] = v.y;
            }
        }
        __syncthreads();
        const unsigned E = *nlist;
        if (E > ONE_CAP) {                             // block-uniform
            row_out.take_ties(T, Q, at, scan);
            return;
        }
        for (unsigned i = threadIdx.x; i < E; i += ONE_THREADS) {
            const unsigned e = list[i];
            unsigned rank = 0u;
            for (unsigned j = 0; j < E; ++j) rank += list[j] < e;   // indices are distinct
            if (rank < Q) row_out.orow[at + rank] = (int)e;
        }
    }
};
