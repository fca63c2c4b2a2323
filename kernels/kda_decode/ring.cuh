/*
KDA decode step: the ring template that the ring designs (ring32k_reread.cu, bulk32k_*.cu, ...) and
the fused convolution (fused_conv_bulk_early_pdl.cu) instantiate. The op and layouts: kda_common.cuh;
what was measured with it and dropped: NOTES.md.
*/
#ifndef KDA_RING_CUH
#define KDA_RING_CUH

#include "kda_common.cuh"
#include "kda_timeline.cuh"
#include "short_conv.cuh"

// ring: persistent CTAs, a cp.async or bulk-copy ring of STAGES tiles, with the per-tile overhead
// cut down.
//
// Why not pipelined_cpasync: its BF16 SASS spends ~780 instructions per warp per 16 KiB tile, of
// which ~180 touch the state. A run-time-strided copy loop costs ~300 (integer division and
// remainder handling per chunk), every warp recomputes the q/k norms, and 16 partials per thread
// go through two shuffle rounds. With a BF16 state at ~4 TB/s that is most of the SM's issue
// budget, so the loads of the next tiles issue late. Here:
//   - thread (cv, rg) copies exactly the RPT 16-byte chunks it later reads, at compile-time offsets
//     from two base addresses fixed for the whole kernel: RPT LDGSTS and a few adds per tile;
//   - the per-row scalars (alpha, kn, alpha*kn, alpha*qn) are computed once per tile by KDIM
//     threads into shared memory (the norms by those 4 warps only), then read as one float4 a row;
//   - the tile shape is a template: 16 KiB or 32 KiB tiles, 128 or 256 threads, so the per-tile
//     costs (barriers, norms, cross-warp sums) are spread over more bytes.
// KEEP (RingKeep below): HOLD and HOLD_EARLY keep the faded tile in registers between the reduction
// and the write (5.5 instructions per BF16 element); REREAD re-reads and re-decodes it from the
// stage (about 1.4 more per element, but no registers, so a thread can own 16 rows and the column
// sums need fewer shuffles). The mode also decides when a stage may be refilled (see RingKeep).
// LOADER: per-thread 16-byte cp.async, or the bulk copy engine (one instruction per tile row).

template <typename T, int COLS_, int THREADS_>
struct RingTile {
    static constexpr int THREADS = THREADS_;
    static constexpr int COLS = COLS_;
    static constexpr int SLICES = VDIM / COLS;
    static constexpr int VEC = 16 / (int)sizeof(T);   // columns per 16-byte chunk
    static constexpr int CV = COLS / VEC;             // chunks per tile row
    static constexpr int NRG = THREADS / CV;          // row groups; thread rows are rg + NRG * i
    static constexpr int RPT = KDIM / NRG;            // rows per thread
    static constexpr int WARPS = THREADS / 32;
    static constexpr int ROW = COLS * (int)sizeof(T); // bytes of one tile row in the stage
    static constexpr int TILE = KDIM * ROW;
    static constexpr int OFF_Q = TILE;                // 128 bf16
    static constexpr int OFF_K = OFF_Q + KDIM * 2;    // 128 bf16
    static constexpr int OFF_G = OFF_K + KDIM * 2;    // 128 float
    static constexpr int OFF_V = OFF_G + KDIM * 4;    // COLS bf16
    static constexpr int BYTES = OFF_V + COLS * 2;
    static constexpr int VCHUNKS = (OFF_V - OFF_Q + COLS * 2) / 16;  // 16-byte chunks of q, k, g, v
    // 8 consecutive lanes (one 16-byte shared-memory phase) read one contiguous 128-byte row
    // segment: conflict-free without padding, and coalesced in global memory.
    static_assert(CV >= 8 && 32 % CV == 0, "a row segment of at least 128 bytes per 8 lanes");
    static_assert(THREADS % CV == 0 && KDIM % NRG == 0, "rows split evenly");
    static_assert(THREADS >= KDIM && THREADS >= VCHUNKS && THREADS >= COLS, "one item per thread");
};

