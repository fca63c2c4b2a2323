/*
The tensor-core scan's device code that scan_mma.cu and select_fused.cu (through
scan_mma_tile.cuh) share, so both score keys identically: the mma.sync forms, the word picker
and q's B fragments in the permuted dim order (BF16 / f16 q; and e4m3 q for scan_mma_e4m3, which
only scan_mma.cu uses). The fragment layouts, the permutations and the fp8
conversion are documented in scan_mma.cu's header; the op and layouts in scan_common.cuh.
*/
#ifndef SCAN_MMA_OPS_CUH
#define SCAN_MMA_OPS_CUH

#include "scan_common.cuh"

// The three mma.sync forms, one definition: D (16 x 8 f32, in place) += A (16 x K) . B (K x 8), four
// A and two B .b32 registers. TYPES: the shape and types of the instruction.
#define SCAN_MMA_FORM(NAME, TYPES)                                                                           \
    __device__ __forceinline__ void NAME(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, \
                                         unsigned b0, unsigned b1) {                                          \
        asm volatile("mma.sync.aligned." TYPES " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                           \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                 \
    }

SCAN_MMA_FORM(mma_bf16, "m16n8k16.row.col.f32.bf16.bf16.f32")
SCAN_MMA_FORM(mma_f16, "m16n8k16.row.col.f32.f16.f16.f32")

// e4m3 x e4m3 -> f32, m16n8k32 (sm_89+). Each .b32 register holds 4 codes, the lower k in the
// lower byte (PTX ISA, mma.m16n8k32 fragments for 8-bit types; g = lane >> 2, t = lane & 3):
//   A (16 x 32, row): a0 = (row g, k 4t .. 4t+3)       a1 = (row g+8, k 4t .. 4t+3)
//                     a2 = (row g, k 16+4t .. 16+4t+3) a3 = (row g+8, k 16+4t .. 16+4t+3)
//   B (32 x 8, col):  b0 = (k 4t .. 4t+3; n g)         b1 = (k 16+4t .. 16+4t+3; n g)
//   D: as m16n8k16's (d0, d1 = row g, n 2t, 2t+1; d2, d3 = row g+8).
// On sm_90 ptxas lowers it to F2FP.F16.E4M3.UNPACK_B conversions of A and B, two HMMA.16816.F32
// from a zero accumulator and an FADD into d (nvdisasm of nvcc 13.0's cubin: SCAN_NOTES), so the
// products and the FP32 accumulation are the f16 path's: e4m3 values are exact in f16, their
// products exact in the MMA.
SCAN_MMA_FORM(mma_e4m3, "m16n8k32.row.col.f32.e4m3.e4m3.f32")

__device__ __forceinline__ unsigned word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant
}

// The score of one thread's two rows (g in .x, g + 8 in .y) before the key scale: this thread's
// 8 heads (n-tile nt: d[nt][0], d[nt][1] row g, d[nt][2], d[nt][3] row g + 8; heads 8 nt + 2 t +
// {0, 1}) weighted after the relu, then summed over the quad's four threads, so each of them holds
// all 32 heads. mma.sync m16n8's D and a warp's 16 rows of wgmma m64n32's D lay out alike.
__device__ __forceinline__ float2 quad_head_sums(const float (&d)[4][4], const float (&wr)[4][2]) {
    float lo = 0.0f, hi = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        lo += wr[nt][0] * fmaxf(d[nt][0], 0.0f) + wr[nt][1] * fmaxf(d[nt][1], 0.0f);
        hi += wr[nt][0] * fmaxf(d[nt][2], 0.0f) + wr[nt][1] * fmaxf(d[nt][3], 0.0f);
    }
    lo += __shfl_xor_sync(FULL_MASK, lo, 1);
    hi += __shfl_xor_sync(FULL_MASK, hi, 1);
    lo += __shfl_xor_sync(FULL_MASK, lo, 2);
    hi += __shfl_xor_sync(FULL_MASK, hi, 2);
    return make_float2(lo, hi);
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

// e4m3 queries: the folded weights wq = w[head] x q_scale[head] of the heads a thread's D elements hold
// (8 nt + 2t + {0, 1}; mma.sync's D and wgmma's CLayout_64xN agree), for stream m. Folding is exact in
// the relu only because q_scale > 0: relu(qs x dot) = qs x relu(dot). scan_mma_e4m3 and scan_wgmma_e4m3.
__device__ __forceinline__ void folded_weights(float (&wr)[4][2], const float* __restrict__ qs,
                                               const float* __restrict__ w, int m, int t) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const size_t h = (size_t)m * SCAN_HEADS + 8 * nt + 2 * t + e;
            wr[nt][e] = ld_nc_f32(w + h) * ld_nc_f32(qs + h);
        }
}

// e4m3 queries (scan_mma_e4m3): q's B fragments as codes in the e4m3 dim order (scan_mma.cu's
// header: k-step s, k = 4t + e + 16 hi is physical dim 64 (s >> 1) + 16 t + 8 (s & 1) + 4 hi + e), one
// 8-byte load per (n-tile, step) = b0, b1; and the folded weights wq = w[head] x q_scale[head] of the
// heads this thread's D elements hold (8 nt + 2t + {0, 1}). Folding is exact in the relu only because
// q_scale > 0: relu(qs x dot) = qs x relu(dot).
__device__ __forceinline__ void stream_setup_e4m3(unsigned (&bq)[4][4][2], float (&wr)[4][2],
                                                  const unsigned char* __restrict__ q, const float* __restrict__ qs,
                                                  const float* __restrict__ w, int m, int g, int t) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int p0 = 64 * (s >> 1) + 16 * t + 8 * (s & 1);
            const uint2 v = ld_nc_v2(q + ((size_t)m * SCAN_HEADS + 8 * nt + g) * SCAN_DIM + p0);
            bq[nt][s][0] = v.x;
            bq[nt][s][1] = v.y;
        }
    folded_weights(wr, qs, w, m, t);
}

#endif  // SCAN_MMA_OPS_CUH
