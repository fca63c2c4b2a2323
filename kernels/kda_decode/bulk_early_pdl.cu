/*
KDA decode step, ring designs bulk32k_early_pdl and bulk_head_early_pdl. The op, the layouts and
the lazy form: kda_common.cuh; the ring template and its modes: ring.cuh.

bulk32k_early_pdl: bulk32k_early with ring32k_reread_pdl's programmatic dependent launch (three
state tiles in flight before the wait).
bulk_head_early_pdl: the same with whole-head tiles in both dtypes: BF16 is the same tile, FP32 a
64 KiB one with one CTA of 256 threads per SM. It is the tile the fused convolution needs
(fused_conv_bulk_early_pdl.cu), measured without the convolution to separate the two costs.

One file for both: their BF16 entry points are one instantiation of ring<>, and built in separate
files that instantiation compiles to other machine code in the probe build (-DKDA_TIMELINE: the
ring's shared variables are then kernel-local instead of shared by two kernels).
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 3 stages with 256 threads allow 2 CTAs per SM (BF16 by its 127 registers and shared memory,
// FP32 by shared memory alone: 3 x 33.1 KiB per CTA).
DEFINE_RING(bulk32k_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL)
DEFINE_RING(bulk32k_early_pdl, f32, float, 64, 256, 3, HOLD_EARLY, BULK, PDL)
// FP32: 64 KiB tiles, 3 stages = 196 KiB, one CTA per SM.
DEFINE_RING(bulk_head_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL)
DEFINE_RING(bulk_head_early_pdl, f32, float, 128, 256, 3, HOLD_EARLY, BULK, PDL)