__device__ __forceinline__ void cp_async16_s(unsigned saddr, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}

// Bulk (TMA engine) copies completing on an mbarrier, plain sm_90 PTX. One instruction moves a
// whole row segment; the copy engine, not the SM's load/store unit, tracks the bytes in flight.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra DONE;\n"
        "bra WAIT;\n"
        "DONE:\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

enum RingLoader { CPASYNC = 0, BULK = 1 };
// What a ring does with the tile between its column sums and its write, and so when a stage may be
// refilled: REREAD reads it again from the stage (refill after the next tile's first barrier);
// HOLD keeps it faded in registers (refill at the top of the next tile, before its wait);
// HOLD_EARLY holds it too and refills right after the column-partials barrier, the first point
// where no thread reads the stage any more, so the next load is in flight during the sums, the
// write and the wait instead of only the wait.
enum RingKeep { REREAD = 0, HOLD = 1, HOLD_EARLY = 2 };
// ConvFusion (FUSE): CONV makes the ring also run the short convolution (ShortConv, short_conv.cuh):
// q, k, v are then the raw projections x_q, x_k, x_v, staged exactly as q, k, v are, and conv /
// conv_w are used.
enum ConvFusion { NO_CONV = 0, CONV = 1 };
template <typename T, int COLS, int THREADS, int STAGES, int KEEP, int LOADER, int OVERLAP,
          int FUSE = NO_CONV>
