/*
DSA indexer scan, design scan_fma: CUDA cores, FP32 FMA, both key layouts, bf16 and fp8 keys. The
op, layouts and conventions: scan_common.cuh.

Why it cannot reach the memory floor: 2 x 32 x 128 = 8192 FLOP a key against 256 bytes (bf16) is 32
FLOP a byte; the H200's FP32 FMA peak (~67 TFLOP/s) over its ~4.8 TB/s is ~14 FLOP a byte. At M = 32
and 262144 per-token keys that is 68.7 GFLOP, ~1 ms at 100% FFMA issue against ~490 us of key
reads: compute-bound by about 2x before any overhead (SCAN_NOTES.md).

Shape: block SCAN_FMA_THREADS (256), each thread two candidates (SCAN_FMA_CANDS), 512 a CTA; grid
(ceil(C / 512), M); __launch_bounds__(256, 2): <= 128 registers, 2 CTAs (16 warps) an SM (unbounded,
ptxas took 130 for cand_dim bf16: one CTA an SM). q[m] is staged once per CTA in shared memory as float [128 dims][32 heads] (16
KiB; head fastest, so the 4 heads of a float4 are one broadcast LDS.128, every lane the same
address) and w[m] as float [32]. The thread keeps 2 x 32 FP32 accumulators; per 8 dims it loads
its two keys' 8 values (cand_dim: one 16-byte (bf16) / 8-byte (fp8) load per key; dim_cand: one
4-byte (bf16) / 2-byte (fp8) load of the thread's two adjacent candidates per dim row, a warp
reading 128 / 64 contiguous bytes of the row), then does 2 x 8 x 32 FFMA with 64 broadcast
LDS.128 of q (4 FFMA per LDS each candidate). The next 8 dims' loads are issued before this
chunk's FMAs.
Candidates: cand_dim: base + tid and base + tid + 256 (stores of a warp are 128 contiguous bytes);
dim_cand: base + 2 tid and base + 2 tid + 1 (the pair is one load; Cpad is even and >= C, so the
second is inside the row even past C). Candidates >= eligible[m] are not loaded (zeros) and score
-inf; candidates >= C are not written.
*/

#include "scan_common.cuh"

#define SCAN_FMA_THREADS 256
#define SCAN_FMA_CANDS 2
#define SCAN_FMA_PER_CTA 512  // a literal: the launcher reads it
static_assert(SCAN_FMA_PER_CTA == SCAN_FMA_THREADS * SCAN_FMA_CANDS, "candidates per CTA");
#define SCAN_FMA_CHUNK 8  // dims per load step

// bf16 bits of 8 consecutive dims -> floats
__device__ __forceinline__ void unpack_bf16x8(const uint4& r, float (&f)[SCAN_FMA_CHUNK]) {
    f[0] = bf_lo(r.x); f[1] = bf_hi(r.x);
    f[2] = bf_lo(r.y); f[3] = bf_hi(r.y);
    f[4] = bf_lo(r.z); f[5] = bf_hi(r.z);
    f[6] = bf_lo(r.w); f[7] = bf_hi(r.w);
}

// 8 e4m3 codes of consecutive dims -> floats
__device__ __forceinline__ void unpack_e4m3x8(const uint2& r, float (&f)[SCAN_FMA_CHUNK]) {
    f16x2_to_f32(e4m3x2_to_f16x2((unsigned short)(r.x & 0xFFFFu)), f[0], f[1]);
    f16x2_to_f32(e4m3x2_to_f16x2((unsigned short)(r.x >> 16)), f[2], f[3]);
    f16x2_to_f32(e4m3x2_to_f16x2((unsigned short)(r.y & 0xFFFFu)), f[4], f[5]);
    f16x2_to_f32(e4m3x2_to_f16x2((unsigned short)(r.y >> 16)), f[6], f[7]);
}

// The raw bytes of one 8-dim chunk of the thread's two candidates, as loaded.
template <bool FP8, bool DIM_CAND>
struct Raw {
    // cand_dim: per candidate one 16 B (bf16) / 8 B (fp8) load; dim_cand: per dim one 4 B / 2 B load
    uint4 cd[SCAN_FMA_CANDS];
    unsigned dc[SCAN_FMA_CHUNK];
};

