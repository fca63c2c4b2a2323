/*
KDA decode step, ring design ring32k_reread_pdl. The op, the layouts and the lazy form:
kda_common.cuh; the ring template and its modes: ring.cuh.

ring32k_reread as a programmatic dependent of the layer before it in a step (LaunchOverlap,
kda_common.cuh): its CTAs fill SMs as that layer's CTAs exit and load their first state tiles before
waiting for it, so the launch floor and the ramp overlap the previous tail.
*/

#include "kda_common.cuh"
#include "ring.cuh"

// 2 stages with 128 threads keep 3 CTAs per SM.
DEFINE_RING(ring32k_reread_pdl, bf16, bf16, 128, 128, 2, REREAD, CPASYNC, PDL)
DEFINE_RING(ring32k_reread_pdl, f32, float, 64, 128, 2, REREAD, CPASYNC, PDL)
