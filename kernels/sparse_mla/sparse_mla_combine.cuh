/*
sparse_mla_combine: the combine step every split-K design of this folder shares (split_cc.cu,
split_mma.cu include it, so each module exports the same kernel from one copy of the code).

Grid M * 64 (one block per (m, h)), block 128 (4 columns a thread). Merges the splits' partial
states part_acc [M][splits][64][512], part_ml [M][splits][64][2] (max of the scaled scores, sum of
exp(score - max)): gmax = max_s max_s, L = sum_s sum_s exp(max_s - gmax),
out = sum_s part_acc_s exp(max_s - gmax) / L (bf16, round to nearest even), lse = gmax + log L;
no valid slot at all: out = 0, lse = -inf. sparse_mla_combine_bf16p: the same over part_acc in BF16
(split_wgmma_ws.cu's bf16-partials kernel), widened exactly to FP32 before the sums.
sparse_mla_combine_batched / _bf16p_batched: the same results with a batch of splits' loads in flight
at once (smla_combine_batched, below).
*/
#ifndef SPARSE_MLA_COMBINE_CUH
#define SPARSE_MLA_COMBINE_CUH

#include "sparse_mla_common.cuh"

// The combine's grid probes (-DSPARSE_MLA_TIMELINE, only in tools/cta_timeline.py's builds): the split
// kernel's per-CTA marks (sparse_mla_timeline.cuh) end where the combine begins, and the gap between
// the two grids, the one thing a programmatic pair changes, is in neither. So thread 0 of each combine
// block folds its %globaltimer at three marks (SMC_ENTRY: its first instruction; SMC_WAITED: past
// griddepcontrol.wait, at once in a plain launch; SMC_EXIT: its stores issued) into the grid's first
// (word 2 n, atomicMin) and last (word 2 n + 1, atomicMax) time, and counts its blocks in the last word:
// one grid's span per mark, 2 x 3 + 1 words (kernels/sparse_mla/timeline.py COMBINE_PROBE reads them;
// the tool sets the first-time words to all ones before each launch). Nothing without the define.
#define SMC_ENTRY 0
#define SMC_WAITED 1
#define SMC_EXIT 2
#define SMC_MARKS 3
#ifdef SPARSE_MLA_TIMELINE
__device__ unsigned long long sparse_mla_combine_timeline[2 * SMC_MARKS + 1];
__device__ __forceinline__ void smc_mark(unsigned mark) {
    if (threadIdx.x != 0) return;
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g)::"memory");
    atomicMin(sparse_mla_combine_timeline + 2 * mark, g);
    atomicMax(sparse_mla_combine_timeline + 2 * mark + 1, g);
    if (mark == SMC_EXIT) atomicAdd(sparse_mla_combine_timeline + 2 * SMC_MARKS, 1ull);
}
#define SMC_MARK(mark) smc_mark(mark)
#else
#define SMC_MARK(mark) ((void)0)
#endif

// Four consecutive partial values at p as FP32 (a 16-B load for FP32, an 8-B one for BF16).
__device__ __forceinline__ float4 smla_part4(const float* __restrict__ p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 smla_part4(const bf16* __restrict__ p) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    return make_float4(bf_lo(w.x), bf_hi(w.x), bf_lo(w.y), bf_hi(w.y));
}

// What both combines know of their block's row (m, h) before the sums: mh = m * 64 + h, h, the row's
// first split ms0, this thread's 4 output columns o and the row's gmax (the largest of its splits' maxes).
struct SmlaCombineRow {
    int mh, h;
    size_t ms0;
    bf16* o;
    float gmax;
};

// Block (m, h)'s row; false where the block has nothing left to do: m >= M, or no split of the row has
// a valid slot (gmax -inf), where the block writes its zeros and -inf first.
__device__ __forceinline__ bool smla_combine_row(const float* __restrict__ part_ml, bf16* __restrict__ out,
                                                 float* __restrict__ lse, int M, int splits, SmlaCombineRow& row) {
    const int mh = blockIdx.x;  // m * 64 + h
    const int m = mh / SMLA_HEADS, h = mh % SMLA_HEADS;
    if (m >= M) return false;
    const int d = threadIdx.x * 4;
    const size_t ms0 = (size_t)m * (size_t)splits;
    bf16* o = out + (size_t)mh * SMLA_DIM + d;
    row = SmlaCombineRow{mh, h, ms0, o, neg_inf()};
    float& gmax = row.gmax;
    for (int s = 0; s < splits; ++s) gmax = fmaxf(gmax, part_ml[((ms0 + s) * SMLA_HEADS + h) * 2]);
    if (gmax == neg_inf()) {  // no valid slot in the whole row
        st_v2_b32(o, 0u, 0u);
        if (threadIdx.x == 0) lse[mh] = neg_inf();
        return false;
    }
    return true;
}

