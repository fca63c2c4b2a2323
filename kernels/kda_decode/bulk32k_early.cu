/*
KDA decode step, ring design bulk32k_early. The op, the layouts and the lazy form:
kda_common.cuh; the ring template and its modes: ring.cuh.

bulk32k_hold refilling a stage as soon as its tile is in registers (after the column-partials
barrier) instead of at the next tile's top: one more tile in flight during the sums, the write and
the wait.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 3 stages with 256 threads allow 2 CTAs per SM (BF16 by its 127 registers and shared memory,
// FP32 by shared memory alone: 3 x 33.1 KiB per CTA).
DEFINE_RING(bulk32k_early, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, SOLO)
DEFINE_RING(bulk32k_early, f32, float, 64, 256, 3, HOLD_EARLY, BULK, SOLO)
