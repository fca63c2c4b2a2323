/*
DSA top-k, the union select of topk_union.cu (its header comment is the design; the same union_body,
the same decisions, so topk_model.select_row_union emulates these too) in CTAs of half an SM: 512
threads, two CTAs an SM (kernels `dsa_topk_union_half_c<CS>`, variant radix_union_half, and
`dsa_topk_union_half_own_c<CS>`, radix_union_half_own; clusters of 6, 7 or 8, topk_model.pick_union_half).

Why: at 512 of 65536 pooled, M = 32, radix_union's clusters of 3 one-SM CTAs read the rows with 96
SMs, and its read (3.6 us of the H200 timeline) runs at a rate an SM, not at the HBM's; clusters of 4
do not all fit at once (30 on the H100 and H200) and clusters of 8 one-SM CTAs only 15. At two CTAs
an SM (512 threads and 100000 B each) the driver fits 32 clusters of 7 at once and 30 of 8 (H100,
d62b05c, reports/2026-12-07-sparse_mla-h100-215508/cluster_slots.txt): clusters of 7 hold M = 32's
rows in 224 CTAs on ~112 SMs. Predicted: ~0.5 us off the read (75 KiB an SM against 87), less what
7 ranks add to the bound exchange and the push (TOPK_NOTES.md, Stop 40).
Measured (H100, b47346a, held, 512 of 65536 pooled; TOPK_NOTES.md, Stop 41): correct (76 GPU tests),
and slower where it was meant to help: at M = 32 13.31 us against radix_union's 12.99 and
radix_union_own's 12.74; the own form in halves 14.46 (7 ranks' bounds disagree in ~4 % of rows in the
CPU model, so most launches hold a row that pays the second round). At M = 8 (clusters of 8) 10.46,
level with the fastest form there; at M = 64 two waves (39 clusters of 6 at once), 21.1. Kept as
measured variants; which phase grew at M = 32 is not yet measured (the timeline).

Geometry (the launcher reads these #defines from this file): 6 float4 a thread (12288 keys a CTA,
65536 in clusters of 6 and more), 2 of them in registers (64 registers a thread at two CTAs an SM,
as at one CTA of 1024), 4 held in shared memory (32 KiB), the union's 4096 pairs after them; the
fallback's ring 4 batches of 2 float4 a thread (64 KiB). Static OneShared (~45 KB) + 64 KiB
dynamic: two CTAs in an SM's 228 KiB. Every search and loop of topk_onecta.cuh / topk_select.cuh is
written for 512 threads as for 1024 (bins a thread, warps' totals, the tie bitmap's words).
*/

#define ONE_THREADS 512                  // a CTA's threads (topk_onecta.cuh's default is 1024)
#define S2_RING_BYTES 65536              // the fallback's ring: 4 batches x 2 float4 x 512 threads x 16 B
#define UNI_CTAS_PER_SM 2                // __launch_bounds__(512, 2): at most 64 registers a thread
#define UNI_VECS 6                       // float4 a thread: UNI_REG_VECS in registers, the rest in shared memory
#define UNI_REG_VECS 2                   // float4 a thread held in registers
#define UNI_KEYS 12288                   // keys a CTA at most: UNI_VECS x 4 x ONE_THREADS
#define UNI_HELD_BYTES 32768             // the slice's shared-memory part (float4 q >= UNI_REG_VECS)
#define UNI_DYN_BYTES 65536              // the held part, then the union; the fallback's ring over both
#define UNI_CAP 4096                     // (key, row index) pairs the union holds
// union_body's bulk form reads these; this file instantiates no bulk kernel
#define UNI_BULK_HELD_BYTES 49152        // UNI_KEYS x 4 B
#define UNI_BULK_DYN_BYTES 81920         // the slice, then the union

#include "topk_union.cuh"   // union_body and DSA_TOPK_UNION_FORM

#define DSA_TOPK_UNION_HALF_KERNEL(CS)                                 \
    DSA_TOPK_UNION_FORM(dsa_topk_union_half, CS, false, false)         \
    DSA_TOPK_UNION_FORM(dsa_topk_union_half_own, CS, false, true)

DSA_TOPK_UNION_HALF_KERNEL(6)
DSA_TOPK_UNION_HALF_KERNEL(7)
DSA_TOPK_UNION_HALF_KERNEL(8)
