// Hopper warpgroup-MMA ordering helpers the wgmma designs of every family issue the same way
// (sparse_mla_wgmma.cuh, dsa_indexer/scan_wgmma.cu). Include it only where the build targets
// sm_90a (inside the family's own guard): plain sm_90 PTX has no wgmma.
#ifndef ATTNBENCH_COMMON_WGMMA_CUH
#define ATTNBENCH_COMMON_WGMMA_CUH

// This thread's generic-proxy shared-memory writes (st.shared, cp.async landed) made visible to
// the async proxy that wgmma reads its shared operands through.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Before a batch of wgmmas whose accumulators or register operands ordinary instructions wrote.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Wait until at most N of this warp's committed wgmma groups are pending (groups retire in order).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Named barrier ID over N threads (a multiple of 32): bar.sync orders the shared-memory accesses
// of the threads that pass it as __syncthreads does; bar.arrive counts this thread in without
// waiting (a producer's side of a producer / consumer hand-off: its accesses before the arrive are
// ordered before the accesses of the threads that bar.sync on the same barrier after it).
template <int ID, int N>
__device__ __forceinline__ void named_sync() {
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(N) : "memory");
}
template <int ID, int N>
__device__ __forceinline__ void named_arrive() {
    asm volatile("bar.arrive %0, %1;" ::"n"(ID), "n"(N) : "memory");
}

#endif  // ATTNBENCH_COMMON_WGMMA_CUH
