/*
sparse_mla_combine: the combine step every split-K design of this folder shares (split_cc.cu,
split_mma.cu include it, so each module exports the same kernel from one copy of the code).

Grid M * 64 (one block per (m, h)), block 128 (4 columns a thread); the splits' loads batched
(COMBINE_BATCH, below). Merges the splits' partial
states part_acc [M][splits][64][512], part_ml [M][splits][64][2] (max of the scaled scores, sum of
exp(score - max)): gmax = max_s max_s, L = sum_s sum_s exp(max_s - gmax),
out = sum_s part_acc_s exp(max_s - gmax) / L (bf16, round to nearest even), lse = gmax + log L;
no valid slot at all: out = 0, lse = -inf.
*/
#ifndef SPARSE_MLA_COMBINE_CUH
#define SPARSE_MLA_COMBINE_CUH

#include "sparse_mla_common.cuh"

// Splits whose part_ml / part_acc loads a thread issues together, before it uses any: the old loop
// loaded a split's max, branched on it, then loaded its acc, one split after another, so a block
// waited ~3 dependent L2 round trips a split (M = 32, 4 splits: ~6.9 us inside the DSA layer step
// for 16 MiB of partials, reports/2026-12-04-dsa_layer-h200-150052). Now each batch of
// COMBINE_BATCH splits is one round trip for the maxima and one for the (max, sum) pairs and the
// accumulators. The arithmetic is the old one: gmax a max (exact in any order), L and the column
// sums fmaf chains in split order, an empty split skipped.
#define COMBINE_BATCH 8

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                   bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    const int mh = blockIdx.x;  // m * 64 + h
    const int m = mh / SMLA_HEADS, h = mh % SMLA_HEADS;
    if (m >= M) return;
    const int d = threadIdx.x * 4;
    const size_t ms0 = (size_t)m * (size_t)splits;

    float gmax = neg_inf();
    for (int s0 = 0; s0 < splits; s0 += COMBINE_BATCH) {
        float mx[COMBINE_BATCH];
#pragma unroll
        for (int u = 0; u < COMBINE_BATCH; ++u)
            mx[u] = s0 + u < splits ? part_ml[((ms0 + s0 + u) * SMLA_HEADS + h) * 2] : neg_inf();
#pragma unroll
        for (int u = 0; u < COMBINE_BATCH; ++u) gmax = fmaxf(gmax, mx[u]);
    }

    bf16* o = out + (size_t)mh * SMLA_DIM + d;
    if (gmax == neg_inf()) {  // no valid slot in the whole row
        st_v2_b32(o, 0u, 0u);
        if (threadIdx.x == 0) lse[mh] = neg_inf();
        return;
    }
    float L = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    for (int s0 = 0; s0 < splits; s0 += COMBINE_BATCH) {
        float2 ml[COMBINE_BATCH];
        float4 v[COMBINE_BATCH];
#pragma unroll
        for (int u = 0; u < COMBINE_BATCH; ++u) {
            if (s0 + u < splits) {
                const size_t r = (ms0 + s0 + u) * SMLA_HEADS + h;
                ml[u] = *reinterpret_cast<const float2*>(part_ml + r * 2);
                v[u] = *reinterpret_cast<const float4*>(part_acc + r * SMLA_DIM + d);
            } else {
                ml[u] = make_float2(neg_inf(), 0.f);
                v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int u = 0; u < COMBINE_BATCH; ++u) {
            if (ml[u].x == neg_inf()) continue;  // an empty split (or past the last): its sum and acc are 0
            const float f = __expf(ml[u].x - gmax);
            L = fmaf(ml[u].y, f, L);
            a0 = fmaf(v[u].x, f, a0);
            a1 = fmaf(v[u].y, f, a1);
            a2 = fmaf(v[u].z, f, a2);
            a3 = fmaf(v[u].w, f, a3);
        }
    }
    // L >= 1: the split holding gmax contributes exp(0) = 1 for its maximal slot.
    st_v2_b32(o, pack_bf16x2(a0 / L, a1 / L), pack_bf16x2(a2 / L, a3 / L));
    if (threadIdx.x == 0) lse[mh] = gmax + __logf(L);
}

#endif  // SPARSE_MLA_COMBINE_CUH