__device__ __forceinline__ void ring(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                     const bf16* __restrict__ v, const float* __restrict__ g,
                                     const float* __restrict__ beta, T* __restrict__ S,
                                     bf16* __restrict__ o, int M, int H, float eps, float scale,
                                     bf16* __restrict__ conv = nullptr,
                                     const bf16* __restrict__ conv_w = nullptr) {
    using R = RingTile<T, COLS, THREADS>;
    using C = Cols<T, R::VEC>;
    static_assert(STAGES >= 2, "one stage computing, at least one loading");
    // One CTA must own a head's whole conv state: with two column slices in two CTAs, one could
    // read the taps after the other had shifted them.
    static_assert(FUSE == NO_CONV || COLS == VDIM, "conv fusion needs whole-head tiles");
    extern __shared__ __align__(16) unsigned char ring_smem[];
    __shared__ __align__(16) float4 srow[KDIM];  // alpha, kn, alpha*kn, alpha*qn of each key row
    __shared__ __align__(16) float red[2][R::WARPS][R::COLS];
    __shared__ __align__(16) float su[R::COLS];
    __shared__ float skq;
    // CONV: after the stages, one head's taps (ShortConv::TAP_BYTES), refilled one tile ahead.
    constexpr int TAPS_OFF = STAGES * R::BYTES;
    if (dynamic_smem_bytes() < (unsigned)(TAPS_OFF + (FUSE == CONV ? ShortConv::TAP_BYTES : 0))) __trap();
    // CONV: the grid is a multiple of H, so every tile of a CTA is the same head h of another
    // stream and its weights are read once (the launcher sizes the grid so).
    if (FUSE == CONV && gridDim.x % H != 0) __trap();
    TL_ENTER(S);
    TL_MARK(0);
    TL_SM();
    if constexpr (OVERLAP == PDL) pdl_launch_dependents();

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cv = tid % R::CV, rg = tid / R::CV;
    const int ntiles = M * H * R::SLICES;
    const int stride = gridDim.x;
    constexpr size_t HEAD_BYTES = (size_t)KDIM * VDIM * sizeof(T);
    constexpr size_t ROW_STEP_G = (size_t)R::NRG * VDIM * sizeof(T);  // global bytes between own rows
    constexpr int ROW_STEP_S = R::NRG * R::ROW;                         // stage bytes between own rows

    // Fixed per-thread copy addressing.
    const unsigned ring_base = smem_addr(ring_smem);
    const unsigned s_own = rg * R::ROW + cv * 16;
    const unsigned char* g_own = reinterpret_cast<const unsigned char*>(S) +
                                 (size_t)rg * VDIM * sizeof(T) + cv * 16;
    // One 16-byte chunk of q, k, g or the v slice per thread tid < VCHUNKS; per tile it moves by
    // vhead bytes per head and vslice bytes per column slice.
    const unsigned char* vsrc = nullptr;
    unsigned vdst = 0, vhead = 0, vslice = 0;
    if (tid < 16) {
        vsrc = reinterpret_cast<const unsigned char*>(q) + tid * 16; vdst = R::OFF_Q + tid * 16; vhead = KDIM * 2;
    } else if (tid < 32) {
        vsrc = reinterpret_cast<const unsigned char*>(k) + (tid - 16) * 16; vdst = R::OFF_K + (tid - 16) * 16; vhead = KDIM * 2;
    } else if (tid < 64) {
        vsrc = reinterpret_cast<const unsigned char*>(g) + (tid - 32) * 16; vdst = R::OFF_G + (tid - 32) * 16; vhead = KDIM * 4;
    } else if (tid < R::VCHUNKS) {
        vsrc = reinterpret_cast<const unsigned char*>(v) + (tid - 64) * 16; vdst = R::OFF_V + (tid - 64) * 16;
        vhead = VDIM * 2; vslice = R::COLS * 2;
    }

    // BULK: thread c < KDIM copies tile row c (ROW bytes, one instruction); threads 0-3 also copy
    // q, k, g and the v slice whole. Thread 0 arms the stage's barrier with the stage's byte count
    // (the transaction count may go negative first: the phase cannot complete before the arrive).
    // CONV adds one barrier after the stages' for the taps.
    __shared__ __align__(8) unsigned long long full_bar[STAGES + (FUSE == CONV)];
    const unsigned bar0 = smem_addr(full_bar);
    static_assert(FUSE == NO_CONV || LOADER == BULK, "the taps come by bulk copy");
    if constexpr (LOADER == BULK) {
        if (tid == 0) {
#pragma unroll
            for (int s = 0; s < STAGES + (FUSE == CONV); ++s) mbar_init(bar0 + 8 * s, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
    }
    const unsigned char* b_row = reinterpret_cast<const unsigned char*>(S) + (size_t)tid * VDIM * sizeof(T);
    const unsigned char* b_vec = tid == 0 ? reinterpret_cast<const unsigned char*>(q)
                               : tid == 1 ? reinterpret_cast<const unsigned char*>(k)
                               : tid == 2 ? reinterpret_cast<const unsigned char*>(g)
                                          : reinterpret_cast<const unsigned char*>(v);
    const unsigned b_vdst = tid == 0 ? R::OFF_Q : tid == 1 ? R::OFF_K : tid == 2 ? R::OFF_G : R::OFF_V;
    const unsigned b_vbytes = tid == 2 ? KDIM * 4 : tid == 3 ? R::COLS * 2 : KDIM * 2;
    const unsigned b_vhead = tid == 2 ? KDIM * 4 : tid == 3 ? VDIM * 2 : KDIM * 2;

    // A tile's copies: the state part, then q, k, g and the v slice (PDL splits them at the wait).
    auto issue_state = [&](int stage, int t) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const unsigned dst = ring_base + stage * R::BYTES;
        if constexpr (LOADER == BULK) {
            const unsigned bar = bar0 + 8 * stage;
            if (tid == 0) mbar_expect_tx(bar, R::BYTES);
            if (tid < KDIM) bulk_copy(dst + tid * R::ROW, b_row + (size_t)mh * HEAD_BYTES + sl * R::ROW, R::ROW, bar);
        } else {
            const unsigned char* src = g_own + (size_t)mh * HEAD_BYTES + sl * R::ROW;
#pragma unroll
            for (int i = 0; i < R::RPT; ++i) cp_async16_s(dst + s_own + i * ROW_STEP_S, src + i * ROW_STEP_G);
        }
    };
    auto issue_vectors = [&](int stage, int t) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const unsigned dst = ring_base + stage * R::BYTES;
        if constexpr (LOADER == BULK) {
            if (tid < 4) bulk_copy(dst + b_vdst, b_vec + (size_t)mh * b_vhead + (tid == 3 ? sl * R::COLS * 2 : 0), b_vbytes, bar0 + 8 * stage);
        } else {
            if (vsrc) cp_async16_s(dst + vdst, vsrc + (size_t)mh * vhead + sl * vslice);
        }
    };
    auto issue = [&](int stage, int t) {
        issue_state(stage, t);
        issue_vectors(stage, t);
        if constexpr (LOADER != BULK) cp_async_commit();  // one group per issue slot, empty or not (see refill)
    };
    // CONV: tile t's taps, 3 runs of 768 bytes (one per tensor), by thread 0 on the taps barrier.
    // The taps, like the state, are written only by this layer's own launch one step earlier, so
    // the first tile's may be copied before the PDL wait.
    const unsigned taps_bar = bar0 + 8 * STAGES, taps_dst = ring_base + TAPS_OFF;
    auto issue_taps = [&](int tt) {
        if constexpr (FUSE == CONV) {
            if (tid == 0 && tt < ntiles) {
                mbar_expect_tx(taps_bar, ShortConv::TAP_BYTES);
                const bf16* src = conv + ShortConv::taps_at(tt, H, 0);
#pragma unroll
                for (int x = 0; x < 3; ++x)
                    bulk_copy(taps_dst + x * (ShortConv::TAP_BYTES / 3), src + x * ShortConv::tensor_stride(H),
                              ShortConv::TAP_BYTES / 3, taps_bar);
            }
        }
    };
    uint2 conv_wt[3];  // CONV: this CTA's head's weights for channel tid (read once; never written)
    if constexpr (FUSE == CONV) {
        if (tid < KDIM) {
#pragma unroll
            for (int x = 0; x < 3; ++x) conv_wt[x] = ShortConv::weights(conv_w, x, (size_t)(blockIdx.x % H) * KDIM + tid, H);
        }
    }
    unsigned taps_parity = 0;

    // HOLD / REREAD refill the stage tile n - 1 used with tile n + STAGES - 1 (see RingKeep for
    // when); HOLD_EARLY refills tile n's own stage with tile n + STAGES once tile n is in registers.
    constexpr bool HOLDS = KEEP != REREAD;
    auto refill = [&](int stage, int t) {
        const int ahead = t + (KEEP == HOLD_EARLY ? STAGES : STAGES - 1) * stride;
        const int into = KEEP == HOLD_EARLY ? stage : (stage + STAGES - 1) % STAGES;
        if (ahead < ntiles) issue(into, ahead);
        else if constexpr (LOADER != BULK) cp_async_commit();  // keep the group count in step
    };

    // Prologue: STAGES-1 tiles in flight (HOLD_EARLY: all STAGES); with cp.async, empty groups are
    // committed too, so the group count always says which tile has landed.
    constexpr int PROLOGUE = KEEP == HOLD_EARLY ? STAGES : STAGES - 1;
    int t = blockIdx.x;
    if constexpr (OVERLAP == PDL) {
        // State first, then wait for the previous kernel, then its inputs; cp.async puts all the
        // prologue's vectors in one extra group, so the first tile waits for every group.
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s) {
            if (t + s * stride < ntiles) issue_state(s, t + s * stride);
            if constexpr (LOADER != BULK) cp_async_commit();
        }
        issue_taps(t);
        pdl_wait();
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s)
            if (t + s * stride < ntiles) issue_vectors(s, t + s * stride);
        if constexpr (LOADER != BULK) {
            cp_async_commit();
            cp_async_wait<0>();
        }
    } else {
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s) {
            if (t + s * stride < ntiles) issue(s, t + s * stride);
            else if constexpr (LOADER != BULK) cp_async_commit();
        }
        issue_taps(t);
    }

    // Where column tid's partial sits in red[][warp][]: chunk-major within each 4-float group so
    // the lanes writing partials store contiguous 16-byte vectors.
    const int rcol = ((tid % R::VEC) / 4) * R::CV * 4 + (tid / R::VEC) * 4 + (tid % 4);

    int stage = 0;
    unsigned parity = 0;  // BULK: phase of the current stage's barrier
    int local = 0;  // this CTA's tile count (timeline probes)
    for (; t < ntiles; t += stride) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const float b = tid < R::COLS ? beta[mh] : 0.f;  // latency hidden behind the wait
        if constexpr (KEEP == HOLD) refill(stage, t);
        if constexpr (LOADER == BULK) {
            mbar_wait(bar0 + 8 * stage, parity);  // the barrier's phase makes the stage visible
            if constexpr (!HOLDS) __syncthreads();  // every thread is done with the last tile's stage
        } else {
            // Groups committed before this wait: PROLOGUE + one per earlier tile (+ this tile's,
            // for HOLD; + the prologue's vector group for PDL, already complete); tile n's group
            // must be complete.
            cp_async_wait<KEEP == REREAD ? STAGES - 2 : STAGES - 1>();
            __syncthreads();  // the other threads' copies are visible; the last tile is done
        }
        TL_MARK(3 + 2 * local);
        if constexpr (KEEP == REREAD) refill(stage, t);
        const unsigned char* st = ring_smem + stage * R::BYTES;

        // CONV: q, k, v after the convolution, as floats in red[0] (free until the column partials,
        // which come after the next barrier; vj is read before it for that reason).
        float* const qkv = &red[0][0][0];
        float vj_conv = 0.f;
        if constexpr (FUSE == CONV) {
            if (tid < KDIM) {
                mbar_wait(taps_bar, taps_parity);  // landed during the previous tile
                ShortConv::step(reinterpret_cast<const bf16*>(ring_smem + TAPS_OFF), conv_wt,
                                reinterpret_cast<const bf16*>(st + R::OFF_Q),
                                reinterpret_cast<const bf16*>(st + R::OFF_K),
                                reinterpret_cast<const bf16*>(st + R::OFF_V), conv, mh, H, tid, qkv);
            }
            taps_parity ^= 1u;
            __syncthreads();
            issue_taps(t + stride);  // nothing reads the taps buffer any more this tile
        }
        if (tid < KDIM) {  // warps 0-3: norms (each warp, no barrier), then one key row each
            if constexpr (FUSE == CONV) {
                const Norms n = warp_norms(qkv, qkv + KDIM, eps, scale);
                const float a = __expf(reinterpret_cast<const float*>(st + R::OFF_G)[tid]);
                const float kn = n.rk * qkv[KDIM + tid], qn = n.rq * qkv[tid];
                srow[tid] = make_float4(a, kn, a * kn, a * qn);
                if (tid == 0) skq = n.kq;
                vj_conv = qkv[2 * KDIM + tid];  // COLS == KDIM
            } else {
                const bf16* sq = reinterpret_cast<const bf16*>(st + R::OFF_Q);
                const bf16* sk = reinterpret_cast<const bf16*>(st + R::OFF_K);
                const Norms n = warp_norms_bf16(sq, sk, lane, eps, scale);
                const float a = __expf(reinterpret_cast<const float*>(st + R::OFF_G)[tid]);
                const float kn = n.rk * bf2f(sk[tid]), qn = n.rq * bf2f(sq[tid]);
                srow[tid] = make_float4(a, kn, a * kn, a * qn);
                if (tid == 0) skq = n.kq;
            }
        }
        __syncthreads();

        float vh[R::VEC], w[R::VEC];
