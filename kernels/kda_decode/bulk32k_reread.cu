/*
KDA decode step, ring design bulk32k_reread. The op, the layouts and the lazy form:
kda_common.cuh; the ring template and its modes: ring.cuh.

ring32k_reread loading through the bulk copy engine instead of per-thread 16-byte cp.async.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 2 stages with 128 threads keep 3 CTAs per SM.
DEFINE_RING(bulk32k_reread, bf16, bf16, 128, 128, 2, REREAD, BULK, SOLO)
DEFINE_RING(bulk32k_reread, f32, float, 64, 128, 2, REREAD, BULK, SOLO)
