/*
The tensor-core scan's per-tile device code (mma.sync m16n8k16 on 16 keys x 32 heads), shared by
select_fused.cu. COPIED from scan_mma.cu (mma_bf16, mma_f16, word_of, Tile, load_tile,
stream_setup verbatim; tile_score is the MMA + epilogue body of scan_mma.cu's mma_step), because
scan_mma.cu is being tuned by another session and is not ours to edit: when it settles, scan_mma.cu
can include this header instead of its own copy. The fragment layouts, the dim permutation and
the fp8 conversion are documented in scan_mma.cu's header; the op and layouts in scan_common.cuh.
*/
#ifndef SCAN_MMA_TILE_CUH
#define SCAN_MMA_TILE_CUH

#include "scan_common.cuh"

#define MMA_TILE_KEYS 16

__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                        unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant
}

template <bool FP8>
struct Tile {
    static constexpr int KEY_BYTES = FP8 ? 128 : 256;
    static constexpr int LOADS = FP8 ? 2 : 4;     // 16-byte loads per key row per lane
    uint4 v[2][LOADS];                             // [row g, row g + 8][load i]
    float scale;                                   // fp8: the scale of row g + 8 (t & 1)
};

template <bool FP8>
__device__ __forceinline__ void load_tile(Tile<FP8>& tile, const unsigned char* __restrict__ keys,
                                          const float* __restrict__ scales, size_t stream, int c0, int elig,
                                          int g, int t) {
    constexpr int KB = Tile<FP8>::KEY_BYTES, L = Tile<FP8>::LOADS;
    const unsigned char* base = keys + (stream + (size_t)c0) * KB + 16 * t;
    if (c0 + MMA_TILE_KEYS <= elig) {  // warp-uniform: every row eligible
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int i = 0; i < L; ++i) tile.v[r][i] = ld_nc_v4(base + (size_t)(g + 8 * r) * KB + 64 * i);
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int i = 0; i < L; ++i) {
                tile.v[r][i] = make_uint4(0u, 0u, 0u, 0u);
                if (c0 + g + 8 * r < elig) tile.v[r][i] = ld_nc_v4(base + (size_t)(g + 8 * r) * KB + 64 * i);
            }
    }
    if constexpr (FP8) {
        const int row = c0 + g + 8 * (t & 1);
        tile.scale = row < elig ? ld_nc_f32(scales + stream + row) : 0.0f;
    }
}

// q's B fragments in the permuted dim order (header) and the weights of the heads this thread's D
// elements hold (8 nt + 2 t + {0, 1}), for stream m.
template <bool FP8>
__device__ __forceinline__ void stream_setup(unsigned (&bq)[4][8][2], float (&wr)[4][2], const bf16* __restrict__ q,
                                             const float* __restrict__ w, int m, int g, int t) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const int p0 = FP8 ? 64 * (s >> 2) + 16 * t + 4 * (s & 3) : 32 * (s >> 1) + 8 * t + 4 * (s & 1);
            const uint2 v = ld_nc_v2(q + ((size_t)m * SCAN_HEADS + 8 * nt + g) * SCAN_DIM + p0);
            if constexpr (FP8) {
                bq[nt][s][0] = pack_f16x2(bf_lo(v.x), bf_hi(v.x));
                bq[nt][s][1] = pack_f16x2(bf_lo(v.y), bf_hi(v.y));
            } else {
                bq[nt][s][0] = v.x;
                bq[nt][s][1] = v.y;
            }
        }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        wr[nt][0] = ld_nc_f32(w + (size_t)m * SCAN_HEADS + 8 * nt + 2 * t);
        wr[nt][1] = ld_nc_f32(w + (size_t)m * SCAN_HEADS + 8 * nt + 2 * t + 1);
    }
}

// The score of this thread's row of the tile in ``cur`` (keys c0 + g + 8 (t & 1), valid for t < 2;
// lanes t = 2, 3 return the same sums, unused): 32 MMAs, relu, x w, the quad's head sum, x the fp8
// scale. Every lane of the warp must call it (mma.sync and the shuffles are warp-wide).
template <bool FP8>
__device__ __forceinline__ float tile_score(const Tile<FP8>& cur, const unsigned (&bq)[4][8][2],
                                            const float (&wr)[4][2], int t) {
    float acc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[nt][j] = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        unsigned a0, a1, a2, a3;  // row g low k, row g + 8 low k, row g high k, row g + 8 high k
        if constexpr (FP8) {
            const unsigned w0 = word_of(cur.v[0][s >> 2], s & 3), w1 = word_of(cur.v[1][s >> 2], s & 3);
            a0 = e4m3x2_to_f16x2((unsigned short)(w0 & 0xFFFFu));
            a2 = e4m3x2_to_f16x2((unsigned short)(w0 >> 16));
            a1 = e4m3x2_to_f16x2((unsigned short)(w1 & 0xFFFFu));
            a3 = e4m3x2_to_f16x2((unsigned short)(w1 >> 16));
        } else {
            const int lo = 2 * (s & 1);
            a0 = word_of(cur.v[0][s >> 1], lo);
            a2 = word_of(cur.v[0][s >> 1], lo + 1);
            a1 = word_of(cur.v[1][s >> 1], lo);
            a3 = word_of(cur.v[1][s >> 1], lo + 1);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            if constexpr (FP8) mma_f16(acc[nt], a0, a1, a2, a3, bq[nt][s][0], bq[nt][s][1]);
            else mma_bf16(acc[nt], a0, a1, a2, a3, bq[nt][s][0], bq[nt][s][1]);
        }
    }
    float lo = 0.0f, hi = 0.0f;  // rows g and g + 8, this thread's 8 heads
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        lo += wr[nt][0] * fmaxf(acc[nt][0], 0.0f) + wr[nt][1] * fmaxf(acc[nt][1], 0.0f);
        hi += wr[nt][0] * fmaxf(acc[nt][2], 0.0f) + wr[nt][1] * fmaxf(acc[nt][3], 0.0f);
    }
    lo += __shfl_xor_sync(FULL_MASK, lo, 1);
    hi += __shfl_xor_sync(FULL_MASK, hi, 1);
    lo += __shfl_xor_sync(FULL_MASK, lo, 2);
    hi += __shfl_xor_sync(FULL_MASK, hi, 2);
    // t = 0 writes row g, t = 1 row g + 8 (fp8: each loaded the scale of that row)
    float value = (t & 1) ? hi : lo;
    if constexpr (FP8) value *= cur.scale;
    return value;
}

#endif  // SCAN_MMA_TILE_CUH