#pragma unroll
        for (int e = 0; e < R::VEC; ++e) vh[e] = w[e] = 0.f;
        float held[HOLDS ? R::RPT : 1][R::VEC];  // faded rows (HOLD, HOLD_EARLY)
        float knr[HOLDS ? R::RPT : 1];
        // v is read here, before the column-partials barrier, so HOLD_EARLY may refill after it.
        const float vj = FUSE == CONV ? vj_conv
                       : tid < R::COLS ? bf2f(reinterpret_cast<const bf16*>(st + R::OFF_V)[tid]) : 0.f;
#pragma unroll
        for (int i = 0; i < R::RPT; ++i) {
            float s[R::VEC];
            C::load(reinterpret_cast<const T*>(st + s_own + i * ROW_STEP_S), s);
            const float4 r = srow[rg + R::NRG * i];
#pragma unroll
            for (int e = 0; e < R::VEC; ++e) {
                vh[e] = fmaf(s[e], r.z, vh[e]);
                w[e] = fmaf(s[e], r.w, w[e]);
            }
            if constexpr (HOLDS) {
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) held[i][e] = s[e] * r.x;
                knr[i] = r.y;
            }
        }
#pragma unroll
        for (int off = R::CV; off < 32; off <<= 1) {
#pragma unroll
            for (int e = 0; e < R::VEC; ++e) {
                vh[e] += __shfl_xor_sync(FULL_MASK, vh[e], off);
                w[e] += __shfl_xor_sync(FULL_MASK, w[e], off);
            }
        }
        if (lane < R::CV) {  // lane == cv: the warp's sums for chunk cv
#pragma unroll
            for (int e = 0; e < R::VEC; e += 4) {
                const int at = (e / 4) * R::CV * 4 + cv * 4;
                *reinterpret_cast<float4*>(&red[0][warp][at]) = make_float4(vh[e], vh[e + 1], vh[e + 2], vh[e + 3]);
                *reinterpret_cast<float4*>(&red[1][warp][at]) = make_float4(w[e], w[e + 1], w[e + 2], w[e + 3]);
            }
        }
        __syncthreads();
        if constexpr (KEEP == HOLD_EARLY) refill(stage, t);  // nothing reads this stage any more
        if (tid < R::COLS) {
            float a = 0.f, bb = 0.f;
#pragma unroll
            for (int wp = 0; wp < R::WARPS; ++wp) { a += red[0][wp][rcol]; bb += red[1][wp][rcol]; }
            const float u = b * (vj - a);
            o[(size_t)mh * VDIM + sl * R::COLS + tid] = f2bf(bb + u * skq);
            su[tid] = u;
        }
        __syncthreads();

        float uu[R::VEC];