template <bool FP8, bool DIM_CAND>
__device__ __forceinline__ void load_chunk(Raw<FP8, DIM_CAND>& raw, const unsigned char* __restrict__ keys,
                                           size_t m, int C, int Cpad, const int (&cand)[SCAN_FMA_CANDS],
                                           const bool (&valid)[SCAN_FMA_CANDS], int d0) {
    constexpr int ELEM = FP8 ? 1 : 2;
    if constexpr (DIM_CAND) {
        // rows d0 .. d0 + 7 of [m][128][Cpad], the pair cand[0], cand[0] + 1 (valid[0] covers both loads)
        const unsigned char* p = keys + (m * SCAN_DIM + (size_t)d0) * (size_t)Cpad * ELEM + (size_t)cand[0] * ELEM;
#pragma unroll
        for (int d = 0; d < SCAN_FMA_CHUNK; ++d) {
            raw.dc[d] = 0u;
            if (valid[0]) raw.dc[d] = FP8 ? ld_nc_u16(p + (size_t)d * Cpad) : ld_nc_u32(p + (size_t)d * Cpad * 2);
        }
    } else {
#pragma unroll
        for (int i = 0; i < SCAN_FMA_CANDS; ++i) {
            raw.cd[i] = make_uint4(0u, 0u, 0u, 0u);
            const unsigned char* p = keys + (m * (size_t)C + (size_t)cand[i]) * (SCAN_DIM * ELEM) + (size_t)d0 * ELEM;
            if (valid[i]) {
                if constexpr (FP8) {
                    const uint2 v = ld_nc_v2(p);
                    raw.cd[i].x = v.x;
                    raw.cd[i].y = v.y;
                } else {
                    raw.cd[i] = ld_nc_v4(p);
                }
            }
        }
    }
}

