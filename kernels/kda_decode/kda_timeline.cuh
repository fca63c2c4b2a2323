/*
KDA decode step: per-CTA timeline probes of the ring kernels (ring.cuh). The op and layouts:
kda_common.cuh. kernels/kda_decode/timeline.py reads what they write (its TL_* constants are checked
against this file by a test). Every design file built with the probes holds its own kda_timeline and
kda_tl_states, so the tool reads them from the module the launched kernel came from.
*/
#ifndef KDA_TIMELINE_CUH
#define KDA_TIMELINE_CUH

// Timeline probes (tools/kda_timeline.py builds with -DKDA_TIMELINE; a normal build compiles them to
// nothing, so the swept kernels' machine code is unchanged). Thread 0 of each CTA writes
// %globaltimer (ns) into row (layer * gridDim.x + block) of kda_timeline, TL_SLOTS words a row:
// slot 0 entry, 1 exit, 2 the SM id, 3 + 2n when the CTA's n-th tile is in shared memory, 4 + 2n
// when thread 0 has issued its stores. The layer is the index of the launch's state pointer in
// kda_tl_states, which the tool fills for a chain of launches (their CTAs overlap in time under
// PDL); a single launch, or a state not listed, is layer 0.
#ifdef KDA_TIMELINE
#define TL_SLOTS 256
#define TL_CAPACITY (1 << 20)
#define TL_MAX_LAYERS 64
__device__ unsigned long long kda_timeline[TL_CAPACITY];
__device__ const void* kda_tl_states[TL_MAX_LAYERS];
__device__ __forceinline__ unsigned& tl_row() {
    __shared__ unsigned row;  // written and read by thread 0 only
    return row;
}
__device__ __forceinline__ void tl_enter(const void* state) {
    if (threadIdx.x != 0) return;
    unsigned layer = 0;
    for (unsigned i = 0; i < TL_MAX_LAYERS; ++i)
        if (kda_tl_states[i] == state) { layer = i; break; }
    tl_row() = layer * gridDim.x + blockIdx.x;
}
__device__ __forceinline__ void tl_put(int slot, unsigned long long value) {
    if (threadIdx.x != 0 || slot >= TL_SLOTS) return;
    const long long at = (long long)tl_row() * TL_SLOTS + slot;
    if (at < TL_CAPACITY) kda_timeline[at] = value;
}
__device__ __forceinline__ unsigned long long tl_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ unsigned tl_smid() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
#define TL_ENTER(state) tl_enter(state)
#define TL_MARK(slot) tl_put((slot), tl_now())
#define TL_SM() tl_put(2, tl_smid())
#else
#define TL_ENTER(state) ((void)0)
#define TL_MARK(slot) ((void)0)
#define TL_SM() ((void)0)
#endif

#endif  // KDA_TIMELINE_CUH
