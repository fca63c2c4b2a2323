/*
sparse_mla_combine: the combine step every split-K design of this folder shares (split_cc.cu,
split_mma.cu include it, so each module exports the same kernel from one copy of the code).

Grid M * 64 (one block per (m, h)), block 128 (4 columns a thread). Merges the splits' partial
states part_acc [M][splits][64][512], part_ml [M][splits][64][2] (max of the scaled scores, sum of
exp(score - max)): gmax = max_s max_s, L = sum_s sum_s exp(max_s - gmax),
out = sum_s part_acc_s exp(max_s - gmax) / L (bf16, round to nearest even), lse = gmax + log L;
no valid slot at all: out = 0, lse = -inf. sparse_mla_combine_bf16p: the same over part_acc in BF16
(split_wgmma_ws.cu's bf16-partials kernel), widened exactly to FP32 before the sums.
*/
#ifndef SPARSE_MLA_COMBINE_CUH
#define SPARSE_MLA_COMBINE_CUH

#include "sparse_mla_common.cuh"

// Four consecutive partial values at p as FP32 (a 16-B load for FP32, an 8-B one for BF16).
__device__ __forceinline__ float4 smla_part4(const float* __restrict__ p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 smla_part4(const bf16* __restrict__ p) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    return make_float4(bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y));
}

template <typename P>
__device__ __forceinline__ void smla_combine(const P* __restrict__ part_acc, const float* __restrict__ part_ml,
                                             bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    const int mh = blockIdx.x;  // m * 64 + h
    const int m = mh / SMLA_HEADS, h = mh % SMLA_HEADS;
    if (m >= M) return;
    const int d = threadIdx.x * 4;
    const size_t ms0 = (size_t)m * (size_t)splits;

    float gmax = neg_inf();
    for (int s = 0; s < splits; ++s) gmax = fmaxf(gmax, part_ml[((ms0 + s) * SMLA_HEADS + h) * 2]);

    bf16* o = out + (size_t)mh * SMLA_DIM + d;
    if (gmax == neg_inf()) {  // no valid slot in the whole row
        st_v2_b32(o, 0u, 0u);
        if (threadIdx.x == 0) lse[mh] = neg_inf();
        return;
    }
    float L = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    for (int s = 0; s < splits; ++s) {
        const size_t r = (ms0 + s) * SMLA_HEADS + h;
        const float mx = part_ml[r * 2];
        if (mx == neg_inf()) continue;  // an empty split: its sum and acc are 0, exp(-inf - gmax) = 0
        const float f = __expf(mx - gmax);
        L = fmaf(part_ml[r * 2 + 1], f, L);
        const float4 v = smla_part4(part_acc + r * SMLA_DIM + d);
        a0 = fmaf(v.x, f, a0);
        a1 = fmaf(v.y, f, a1);
        a2 = fmaf(v.z, f, a2);
        a3 = fmaf(v.w, f, a3);
    }
    // L >= 1: the split holding gmax contributes exp(0) = 1 for its maximal slot.
    st_v2_b32(o, pack_bf16x2(a0 / L, a1 / L), pack_bf16x2(a2 / L, a3 / L));
    if (threadIdx.x == 0) lse[mh] = gmax + __logf(L);
}

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                   bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    smla_combine(part_acc, part_ml, out, lse, M, splits);
}

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine_bf16p(const bf16* __restrict__ part_acc, const float* __restrict__ part_ml,
                         bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    smla_combine(part_acc, part_ml, out, lse, M, splits);
}

#endif  // SPARSE_MLA_COMBINE_CUH
