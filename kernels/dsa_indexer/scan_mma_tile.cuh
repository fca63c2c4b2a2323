/*
The tensor-core scan's per-tile device code (mma.sync m16n8k16 on 16 keys x 32 heads), shared by
select_fused.cu: a one-m-tile Tile and load_tile (scan_mma.cu's are templated on its warp tile's
m-tiles) and tile_score, the MMA + epilogue body of scan_mma.cu's mma_step; the MMA forms, the word
picker and q's fragments come from scan_mma_ops.cuh, which scan_mma.cu includes too. The fragment
layouts, the dim permutation and the fp8 conversion are documented in scan_mma.cu's header; the op
and layouts in scan_common.cuh.
*/
#ifndef SCAN_MMA_TILE_CUH
#define SCAN_MMA_TILE_CUH

#include "scan_mma_ops.cuh"

#define MMA_TILE_KEYS 16


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
    const float2 sums = quad_head_sums(acc, wr);
    // t = 0 writes row g, t = 1 row g + 8 (fp8: each loaded the scale of that row)
    float value = (t & 1) ? sums.y : sums.x;
    if constexpr (FP8) value *= cur.scale;
    return value;
}

#endif  // SCAN_MMA_TILE_CUH
