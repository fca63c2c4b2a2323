/*
Sparse MLA: per-CTA timeline probes of the warp-specialised split kernels (split_wgmma_ws.cu).
tools/cta_timeline.py builds a probed variant's source with -DSPARSE_MLA_TIMELINE through the
variant's own launcher (same grid, inputs, options) and reads what the probes wrote;
kernels/sparse_mla/timeline.py declares the layout (its SMT_* ids and mark names are checked against
this file by a test) and harness/cta_probes.py reads it. A normal build compiles every probe to
nothing (the macros below are empty without the define; the PTX of every kernel of
split_wgmma_ws.cu was compared with and without the probes in, by hand, when they went in). A probed
build can perturb what it measures: the alternate-tile form's spills 12 bytes in it, and FP8's
grow from 44 to 52 (ptxas -v).

CTA b = blockIdx.y * gridDim.x + blockIdx.x writes row b of sparse_mla_timeline, SMT_SLOTS 64-bit
words: slot 0 the SM id + 1, slot 1 the cluster rank + 1 (1: no clusters), for mark n slot 2 + 2 n
the %globaltimer (ns) and 3 + 2 n the SM's clock64, then counter c at slot 2 + 2 SMT_MARKS + c.
Two threads write: the producer's thread 0 (threadIdx.x 0) and the consumers' thread 0 (threadIdx.x
128); both read one SM's clock64, so their marks order on one axis. No mark waits for anything: a
mark after a load waits only where the code after it uses the value (rows0 follows the ballot that
reads tile 0's rows), and a mark after stores says they were issued, not landed.
*/
#pragma once

// Mark ids (keep in step with kernels/sparse_mla/timeline.py MARKS; a test checks)
#define SMT_ENTRY 0      // thread 0: the CTA's first instruction after the shared-memory check
#define SMT_INIT 1       // thread 0: past the CTA barrier that publishes the mbarriers
#define SMT_Q 2          // producer: q's copies issued (after tile 0's rows are known; QEARLY: before the page loads)
#define SMT_ROWS0 3      // producer: tile 0's arena rows known (the ballot over them returned)
#define SMT_ISSUED0 4    // producer: tile 0's copies issued and its full arrive made (the waiting forms, ws / nol2 / fp8: landed too)
#define SMT_ISSUED 5     // producer: the last tile's copies issued (the loop's end)
#define SMT_DRAINED 6    // producer: thread 0's own copies landed (its wait_all; the other producer threads' may still fly)
#define SMT_FULL0 7      // consumer: tile 0 landed (its full wait returned)
#define SMT_DONE0 8      // consumer: tile 0's PV retired (its empty arrive)
#define SMT_LOOP 9       // consumer: the last tile's PV retired
#define SMT_EXIT 10      // consumer: the partial state's stores issued (coop: the in-kernel combine done)
#define SMT_MARKS 11
// Counters (keep in step with timeline.py COUNTERS); stored as value + 1, so 0 is a counter no thread
// wrote (the alternate-tile form's consumers write no full-wait count) and reads as missing
#define SMT_C_FULL_WAIT 0   // consumer thread 0: cycles in its full waits, every tile (tile 0's too)
#define SMT_C_EMPTY_WAIT 1  // producer thread 0: cycles in its empty waits (tiles >= WS_STAGES)
#define SMT_C_TILES 2       // the CTA's tiles
#define SMT_COUNTERS 3

#ifdef SPARSE_MLA_TIMELINE
#include "../common/cta_probes.cuh"
#define SMT_SLOTS 32
#define SMT_CAPACITY (1 << 16)
__device__ unsigned long long sparse_mla_timeline[SMT_CAPACITY];

__device__ __forceinline__ void smt_put(unsigned slot, unsigned long long v) {
    cta_probe_put(sparse_mla_timeline, SMT_SLOTS, SMT_CAPACITY, slot, v);
}
__device__ __forceinline__ void smt_mark(unsigned mark) { cta_probe_mark(sparse_mla_timeline, SMT_SLOTS, SMT_CAPACITY, mark); }
__device__ __forceinline__ void smt_enter() { cta_probe_enter(sparse_mla_timeline, SMT_SLOTS, SMT_CAPACITY, 0); }
__device__ __forceinline__ long long smt_clock() {
    long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    return c;
}
#define SMT_ENTER(who) do { if (who) smt_enter(); } while (0)
#define SMT_MARK(who, mark) do { if (who) smt_mark(mark); } while (0)
#define SMT_COUNT(who, counter, value) do { if (who) smt_put(2u + 2u * SMT_MARKS + (counter), (unsigned long long)(value) + 1ull); } while (0)
// a cycle accumulator: SMT_ACC(a) declares it, SMT_T0(t) takes a start, SMT_ADD(a, t) adds since t
#define SMT_ACC(a) long long a = 0
#define SMT_T0(t) const long long t = smt_clock()
#define SMT_ADD(a, t) (a) += smt_clock() - (t)
#else
#define SMT_ENTER(who) ((void)0)
#define SMT_MARK(who, mark) ((void)0)
#define SMT_COUNT(who, counter, value) ((void)0)
#define SMT_ACC(a) ((void)0)
#define SMT_T0(t) ((void)0)
#define SMT_ADD(a, t) ((void)0)
#endif