template <typename P>
__device__ __forceinline__ void smla_combine(const P* __restrict__ part_acc, const float* __restrict__ part_ml,
                                             bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SmlaCombineRow row;
    if (!smla_combine_row(part_ml, out, lse, M, splits, row)) return;
    const auto [mh, h, ms0, o, gmax] = row;
    const int d = threadIdx.x * 4;
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

// smla_combine with every split's loads of a batch of SMLA_COMBINE_BATCH issued before any is used.
// Why: smla_combine's loop reads a split's max, then (a dependent branch) its acc, so a block makes
// 2 x splits L2 round trips in series, and the grid (M x 64 blocks of 128 threads, one wave) lasts as
// long as one block's chain: 32 round trips at M = 8 (16 splits), 8 at M = 32, where the H100 timeline
// put ~12 us of the event outside the split kernel at M = 8 and ~11 at M = 32. Here a batch's maxes,
// sums and accs load at once (an empty split's acc is loaded and its terms dropped by selects, not a
// branch), so a batch is one round trip after gmax's. The sums run in smla_combine's order, with the
// same fmaf's: the same bits out. __launch_bounds__(128, 16): 16 blocks an SM as smla_combine's 32
// registers allow, so M = 32's 2048 blocks stay one wave on 132 SMs (48 registers: 10 blocks, two waves).
#define SMLA_COMBINE_BATCH 4   // 8 spills within the 32 registers that keep 16 blocks an SM
template <typename P>
__device__ __forceinline__ void smla_combine_batched(const P* __restrict__ part_acc, const float* __restrict__ part_ml,
                                                     bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    constexpr int B = SMLA_COMBINE_BATCH;
    SmlaCombineRow row;
    if (!smla_combine_row(part_ml, out, lse, M, splits, row)) return;
    const auto [mh, h, ms0, o, gmax] = row;
    const int d = threadIdx.x * 4;
    float L = 0.f, a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    for (int s0 = 0; s0 < splits; s0 += B) {
        float mx[B], sm[B];
        float4 v[B];
#pragma unroll
        for (int i = 0; i < B; ++i) {  // past the last split: split s0's rows again, dropped below
            const size_t r = (ms0 + (s0 + i < splits ? s0 + i : s0)) * SMLA_HEADS + h;
            mx[i] = part_ml[r * 2];
            sm[i] = part_ml[r * 2 + 1];
            v[i] = smla_part4(part_acc + r * SMLA_DIM + d);
        }
#pragma unroll
        for (int i = 0; i < B; ++i) {
            // an empty split (max -inf: its sum and acc are 0) or one past the last adds nothing
            const bool live = s0 + i < splits && mx[i] != neg_inf();
            const float f = live ? __expf(mx[i] - gmax) : 0.f;
            L = live ? fmaf(sm[i], f, L) : L;
            a0 = live ? fmaf(v[i].x, f, a0) : a0;
            a1 = live ? fmaf(v[i].y, f, a1) : a1;
            a2 = live ? fmaf(v[i].z, f, a2) : a2;
            a3 = live ? fmaf(v[i].w, f, a3) : a3;
        }
    }
    st_v2_b32(o, pack_bf16x2(a0 / L, a1 / L), pack_bf16x2(a2 / L, a3 / L));
    if (threadIdx.x == 0) lse[mh] = gmax + __logf(L);
}

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                   bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMC_MARK(SMC_WAITED);
    smla_combine(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine_bf16p(const bf16* __restrict__ part_acc, const float* __restrict__ part_ml,
                         bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMC_MARK(SMC_WAITED);
    smla_combine(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

extern "C" __global__ void __launch_bounds__(128, 16)
sparse_mla_combine_batched(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                           bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMC_MARK(SMC_WAITED);
    smla_combine_batched(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

extern "C" __global__ void __launch_bounds__(128, 16)
sparse_mla_combine_bf16p_batched(const bf16* __restrict__ part_acc, const float* __restrict__ part_ml,
                                 bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMC_MARK(SMC_WAITED);
    smla_combine_batched(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

// The combines of a programmatic pair (split_wgmma_ws.cu, smla_pdl_enter): launched as programmatic
// dependents of the split kernel, they start before it ends and wait here for its completion and
// memory before the first read of its partials. Launched plainly the wait is a no-op. griddepcontrol
// needs sm_90, and this header is compiled for older targets too (split_mma.cu and the rest): there the
// two kernels trap, as the wgmma kernels do without sm_90a.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SMLA_GRID_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define SMLA_GRID_WAIT() __trap()
#endif
extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine_pdl(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                       bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMLA_GRID_WAIT();
    SMC_MARK(SMC_WAITED);
    smla_combine(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

extern "C" __global__ void __launch_bounds__(128)
sparse_mla_combine_bf16p_pdl(const bf16* __restrict__ part_acc, const float* __restrict__ part_ml,
                             bf16* __restrict__ out, float* __restrict__ lse, int M, int splits) {
    SMC_MARK(SMC_ENTRY);
    SMLA_GRID_WAIT();
    SMC_MARK(SMC_WAITED);
    smla_combine(part_acc, part_ml, out, lse, M, splits);
    SMC_MARK(SMC_EXIT);
}

#endif  // SPARSE_MLA_COMBINE_CUH
