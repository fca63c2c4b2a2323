/*
The tensor-core scan's device code that scan_mma.cu and select_fused.cu (through
scan_mma_tile.cuh) share, so both score keys identically: the two mma.sync forms, the word picker
and q's B fragments in the permuted dim order. The fragment layouts, the permutation and the fp8
conversion are documented in scan_mma.cu's header; the op and layouts in scan_common.cuh.
*/
#ifndef SCAN_MMA_OPS_CUH
#define SCAN_MMA_OPS_CUH

#include "scan_common.cuh"

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

#endif  // SCAN_MMA_OPS_CUH
