// Device helpers every kernel family compiled the same (one definition: kda_decode, sparse_mla,
// dsa_indexer and dsa_layer include this as "../common/device.cuh"; NVRTC and the compile tests
// put only the including file's folder on the include path, and every family folder sits beside
// this one, so a family's header reaches it by that relative name and harness/sources.py hashes
// it with every source that includes it). Only helpers whose PTX was the same in every family
// moved here; the ones that differ (the volatile ld.global.nc loads of scan_common.cuh, each
// family's cp.async forms) stay with their family.
#ifndef ATTNBENCH_COMMON_DEVICE_CUH
#define ATTNBENCH_COMMON_DEVICE_CUH

// -inf as a bit pattern (0xff800000): no <math.h> INFINITY, and fast-math cannot fold it.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// The two bf16 of one 32-bit word as floats: the lower-addressed element is the low half.
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }

// Two floats rounded to nearest-even bf16 (NaN stays NaN), packed: lo in the low half (the
// lower-addressed element); one instruction (cvt.rn.bf16x2.f32, sm_80+) instead of about six an
// element, a visible share of the instruction budget where a kernel stores bf16 state.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two floats rounded to nearest-even f16, packed: lo in the low half (the FP8 paths' f16 operands).
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The 32-bit shared-window address of a generic pointer into shared memory (cp.async, ldmatrix,
// mbarrier and wgmma descriptors take it).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// The dynamic shared memory this launch gave the block: a design that stages tiles there traps
// when it is too small instead of writing past it.
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

// cp.async groups: close the group of the copies issued so far; wait until at most N are in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

#endif  // ATTNBENCH_COMMON_DEVICE_CUH
