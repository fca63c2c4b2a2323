/*
DSA top-k, one thread-block cluster a row with the row held in registers (issue 14; kernels
`dsa_topk_union_c<CS>`, variant radix_union). The op, the contract and the tie rule are
topk_radix.cu's; topk_model.select_row_union emulates every decision below.

What bound the split designs at 512 of 65536, M = 32 (TOPK_NOTES.md, radix_split2's timeline): a
fixed chain in series after the launch (~2.7 us): the slice read through the ring (4.2), pass 2
over it (2.8), three digit searches (1.9), the hand-off through global memory and the row's last
CTA's select over the P k = 2048 candidates it reads back from L2 (5.8). Here:
  1. CTA r of the row's cluster of CS loads its slice (split_slice r of CS, at most UNI_KEYS keys:
     UNI_KEYS / 1024 a thread) with every load issued at once (4 x 16 B a thread: 64 KiB an SM in
     flight, no ring) and keeps the keys in registers. Key j of thread t: element 4 (q 1024 + t) + e
     of the slice, q = j / 4, e = j % 4 (float4 loads when C % 4 == 0, else 4-B loads of the same
     elements); past the slice, key 0.
  2. Each thread's largest key (its "thread max"; key 0 counts nothing) goes into the CTA's digit-0
     histogram (12 bits, 4096 bins, one shared atomic a thread). barrier.cluster; every CTA sums
     the CS histograms through distributed shared memory (a 16-B load a rank a thread: its 4 bins)
     and finds the bin b of the row's k-th largest thread max (s2_find_counts). tlb = b << 20 is a
     lower bound on T, the row's k-th key: the k thread maxes >= tlb are k distinct keys >= tlb.
     On N(0, 1) rows the union of the keys >= tlb is ~800 keys at 512 of 65536 (CS 4; the CPU
     model counts them at every sweep point), 1.2-1.6 k.
  3. b = 0 (fewer than k nonzero thread maxes, or the k-th in the lowest bin): nothing is pushed.
     Else every key >= tlb goes, as a (key, row index) pair, to the union in rank 0's dynamic
     shared memory (one atom.shared::cluster add on rank 0's counter a warp, st.shared::cluster
     for the pairs; pairs past UNI_CAP are counted, not stored). barrier.cluster; every rank but
     0 exits (nobody reads another rank's shared memory after it).
  4. Rank 0 with n <= UNI_CAP pairs in the union: s2_select over them (topk_select.cuh, DROP: +inf
     counts towards k and is written -1) into the row's output, its partial tie level from the
     union (ShrFinalOut): exact, since T >= tlb puts every key of the row >= T, ties included, in
     the union. Otherwise (b = 0, or more than UNI_CAP keys >= tlb: tie levels, few eligible,
     ordered rows) s2_select over the row itself through the ring (one CTA: correct, slow).
No workspace and no counter in global memory: a launch leaves nothing behind. Cluster barriers: 2.
Shared memory: OneShared (45,200 B) + 1 word + UNI_DYN_BYTES dynamic (the union, or the ring of
the fallback); one CTA an SM; __launch_bounds__(1024, 1). __cluster_dims__ at compile time (a
plain launch of grid (CS, M) runs it); a launch of another cluster shape traps.
*/

#include "topk_select.cuh"   // s2_select, its sources and sinks

#define UNI_VECS 4                       // float4 loads a thread
#define UNI_KEYS 16384                   // keys a CTA at most: UNI_VECS x 4 x ONE_THREADS
#define UNI_DYN_BYTES 131072             // the union (UNI_CAP pairs) or the fallback's ring
#define UNI_CAP 16384                    // (key, row index) pairs the union holds

static_assert(UNI_KEYS == UNI_VECS * 4 * ONE_THREADS, "the keys a CTA holds");
static_assert(UNI_DYN_BYTES == S2_RING_BYTES && UNI_CAP * 8 == UNI_DYN_BYTES, "the union, or the ring");

// The shared-memory address `local` in CTA `rank` of this cluster (a shared::cluster address).
__device__ __forceinline__ unsigned uni_mapa(const void* local, unsigned rank) {
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
    return ra;
}

