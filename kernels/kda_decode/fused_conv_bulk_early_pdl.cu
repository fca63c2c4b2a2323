/*
KDA decode step with its short convolution fused (component kda_decode_conv), design
fused_conv_bulk_early_pdl. The step's op and layouts: kda_common.cuh; the convolution:
short_conv.cuh; the ring: ring.cuh.

One launch: bulk32k_early_pdl's ring with the three short convolutions in each tile's prologue
(ring<..., CONV>): taps copied one tile ahead by the bulk engine, weights read once per CTA, taps
shifted in place, q/k/v kept in float. Whole-head tiles in both dtypes, so one CTA owns a head's taps.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// The ring with the short convolution fused (FUSE = CONV): the kda_decode_conv component. Whole-head
// tiles in both dtypes (see the static_assert in ring): BF16 is bulk32k_early_pdl's shape; FP32 has
// 64 KiB tiles, so 3 stages (196 KiB) leave one CTA of 256 threads per SM with the same 192 KiB in
// flight per SM as two CTAs of 32 KiB tiles. Argument order:
//   x_q, x_k, x_v, conv_state, conv_w, g, beta, S, o, M, H, eps, scale
#define CONV_ARGS(T)                                                                             \
    const bf16* __restrict__ x_q, const bf16* __restrict__ x_k, const bf16* __restrict__ x_v,    \
        bf16* __restrict__ conv_state, const bf16* __restrict__ conv_w,                          \
        const float* __restrict__ g, const float* __restrict__ beta, T* __restrict__ S,          \
        bf16* __restrict__ o, int M, int H, float eps, float scale
#define DEFINE_RING_CONV(NAME, SUFFIX, T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP, FUSE)      \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(CONV_ARGS(T)) {   \
        ring<T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP, FUSE>(x_q, x_k, x_v, g, beta, S, o, M, H, \
                                                                    eps, scale, conv_state, conv_w); \
    }
DEFINE_RING_CONV(fused_conv_bulk_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL, CONV)
DEFINE_RING_CONV(fused_conv_bulk_early_pdl, f32, float, 128, 256, 3, HOLD_EARLY, BULK, PDL, CONV)