// The chunk's values: kv[i][d] = key(cand[i])[d0 + d] (fp8: the codes' values, unscaled)
template <bool FP8, bool DIM_CAND>
__device__ __forceinline__ void chunk_values(const Raw<FP8, DIM_CAND>& raw, float (&kv)[SCAN_FMA_CANDS][SCAN_FMA_CHUNK]) {
    if constexpr (DIM_CAND) {
#pragma unroll
        for (int d = 0; d < SCAN_FMA_CHUNK; ++d) {
            if constexpr (FP8) {
                f16x2_to_f32(e4m3x2_to_f16x2((unsigned short)raw.dc[d]), kv[0][d], kv[1][d]);
            } else {
                kv[0][d] = bf_lo(raw.dc[d]);
                kv[1][d] = bf_hi(raw.dc[d]);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < SCAN_FMA_CANDS; ++i) {
            if constexpr (FP8) unpack_e4m3x8(make_uint2(raw.cd[i].x, raw.cd[i].y), kv[i]);
            else unpack_bf16x8(raw.cd[i], kv[i]);
        }
    }
}

template <bool FP8, bool DIM_CAND>
__device__ __forceinline__ void scan_fma(const bf16* __restrict__ q, const float* __restrict__ w,
                                         const unsigned char* __restrict__ keys, const float* __restrict__ scales,
                                         const int* __restrict__ eligible, float* __restrict__ scores, int M, int C,
                                         int Cpad) {
    __shared__ __align__(16) float sq[SCAN_DIM * SCAN_HEADS];  // [dim][head]
    __shared__ float sw[SCAN_HEADS];
    const int m = blockIdx.y;
    if (m >= M) return;  // whole block: the barrier below is never split
    const int tid = threadIdx.x;
    // Consecutive threads take consecutive heads of one dim: conflict-free stores; the global reads
    // (2 bytes, 256 bytes apart) come from L2 after the first CTA of the stream.
    for (int idx = tid; idx < SCAN_DIM * SCAN_HEADS; idx += SCAN_FMA_THREADS) {
        const int h = idx & (SCAN_HEADS - 1), d = idx / SCAN_HEADS;
        sq[idx] = __uint_as_float(((unsigned)q[((size_t)m * SCAN_HEADS + h) * SCAN_DIM + d]) << 16);
    }
    if (tid < SCAN_HEADS) sw[tid] = w[(size_t)m * SCAN_HEADS + tid];
    __syncthreads();

    const int elig = ld_nc_s32(eligible + m);
    const int base = blockIdx.x * SCAN_FMA_PER_CTA;
    int cand[SCAN_FMA_CANDS];
    bool valid[SCAN_FMA_CANDS];
#pragma unroll
    for (int i = 0; i < SCAN_FMA_CANDS; ++i) {
        cand[i] = DIM_CAND ? base + SCAN_FMA_CANDS * tid + i : base + tid + SCAN_FMA_THREADS * i;
        valid[i] = cand[i] < elig;
    }
    bool any = valid[0] || valid[1];
    if constexpr (DIM_CAND) {
        // both candidates come from one load, issued when the first is eligible
        any = valid[0];
    }

    float acc[SCAN_FMA_CANDS][SCAN_HEADS];
#pragma unroll
    for (int i = 0; i < SCAN_FMA_CANDS; ++i)
#pragma unroll
        for (int h = 0; h < SCAN_HEADS; ++h) acc[i][h] = 0.0f;

    if (any) {
        Raw<FP8, DIM_CAND> cur, nxt;
        load_chunk<FP8, DIM_CAND>(cur, keys, (size_t)m, C, Cpad, cand, valid, 0);
        // unrolled by 2 so cur / nxt alternate registers (a copy of nxt would wait for its loads)
#pragma unroll 2
        for (int d0 = 0; d0 < SCAN_DIM; d0 += SCAN_FMA_CHUNK) {
            if (d0 + SCAN_FMA_CHUNK < SCAN_DIM)
                load_chunk<FP8, DIM_CAND>(nxt, keys, (size_t)m, C, Cpad, cand, valid, d0 + SCAN_FMA_CHUNK);
            float kv[SCAN_FMA_CANDS][SCAN_FMA_CHUNK];
            chunk_values<FP8, DIM_CAND>(cur, kv);
#pragma unroll
            for (int d = 0; d < SCAN_FMA_CHUNK; ++d) {
                const float4* qd = reinterpret_cast<const float4*>(sq + (d0 + d) * SCAN_HEADS);
#pragma unroll
                for (int h4 = 0; h4 < SCAN_HEADS / 4; ++h4) {
                    const float4 qq = qd[h4];
#pragma unroll
                    for (int i = 0; i < SCAN_FMA_CANDS; ++i) {
                        acc[i][4 * h4 + 0] = fmaf(kv[i][d], qq.x, acc[i][4 * h4 + 0]);
                        acc[i][4 * h4 + 1] = fmaf(kv[i][d], qq.y, acc[i][4 * h4 + 1]);
                        acc[i][4 * h4 + 2] = fmaf(kv[i][d], qq.z, acc[i][4 * h4 + 2]);
                        acc[i][4 * h4 + 3] = fmaf(kv[i][d], qq.w, acc[i][4 * h4 + 3]);
                    }
                }
            }
            cur = nxt;
        }
    }

    float* out = scores + (size_t)m * (size_t)C;
#pragma unroll
    for (int i = 0; i < SCAN_FMA_CANDS; ++i) {
        float s = 0.0f;
#pragma unroll
        for (int h = 0; h < SCAN_HEADS; ++h) s = fmaf(sw[h], fmaxf(acc[i][h], 0.0f), s);
        if constexpr (FP8) {
            if (valid[i]) s *= ld_nc_f32(scales + (size_t)m * (size_t)C + cand[i]);  // > 0: after the relu
        }
        if (cand[i] < C) out[cand[i]] = valid[i] ? s : neg_inf();
    }
}

#define SCAN_FMA_KERNEL(NAME, FP8, DIM_CAND)                                                                  \
    extern "C" __global__ void __launch_bounds__(SCAN_FMA_THREADS, 2)                                        \
    NAME(const bf16* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ keys,      \
         const float* __restrict__ scales, const int* __restrict__ eligible, float* __restrict__ scores, int M, \
         int C, int Cpad) {                                                                                   \
        scan_fma<FP8, DIM_CAND>(q, w, keys, scales, eligible, scores, M, C, Cpad);                            \
    }

// scales is unused (may be any pointer) for bf16 keys; Cpad is unused for cand_dim.
SCAN_FMA_KERNEL(scan_fma_cand_dim_bf16, false, false)
SCAN_FMA_KERNEL(scan_fma_cand_dim_fp8, true, false)
SCAN_FMA_KERNEL(scan_fma_dim_cand_bf16, false, true)
SCAN_FMA_KERNEL(scan_fma_dim_cand_fp8, true, true)