__device__ __forceinline__ uint4 uni_ld_v4(unsigned cluster_addr) {
    uint4 v;
    asm volatile("ld.shared::cluster.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(cluster_addr) : "memory");
    return v;
}

__device__ __forceinline__ unsigned uni_atom_add(unsigned cluster_addr, unsigned v) {
    unsigned old;
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(cluster_addr), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ void uni_st_v2(unsigned cluster_addr, unsigned a, unsigned b) {
    asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};" ::"r"(cluster_addr), "r"(a), "r"(b) : "memory");
}

template <unsigned CS>
__device__ __forceinline__ void union_body(const float* __restrict__ scores, int* __restrict__ out, int C_, int k_) {
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned n_union;                       // rank 0's: pairs pushed (may pass UNI_CAP)
    extern __shared__ __align__(16) float4 dyn[];      // rank 0: the union; the fallback's ring
    uint2* u = reinterpret_cast<uint2*>(dyn);
    if (cluster_nctarank() != CS || gridDim.x != CS) __trap();   // the launch shape the source was compiled for
    const unsigned r = blockIdx.x, m = blockIdx.y, C = (unsigned)C_, k = (unsigned)k_;
    TK_ENTER(r);
    const float* row = scores + (size_t)m * C;
    unsigned lo, hi;
    split_slice(C, CS, r, lo, hi);
    const bool vec = (C & 3u) == 0u;                   // row and slice starts 16-B aligned

    // 1: every load issued, then the keys
    float x[4 * UNI_VECS];
#pragma unroll
    for (unsigned q = 0; q < UNI_VECS; ++q) {
        const unsigned e0 = lo + 4u * (q * ONE_THREADS + threadIdx.x);
        if (vec) {
            const float4 v = e0 < hi ? ld_nc_f32x4(reinterpret_cast<const float4*>(row + e0))
                                     : make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
            x[4 * q] = v.x, x[4 * q + 1] = v.y, x[4 * q + 2] = v.z, x[4 * q + 3] = v.w;
        } else {
#pragma unroll
            for (unsigned e = 0; e < 4; ++e) x[4 * q + e] = e0 + e < hi ? ld_nc_f32(row + e0 + e) : neg_inf();
        }
    }
    one_reset(s);                                      // under the loads' flight; ends with a barrier
    if (threadIdx.x == 0) n_union = 0u;
    unsigned key[4 * UNI_VECS], tmax = 0u;
#pragma unroll
    for (unsigned j = 0; j < 4 * UNI_VECS; ++j) {
        key[j] = topk_key(x[j]);                       // -inf past the slice: key 0
        tmax = max(tmax, key[j]);
    }

    // 2: the thread maxes' digit 0, summed over the cluster; the bound
    if (tmax != 0u) atomicAdd(&s.h0[tmax >> 20], 1u);
    TK_MARK(TK_READ);
    cluster_sync();                                    // every rank's histogram; rank 0's n_union zeroed
    TK_MARK(TK_SYNC0);
    {
        const unsigned top = ONE_NB0 - 4u * threadIdx.x;
        unsigned c[1][4] = {{0u, 0u, 0u, 0u}};          // c[0][b] = bin top - 1 - b over the cluster
#pragma unroll 4   // CS 8 fully unrolled spills: 8 x 4 words in flight beside the 16 keys
        for (unsigned q = 0; q < CS; ++q) {
            const uint4 v = uni_ld_v4(uni_mapa(s.h0 + top - 4u, q));
            c[0][0] += v.w, c[0][1] += v.z, c[0][2] += v.y, c[0][3] += v.x;
        }
        const unsigned kk[1] = {k};
        unsigned* const bin[1] = {&s.found_bin};
        unsigned* const above[1] = {&s.found_above};
        s2_find_counts<ONE_NB0, 1>(c, kk, s.scan, bin, above);   // ends with a barrier
    }
    const unsigned b = s.found_bin;                    // the same in every rank
    TK_MARK(TK_BOUND);

    // 3: the keys >= tlb into rank 0's union
    if (b != 0u) {                                     // cluster-uniform
        const unsigned tlb = b << 20, lane = threadIdx.x & 31u;
        unsigned hits = 0u;
#pragma unroll
        for (unsigned j = 0; j < 4 * UNI_VECS; ++j) hits |= (key[j] >= tlb ? 1u : 0u) << j;
        const unsigned n = __popc(hits);
        const unsigned incl = topk_warp_inclusive_sum(n);
        unsigned base = 0u;
        if (lane == 31u && incl != 0u) base = uni_atom_add(uni_mapa(&n_union, 0u), incl);
        unsigned slot = __shfl_sync(FULL_MASK, base, 31) + incl - n;
        const unsigned u0 = uni_mapa(u, 0u);
#pragma unroll
        for (unsigned j = 0; j < 4 * UNI_VECS; ++j) {
            if ((hits >> j) & 1u) {
                if (slot < UNI_CAP)
                    uni_st_v2(u0 + 8u * slot, key[j], lo + 4u * ((j / 4u) * ONE_THREADS + threadIdx.x) + j % 4u);
                ++slot;
            }
        }
    }
    cluster_sync();                                    // the union complete; no remote access after this
    TK_MARK(TK_PASS2);
    if (r != 0u) {
        TK_MARK(TK_EXIT);
        return;
    }

    // 4: rank 0 selects the row's k best
    const unsigned nu = n_union;
    const S2FinalOut fout{row, C, out + (size_t)m * k};
    one_reset(s);
    if (b != 0u && nu <= UNI_CAP)
        s2_select<true, 0>(SmpBufSrc{u, nu}, ShrFinalOut{fout, u, nu, s.buf_idx, &s.n_buf}, k, s);
    else
        s2_select<true, 0>(S2Src<false>{row, C, 0u, vec, dyn}, fout, k, s);
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}

#define DSA_TOPK_UNION_KERNEL(CS)                                                                             \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(ONE_THREADS, 1)                   \
        dsa_topk_union_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) {        \
        union_body<CS>(scores, out, C, k);                                                                    \
    }

DSA_TOPK_UNION_KERNEL(1)
DSA_TOPK_UNION_KERNEL(2)
DSA_TOPK_UNION_KERNEL(4)
DSA_TOPK_UNION_KERNEL(8)
