/*
DSA top-k: per-CTA timeline probes of the top-k kernels (topk_radix.cu, topk_resident.cu,
topk_onecta.cu, topk_split.cu). tools/cta_timeline.py builds a variant's source with
-DDSA_TOPK_TIMELINE through the variant's own launcher (same grid, inputs) and reads what the probes wrote;
kernels/dsa_indexer/topk_timeline.py declares its layout, read by harness/cta_probes.py (its TK_* constants and mark names are checked
against this file by a test). A normal build compiles every probe to nothing, so the swept kernels'
machine code is unchanged (tools/sass_diff.py).

Thread 0 of CTA b = blockIdx.y * gridDim.x + blockIdx.x writes row b of dsa_topk_timeline,
TK_SLOTS 64-bit words: slot 0 the SM id + 1, slot 1 the cluster rank + 1, then for mark n (the
TK_* ids below) slot 2 + 2 n the %globaltimer (ns; comparable across SMs) and slot 3 + 2 n the
SM's clock64 (cycles; finer than the globaltimer within one CTA). Unwritten slots stay 0 (the tool
zeroes the buffer before each launch). A mark is placed right after the block-wide barrier that
ends its phase where there is one (so it is the CTA's time, not thread 0's alone); the exceptions
say so below. The tool orders a CTA's marks by clock64 and names each phase by the mark ending it.
*/
#pragma once

// Mark ids (keep in step with kernels/dsa_indexer/topk_timeline.py MARKS; a test checks)
#define TK_ENTRY 0     // first instruction after the launch-shape check
#define TK_ISSUE 1     // resident: every load issued and the histograms zeroed (CTA barrier); sample: the bound known and thread 0's ring copies issued (no barrier)
#define TK_READ 2      // pass 1 over the row done: digit 0 counted (bound: thread 0's pairs, before the barrier)
#define TK_BOUND 3     // bound: the cluster's lower bound tlb known (barrier.cluster + DSMEM min); sample: its sample counted (CTA barrier); union: the bound's bin found over the cluster's thread maxes (CTA barrier)
#define TK_PASS2 4     // the second pass over the row done: buffer filled (onecta: members above the bin written; union: the keys >= the bound pushed to rank 0, barrier.cluster)
#define TK_SYNC0 5     // digit 0: the cluster barrier (or CTA barrier) that publishes the histograms passed
#define TK_DIGIT0 6    // digit 0 decided: b0 and the count above it (union: this CTA's bound b_r found)
#define TK_SYNC1 7
#define TK_DIGIT1 8
#define TK_SYNC2 9
#define TK_DIGIT2 10   // T known
#define TK_COUNTS 11   // quota, output base and F known (the counts' barrier passed)
#define TK_WRITE 12    // thread 0's members written and the -1 fill issued (thread 0's view: no barrier; union: thread 0's pushes issued)
#define TK_EXIT 13     // after the exit barrier (cluster), the last instruction
#define TK_FINAL 14    // split: the row's last CTA has written the final select (stage 2); union: rank 0 has written the row
#define TK_FSTART 15   // split2: the row's last CTA past the hand-off (counter, fences, barrier)
#define TK_FREAD 16    // split2's final select: pass 1 over the candidates done (digit 0 counted)
#define TK_FPASS2 17   // split2's final select: pass 2 done (members above the bin written, bin buffered)
#define TK_FDIGITS 18  // split2's final select: digits 0..2 decided (T known); union: the window's bin B decided
#define TK_SAMPLE 19   // sample: the sampled bound t_est known (and the histograms reset: CTA barrier)
#define TK_STREAM 20   // sample: the one pass over the slice done, the keys >= t_est buffered (CTA barrier)
#define TK_MARKS 21

#ifdef DSA_TOPK_TIMELINE
#include "../common/cta_probes.cuh"
#define TK_SLOTS 44
#define TK_CAPACITY (1 << 16)
__device__ unsigned long long dsa_topk_timeline[TK_CAPACITY];

__device__ __forceinline__ void tk_put(unsigned slot, unsigned long long v) {
    if (threadIdx.x == 0) cta_probe_put(dsa_topk_timeline, TK_SLOTS, TK_CAPACITY, slot, v);
}
__device__ __forceinline__ void tk_mark(unsigned mark) {
    if (threadIdx.x == 0) cta_probe_mark(dsa_topk_timeline, TK_SLOTS, TK_CAPACITY, mark);
}
__device__ __forceinline__ void tk_enter(unsigned rank) {
    if (threadIdx.x == 0) cta_probe_enter(dsa_topk_timeline, TK_SLOTS, TK_CAPACITY, rank);
}
#define TK_ENTER(rank) tk_enter(rank)
#define TK_MARK(mark) tk_mark(mark)
#else
#define TK_ENTER(rank) ((void)0)
#define TK_MARK(mark) ((void)0)
#endif
