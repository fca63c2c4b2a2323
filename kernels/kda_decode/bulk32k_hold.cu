/*
KDA decode step, ring design bulk32k_hold. The op, the layouts and the lazy form:
kda_common.cuh; the ring template and its modes: ring.cuh.

32 KiB tiles loaded by the bulk copy engine (cp.async.bulk, one instruction per tile row,
completion on an mbarrier), 3 stages, 256 threads; the faded tile is held in registers so a stage
is refilled before the next wait.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 3 stages with 256 threads allow 2 CTAs per SM (BF16 by its 127 registers and shared memory,
// FP32 by shared memory alone: 3 x 33.1 KiB per CTA).
DEFINE_RING(bulk32k_hold, bf16, bf16, 128, 256, 3, HOLD, BULK, SOLO)
DEFINE_RING(bulk32k_hold, f32, float, 64, 256, 3, HOLD, BULK, SOLO)