#pragma unroll
        for (int e = 0; e < R::VEC; e += 4) {
            const float4 x = *reinterpret_cast<const float4*>(&su[cv * R::VEC + e]);
            uu[e] = x.x; uu[e + 1] = x.y; uu[e + 2] = x.z; uu[e + 3] = x.w;
        }
        T* dst = S + (size_t)mh * KDIM * VDIM + sl * R::COLS + (size_t)rg * VDIM + cv * R::VEC;
#pragma unroll
        for (int i = 0; i < R::RPT; ++i) {
            float s[R::VEC];
            if constexpr (HOLDS) {
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) s[e] = fmaf(knr[i], uu[e], held[i][e]);
            } else {
                C::load(reinterpret_cast<const T*>(st + s_own + i * ROW_STEP_S), s);
                const float2 r = *reinterpret_cast<const float2*>(&srow[rg + R::NRG * i]);
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) s[e] = fmaf(s[e], r.x, r.y * uu[e]);
            }
            C::store(dst + (size_t)i * R::NRG * VDIM, s);
        }
        TL_MARK(4 + 2 * local);
        ++local;
        if (++stage == STAGES) { stage = 0; parity ^= 1u; }
    }
    if constexpr (LOADER != BULK) cp_async_wait<0>();  // only empty groups remain; drain them
    TL_MARK(1);
}

// An entry point running one ring configuration: kda_<NAME>_<SUFFIX> with the exact form's
// arguments. The configurations in use have 32 KiB tiles (128 BF16 / 64 FP32 columns) or whole-head
// tiles, and the same stage count for both dtypes; each design file says why its shape.
#define DEFINE_RING(NAME, SUFFIX, T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP)                 \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(EXACT_ARGS(T)) {  \
        ring<T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP>(q, k, v, g, beta, S, o, M, H, eps, scale); \
    }

#endif  // KDA_RING_CUH
