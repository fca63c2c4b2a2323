// Shared by the dsa_topk kernels (topk_radix.cu, topk_resident.cu, topk_onecta.cuh, topk_split.cu):
// the order-preserving key, the cluster primitives (PTX: NVRTC gets no cooperative_groups),
// read-only global loads and cp.async.
#pragma once

#include "../common/device.cuh"  // smem_addr, cp_async_commit

#define DSA_TOPK_KEY_POSINF 0xff800000u
#define DSA_TOPK_BIN_POSINF 2044u  // digit 0 of +inf; the bin holds +inf alone (NaN maps to key 0)
#define FULL_MASK 0xffffffffu

// Order-preserving key: -0 folded onto +0; -inf and NaN -> 0 (lowest); +inf -> 0xff800000.
__device__ __forceinline__ unsigned topk_key(float x) {
    unsigned b = __float_as_uint(x);
    if (b == 0x80000000u) b = 0u;
    const unsigned key = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    const bool low = (b & 0x7fffffffu) > 0x7f800000u || b == 0xff800000u;  // NaN or -inf
    return low ? 0u : key;
}

// The least float x with topk_key(x) >= key, for a key >= 1 (at most +inf's key): x >=
// topk_key_floor(t) exactly when topk_key(x) >= t, for every float (NaN and -inf fail both; -0 and
// +0 compare equal as their keys do), so a pass can compare scores instead of converting each.
// Under --use_fast_math the compare flushes denormals to +-0 (setp.ge.ftz): monotone, so the floats
// that pass are then a superset of those exact keys, still upward-closed (what the callers need).
__device__ __forceinline__ float topk_key_floor(unsigned key) {
    if (key < 0x00800000u) return __uint_as_float(0xff7fffffu);   // below every finite key: -FLT_MAX
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// ---- warp and block helpers --------------------------------------------------------------------

// Inclusive prefix sum of x over the warp's lanes in lane order (every lane active).
__device__ __forceinline__ unsigned topk_warp_inclusive_sum(unsigned x) {
    const unsigned lane = threadIdx.x & 31u;
#pragma unroll
    for (unsigned o = 1; o < 32; o <<= 1) {
        const unsigned y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    return x;
}

// ---- block helpers ---------------------------------------------------------------------------

// Exclusive prefix sum of v over a block of WARPS warps in thread order; *total gets the block's sum.
// Ends with a barrier, so scratch (WARPS words) is free for the next call.
template <unsigned WARPS>
__device__ __forceinline__ unsigned topk_block_scan(unsigned v, unsigned* scratch, unsigned* total) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned x = topk_warp_inclusive_sum(v);
    if (lane == 31) scratch[warp] = x;
    __syncthreads();
    if (warp == 0) {
        const unsigned w = topk_warp_inclusive_sum(lane < WARPS ? scratch[lane] : 0u);
        if (lane < WARPS) scratch[lane] = w;
    }
    __syncthreads();
    const unsigned before = warp ? scratch[warp - 1] : 0u;
    *total = scratch[WARPS - 1];
    __syncthreads();  // scratch is free for the next call
    return before + x - v;
}

// ---- cluster primitives (PTX; NVRTC gets no cooperative_groups) --------------------------------

__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned cluster_nctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster; release / acquire: shared-memory writes before it are
// visible to every CTA's reads after it (it is a CTA barrier too).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// cluster_sync's halves, for a barrier split around work that needs no other CTA: arrive (release:
// this CTA's shared-memory writes before it) ... wait (acquire). Every thread, in order.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The word at the same shared-memory offset as `local` in CTA `rank` of this cluster.
__device__ __forceinline__ unsigned ld_rank(const unsigned* local, unsigned rank) {
    unsigned a, ra, v;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(a) : "l"(local));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(ra) : "memory");
    return v;
}

// Read-only global loads (ld.global.nc: nothing in the launch writes the scores).
__device__ __forceinline__ float ld_nc_f32(const float* p) {
    float r;
    asm("ld.global.nc.f32 %0, [%1];" : "=f"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ float4 ld_nc_f32x4(const float4* p) {
    float4 r;
    asm("ld.global.nc.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}

// ---- cp.async (topk_resident.cu, topk_split.cu) -------------------------------------------------

// 16 bytes global -> shared, cached in L2 only (.cg: coherent with other CTAs' writes that were
// fenced before this copy is issued).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;" ::: "memory");
}
// Every commit group of this thread but the newest N complete (their writes visible to this thread).
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The first `quota` keys equal to T of row[lo, hi) in index order, put(at + rank, index): tiles of
// 4 x 32 WARPS elements, one block exclusive scan a tile (the lowest indices first), stopping once
// the quota is taken. Block-uniform: every thread of the block calls it.
template <unsigned WARPS, class Put>
__device__ __forceinline__ void topk_take_ties_to(const float* __restrict__ row, unsigned lo, unsigned hi, unsigned T,
                                                  unsigned quota, unsigned at, unsigned* scratch, Put&& put) {
    unsigned taken = 0u;
    for (unsigned t0 = lo; t0 < hi && taken < quota; t0 += 4u * 32u * WARPS) {
        const unsigned e0 = t0 + 4u * threadIdx.x;
        bool eq[4];
        unsigned n = 0u;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            eq[j] = e0 + j < hi && topk_key(ld_nc_f32(row + e0 + j)) == T;
            n += eq[j];
        }
        unsigned tile_total;
        unsigned r = taken + topk_block_scan<WARPS>(n, scratch, &tile_total);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (eq[j]) {
                if (r < quota) put(at + r, e0 + j);
                ++r;
            }
        }
        taken += tile_total;
    }
}

// topk_take_ties_to writing the index at orow[at + rank].
template <unsigned WARPS>
__device__ __forceinline__ void topk_take_ties(const float* __restrict__ row, unsigned lo, unsigned hi, unsigned T,
                                               unsigned quota, int* __restrict__ orow, unsigned at, unsigned* scratch) {
    topk_take_ties_to<WARPS>(row, lo, hi, T, quota, at, scratch,
                             [&](unsigned slot, unsigned e) { orow[slot] = (int)e; });
}

// ---- the split kernels' hand-off (topk_split.cu, topk_split2.cu) ------------------------------

// The split designs' slice r of P of a row of C keys: [lo, hi) = [r L, r L + L) clamped to C, L =
// ceil(C / P) rounded up to 4 keys (whole float4s; topk_model.split_slices is the same rule).
__device__ __forceinline__ void split_slice(unsigned C, unsigned P, unsigned r, unsigned& lo, unsigned& hi) {
    const unsigned L = ((C + P - 1u) / P + 3u) & ~3u;
    lo = min(C, r * L);
    hi = min(C, lo + L);
}

// After a CTA's candidates are written: true in the row's last CTA to finish (count[m] reached P),
// which has reset the counter to 0 for the next launch and may read every CTA's candidates (each
// fenced before its add); every other CTA gets false and may exit. The cooperative-groups
// grid-sync pattern without the wait. last: a shared word. Block-uniform (two barriers).
__device__ __forceinline__ bool split_last_cta(unsigned* count, unsigned m, unsigned P, unsigned* last) {
    __syncthreads();                     // every thread's candidate writes before thread 0's fence
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned done = atomicAdd(count + m, 1u);
        if (done == P - 1u) {
            count[m] = 0u;               // every CTA of the row has counted: ready for the next launch
            __threadfence();             // the other CTAs' candidates, fenced before their adds, are visible
        }
        *last = done == P - 1u;
    }
    __syncthreads();
    return *last;
}
