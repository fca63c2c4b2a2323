/*
KDA decode step, ring design ring32k_reread. The op, the layouts and the lazy form:
kda_common.cuh; the ring template and its modes: ring.cuh.

32 KiB tiles and 128 threads owning 16 rows each, a 2-stage cp.async ring; the tile is re-read
from shared memory for the write instead of held, so few registers and 3 CTAs per SM.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 2 stages with 128 threads keep 3 CTAs per SM.
DEFINE_RING(ring32k_reread, bf16, bf16, 128, 128, 2, REREAD, CPASYNC, SOLO)
DEFINE_RING(ring32k_reread, f32, float, 64, 128, 2, REREAD, CPASYNC, SOLO)
