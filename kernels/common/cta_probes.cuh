// Per-CTA clock probes, shared by the families' timeline builds (dsa_indexer/topk_timeline.cuh,
// sparse_mla/sparse_mla_timeline.cuh), which own the buffer, its size and the mark ids; the layout
// they write is harness/cta_probes.py's: row b = blockIdx.y * gridDim.x + blockIdx.x of `slots`
// words, slot 0 the SM id + 1, slot 1 the cluster rank + 1, mark n's %globaltimer (ns) at 2 + 2 n
// and its clock64 at 3 + 2 n. Included only by a probed build; the caller picks the writing thread.
#ifndef ATTNBENCH_COMMON_CTA_PROBES_CUH
#define ATTNBENCH_COMMON_CTA_PROBES_CUH

__device__ __forceinline__ void cta_probe_put(unsigned long long* buf, unsigned slots, unsigned long long capacity,
                                              unsigned slot, unsigned long long v) {
    const unsigned long long at = ((unsigned long long)blockIdx.y * gridDim.x + blockIdx.x) * slots + slot;
    if (slot < slots && at < capacity) buf[at] = v;
}
__device__ __forceinline__ void cta_probe_mark(unsigned long long* buf, unsigned slots, unsigned long long capacity,
                                               unsigned mark) {
    unsigned long long g, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g)::"memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    cta_probe_put(buf, slots, capacity, 2u + 2u * mark, g);
    cta_probe_put(buf, slots, capacity, 3u + 2u * mark, c);
}
// slots 0 and 1, then mark 0 (the entry)
__device__ __forceinline__ void cta_probe_enter(unsigned long long* buf, unsigned slots, unsigned long long capacity,
                                                unsigned rank) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    cta_probe_put(buf, slots, capacity, 0, sm + 1ull);
    cta_probe_put(buf, slots, capacity, 1, rank + 1ull);
    cta_probe_mark(buf, slots, capacity, 0);
}

#endif  // ATTNBENCH_COMMON_CTA_PROBES_CUH
