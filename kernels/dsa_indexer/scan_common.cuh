/*
DSA lightning indexer scan (GLM-5.3-Flash, seed 003 §5.2 / §8.5): the op, its index conventions
and the helpers every scan design in this folder shares. scan_spec.py declares the same contract.

Per stream m (one query token), candidate c:
    I[m][c] = sum_{j < 32} w[m][j] * relu(q[m][j] . key(m, c))      for c < eligible[m]
    I[m][c] = -inf                                                    for eligible[m] <= c < C
Layouts (row-major, contiguous):
    q        [M][32][128] bf16 (raw bits)         w         [M][32] float32 (signed)
             (query_dtype fp8, scan_mma_e4m3: q codes [M][32][128] e4m3 + q_scales [M][32] float32 > 0)
    eligible [M] int32 (<= C)                      scores    [M][C] float32 (every element written)
    keys, key_layout cand_dim: [M][C][128]        a key contiguous (256 B bf16, 128 B fp8 codes)
          key_layout dim_cand: [M][128][Cpad]     Cpad = C rounded up to 64 (pad columns never scored)
    scales   [M][C] float32, fp8 only: key(m, c) = decode_e4m3(codes) * scales[m][c]; every scale > 0,
             so relu(s x) = s relu(x) and a kernel multiplies the head sum by s.
Offsets are size_t: M * C * 128 passes 2^31 at M = 32, C = 1M.

bf16 and e4m3 are handled by bit manipulation / PTX cvt (no <cuda_bf16.h>, no header at all), so
NVRTC compiles every file as is. The bf16 and ld.global.nc helpers below are copied from
kernels/sparse_mla/sparse_mla_common.cuh (a few lines; a header shared across families is not ours
to create).
*/
#ifndef SCAN_COMMON_CUH
#define SCAN_COMMON_CUH
#include "../common/device.cuh"  // neg_inf, bf_lo / bf_hi

typedef unsigned short bf16;  // raw bf16 bits
typedef decltype(sizeof(0)) size_t;

#define SCAN_HEADS 32
#define SCAN_DIM 128
#define FULL_MASK 0xffffffffu


// Two e4m3 codes (the low byte is the lower-addressed element) -> two f16 in one word, the low
// byte's value in the low half (cvt.rn.f16x2.e4m3x2, sm_89+; exact: every e4m3 value is an f16).
__device__ __forceinline__ unsigned e4m3x2_to_f16x2(unsigned short codes) {
    unsigned r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(codes));
    return r;
}

// The f16x2 word of 2 codes -> two floats (low half first).
__device__ __forceinline__ void f16x2_to_f32(unsigned h2, float& lo, float& hi) {
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }"
        : "=f"(lo), "=f"(hi) : "r"(h2));
}


// Read-only global loads (nothing in a launch writes q, w, the keys or the scales). volatile: a
// design that issues the next tile's loads before this tile's math keeps that order.
__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ uint2 ld_nc_v2(const void* p) {
    uint2 r;
    asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

__device__ __forceinline__ unsigned ld_nc_u32(const void* p) {
    unsigned r;
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ unsigned ld_nc_u16(const void* p) {
    unsigned short r;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(r) : "l"(p));
    return (unsigned)r;
}

__device__ __forceinline__ float ld_nc_f32(const float* p) {
    float r;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ int ld_nc_s32(const int* p) {
    int r;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

#endif  // SCAN_COMMON_CUH
