// The union top-k's device code (topk_union.cu's header comment is the design): its DSMEM helpers, the
// window select and union_body, with one kernel macro a form. A source defines the CTA's geometry
// before including this: ONE_THREADS where not 1024 (topk_onecta.cuh), UNI_CTAS_PER_SM (the
// kernels' __launch_bounds__ minimum), UNI_VECS .. UNI_BULK_DYN_BYTES (the launcher reads them from
// the source), and S2_RING_BYTES where the ring is not 131072 B. topk_union.cu: 1024-thread CTAs, one
// an SM; topk_union_half.cu: 512-thread CTAs, two an SM.
#pragma once

#include "topk_select.cuh"   // s2_select, its sources and sinks

static_assert(UNI_KEYS == UNI_VECS * 4 * ONE_THREADS, "the keys a CTA holds");
static_assert(UNI_HELD_BYTES == (UNI_VECS - UNI_REG_VECS) * ONE_THREADS * 16, "the held part");
static_assert(UNI_DYN_BYTES == S2_RING_BYTES && UNI_HELD_BYTES + UNI_CAP * 8 == UNI_DYN_BYTES,
              "the held part and the union, or the ring");
static_assert(UNI_BULK_HELD_BYTES == UNI_KEYS * 4 && UNI_BULK_HELD_BYTES + UNI_CAP * 8 == UNI_BULK_DYN_BYTES &&
                  S2_RING_BYTES <= UNI_BULK_DYN_BYTES, "the slice and the union, or the ring");

// The shared-memory address `local` in CTA `rank` of this cluster (a shared::cluster address).
__device__ __forceinline__ unsigned uni_mapa(const void* local, unsigned rank) {
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
    return ra;
}

// An add to a word of another CTA's shared memory whose old value nobody waits for (a count the
// cluster barrier's release publishes)
__device__ __forceinline__ void uni_red_add(unsigned cluster_addr, unsigned v) {
    asm volatile("red.shared::cluster.add.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}

__device__ __forceinline__ void uni_red_max(unsigned cluster_addr, unsigned v) {
    asm volatile("red.shared::cluster.max.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned uni_atom_add(unsigned cluster_addr, unsigned v) {
    unsigned old;
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(cluster_addr), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ void uni_st(unsigned cluster_addr, unsigned v) {
    asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(cluster_addr), "r"(v) : "memory");
}

__device__ __forceinline__ void uni_st_v2(unsigned cluster_addr, unsigned a, unsigned b) {
    asm volatile("st.shared::cluster.v2.u32 [%0], {%1, %2};" ::"r"(cluster_addr), "r"(a), "r"(b) : "memory");
}

// One bulk copy into this CTA's shared memory completing on the mbarrier bar (shared address)
__device__ __forceinline__ void uni_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

#define UNI_WARP_BIN 32                  // the most keys of the k-th key's window bin one warp ranks

#define UNI_WINDOW_BINS 1024             // the window digit's bins: s.h1 (ONE_NB1), one a thread in s2_find

// The window digit of a key of the union: (key - tlb) >> sh, sh the fewest bits that bring kmax -
// tlb under UNI_WINDOW_BINS bins (kmax the row's largest thread max), clamped to the last bin and
// saturating at 0 below tlb (under --use_fast_math a flushed kmax can fall short of a denormal key,
// and the push's flushed compare can let a negative denormal below tlb in: the clamps keep the
// digit monotone, so every key of a bin above B is above every key of B, and equal keys share a bin).
struct UniWindow {
    unsigned tlb, sh;
    __device__ __forceinline__ UniWindow(unsigned tlb_, unsigned kmax) : tlb(tlb_) {
        const unsigned R = kmax - tlb_;
        sh = R < UNI_WINDOW_BINS ? 0u : 22u - __clz(R);   // bit length of R minus 10
    }
    __device__ __forceinline__ unsigned digit(unsigned key) const {
        return key <= tlb ? 0u : min((key - tlb) >> sh, UNI_WINDOW_BINS - 1u);
    }
};
static_assert(UNI_WINDOW_BINS == ONE_NB1, "the window's histogram is s.h1");

// The own form's window, [tlb, uni_own_top(tlb)]: one octave of keys above the bound (the digit's
// shift 13), saturating at the largest key. Every rank derives it from its bound alone, so the digits
// the ranks push agree wherever their bounds do (topk_model.own_window_top). Keys above it share the
// last bin, which the select takes whole or ranks by the keys themselves: exact either way.
#define UNI_OWN_SPAN 0x7FFFFFu
__device__ __forceinline__ unsigned uni_own_top(unsigned tlb) {
    return tlb > 0xFFFFFFFFu - UNI_OWN_SPAN ? 0xFFFFFFFFu : tlb + UNI_OWN_SPAN;
}

// The union as rank 0 reads it, pair j of nu by at(j). UniFlat: one run, u[0 .. nu) (the pushes'
// slots claimed on rank 0's n_union). UniRegions (SEG): rank i's pushes in its own region of
// uni_region<CS>() pairs at u[i uni_region], its count published to rank 0's region_n[i]; pair j is in
// region i where pre[i] <= j < pre[i + 1] (pre: the pairs of the regions before).
struct UniFlat {
    const uint2* u;
    __device__ __forceinline__ uint2 at(unsigned j) const { return u[j]; }
};
template <unsigned CS>
__host__ __device__ constexpr unsigned uni_region() { return UNI_CAP / CS; }
template <unsigned CS>
struct UniRegions {
    const uint2* u;
    unsigned pre[CS];
    __device__ __forceinline__ uint2 at(unsigned j) const {
        unsigned at = j;
#pragma unroll
        for (unsigned i = 1; i < CS; ++i)
            if (j >= pre[i]) at = i * uni_region<CS>() + (j - pre[i]);
        return u[at];
    }
};

template <bool SEG, unsigned CS>
struct UniViewOf {
    using type = UniFlat;
};
template <unsigned CS>
struct UniViewOf<true, CS> {
    using type = UniRegions<CS>;
};

// UniRegions' pairs moved into one run u[0 .. nu) for the fallback select, which reads the union as one
// array (s2_select's SmpBufSrc / ShrFinalOut; a tie level or +inf: rare). Every pair read into
// registers before any is written (the run overlaps the regions). Block-uniform; 2 block barriers.
template <unsigned CS>
__device__ __forceinline__ void uni_gather_regions(uint2* u, const UniRegions<CS>& v, unsigned nu) {
    constexpr unsigned PER = UNI_CAP / ONE_THREADS;
    uint2 held[PER];
#pragma unroll
    for (unsigned p = 0; p < PER; ++p) {
        const unsigned j = p * ONE_THREADS + threadIdx.x;
        if (j < nu) held[p] = v.at(j);
    }
    __syncthreads();
#pragma unroll
    for (unsigned p = 0; p < PER; ++p) {
        const unsigned j = p * ONE_THREADS + threadIdx.x;
        if (j < nu) u[j] = held[p];
    }
    __syncthreads();
}

// Rank 0's select over the union u (nu pairs, every row key >= the row's k-th among them) from the
// window histogram h the push built (every pushed key counted in rank 0's h by red.shared::cluster,
// so rank 0 makes no pass of its own before the search), topk_model.window_select: s2_find over h
// gives the bin B of the k-th key and the count A above it; on N(0, 1) rows B holds a few keys:
// all taken (Q == E), or ranked by one warp (key descending, then lower index) when E <=
// UNI_WARP_BIN. Members go to the row's output in any order, slots claimed by one shared atomic a
// warp. Returns false, having written nothing, where it cannot finish (fewer than k pairs, or a
// partial bin of more than UNI_WARP_BIN keys: a tie level) and the caller runs s2_select (+inf in
// the row never gets here: no histogram is pushed then). Needs s.cnt and s.n_buf zero (one_reset
// at the kernel's start; nothing else counts on them before). Block-uniform; 2 block barriers (3
// with the warp's rank or the refusal).
template <bool WFIND, class View>
__device__ __forceinline__ bool uni_window_select(const View& u, unsigned nu, unsigned k, const UniWindow& w,
                                                  const unsigned* h, int* __restrict__ orow, OneShared& s) {
    if (nu < k) return false;
    if constexpr (WFIND) s2_find_warp<UNI_WINDOW_BINS>(h, k, &s);   // ends with a barrier
    else s2_find<UNI_WINDOW_BINS>(h, k, &s);

    const unsigned B = s.found_bin, A = s.found_above, E = h[B], Q = k - A;
    if (Q < E && E > UNI_WARP_BIN) {                   // block-uniform: every thread read the same E
        // every thread past its read of h[B] before any returns: the caller's one_reset zeroes s.h1
        // next, and a warp that read E = 0 would take the window path alone (a second reader's find)
        __syncthreads();
        return false;
    }
    TK_MARK(TK_FDIGITS);
    const bool whole = Q == E;
    const unsigned lane = threadIdx.x & 31u, below = (1u << lane) - 1u;
    for (unsigned base = 0; base < nu; base += ONE_THREADS) {   // block-uniform trip count
        const unsigned j = base + threadIdx.x;
        const uint2 v = j < nu ? u.at(j) : make_uint2(0u, 0u);
        const unsigned d = j < nu ? w.digit(v.x) : 0u;
        const bool member = j < nu && (d > B || (whole && d == B));
        const bool listed = j < nu && !whole && d == B;
        const unsigned mm = __ballot_sync(FULL_MASK, member), lm = __ballot_sync(FULL_MASK, listed);
        unsigned mb = 0u, lb = 0u;
        if (lane == 0u && mm) mb = atomicAdd(&s.cnt, __popc(mm));
        if (lane == 0u && lm) lb = atomicAdd(&s.n_buf, __popc(lm));
        mb = __shfl_sync(FULL_MASK, mb, 0) + __popc(mm & below);
        lb = __shfl_sync(FULL_MASK, lb, 0) + __popc(lm & below);
        if (member) orow[mb] = (int)v.y;
        if (listed) {
            s.buf_key[lb] = v.x;
            s.buf_idx[lb] = v.y;
        }
    }
    if (!whole) {                                      // block-uniform
        __syncthreads();
        if (threadIdx.x < 32u) {                       // bin B's E <= 32 keys, Q of them by (key desc, index asc)
            const unsigned key = lane < E ? s.buf_key[lane] : 0u, idx = lane < E ? s.buf_idx[lane] : ~0u;
            unsigned rank = 0u;
            for (unsigned i = 0; i < E; ++i) {
                const unsigned ki = __shfl_sync(FULL_MASK, key, i), ii = __shfl_sync(FULL_MASK, idx, i);
                rank += ki > key || (ki == key && ii < idx);
            }
            if (lane < E && rank < Q) orow[A + rank] = (int)idx;
        }
    }
    return true;
}

// BULK false: float4 q < UNI_REG_VECS of a thread in registers, the rest by cp.async; true: the
// whole slice by the bulk engine (thread 0 issues UNI_BULK_CHUNKS copies on one mbarrier) into
// shared memory, where element 4 (q 1024 + t) + e lies at float 4 (q 1024 + t) + e: the slice's own
// layout, so one contiguous copy lands every thread's keys in its slots (rows with C % 4 != 0 take
// the 4-B cp.async copies into the same slots).
#define UNI_BULK_CHUNKS 8                // copies of up to 16 KiB: the engine works on several at once

// EV (the early form, dsa_topk_union_early<EV>_c<CS>; 0 elsewhere): the bound from the first EV float4
// slots of each thread only (its registers, then cp.async group A), found and exchanged while
// group B (slots EV..) is still landing; the thread max over every slot reaches rank 0 by
// red.shared::cluster.max before the push, for the +inf test only.
// SEG (the own form's regions, dsa_topk_union_owns_c<CS>): each rank pushes into its own region of rank
// 0's union (UniRegions), its slots claimed on a counter in its own shared memory, so no warp waits
// for a remote atomic's return; each warp adds its count to rank 0's region_n[r] by
// red.shared::cluster, which the cluster barrier ending the round publishes. A region past uni_region<CS>() pairs sends the row to the row's select, as
// a union past UNI_CAP does.
template <unsigned CS, bool BULK, bool OWN, unsigned EV = 0u, bool WFIND = false, bool LATE = false, bool SEG = false>
__device__ __forceinline__ void union_body(const float* __restrict__ scores, int* __restrict__ out, int C_, int k_) {
    constexpr bool EARLY = EV != 0u;
    static_assert(!EARLY || (!BULK && !OWN && EV >= UNI_REG_VECS && EV <= UNI_VECS), "the early form is the exchanged one's");
    static_assert(!SEG || (OWN && !BULK), "the regions are the own form's");
    constexpr unsigned REG = BULK ? 0u : UNI_REG_VECS;   // float4 a thread in registers
    auto is_reg = [](unsigned q) {                     // q < REG, which nvcc warns of as q < 0u when REG is 0
        if constexpr (REG == 0u) return false; else return q < REG;
    };
    constexpr unsigned HELD_BYTES = BULK ? UNI_BULK_HELD_BYTES : UNI_HELD_BYTES;
    __shared__ __align__(16) OneShared s;
    __shared__ unsigned n_union;                       // rank 0's: pairs pushed (may pass UNI_CAP); SEG: this rank's
    __shared__ unsigned region_n[SEG ? CS : 1];        // SEG, rank 0's: rank i's pairs pushed (may pass its region)
    __shared__ unsigned bound;                         // this CTA's bound bin b_r
    __shared__ unsigned kmax_cta, kmax_row;            // this CTA's largest thread max; the row's
    __shared__ __align__(8) unsigned long long loaded; // BULK: the slice's copies complete (phase 0)
    __shared__ unsigned own_bound[CS], own_kmax[CS];   // OWN: every rank's b_r and largest thread max, stored by it
    extern __shared__ __align__(16) float4 dyn[];      // the held part, then (rank 0) the union; the fallback's ring
    uint2* u = reinterpret_cast<uint2*>(dyn + HELD_BYTES / 16);
    if (cluster_nctarank() != CS || gridDim.x != CS) __trap();   // the launch shape the source was compiled for
    const unsigned r = blockIdx.x, m = blockIdx.y, C = (unsigned)C_, k = (unsigned)k_;
    TK_ENTER(r);
    const float* row = scores + (size_t)m * C;
    unsigned lo, hi;
    split_slice(C, CS, r, lo, hi);
    if (hi - lo > UNI_KEYS) __trap();                  // a slice this CTA cannot hold (pick_union refuses the row)
    const bool vec = (C & 3u) == 0u;                   // row and slice starts 16-B aligned
    // OWN: the float4 slots q < nq hold slice keys in some thread; past them every slot is padding
    // (q 6, 7 at clusters of 3 on 65536: a quarter of the compares), never loaded, stored or compared
    const unsigned nq = OWN || EARLY ? (hi - lo + 4u * ONE_THREADS - 1u) / (4u * ONE_THREADS) : UNI_VECS;
    // element of float4 q, lane e of this thread; float4 q >= REG is held at dyn[(q - REG) 1024 + t]
    auto elem = [&](unsigned q, unsigned e) { return lo + 4u * (q * ONE_THREADS + threadIdx.x) + e; };
    auto held = [&](unsigned q) { return dyn + (q - REG) * ONE_THREADS + threadIdx.x; };

    // 1: every load issued at once (into registers, shared memory by cp.async, or the bulk copies),
    // then the keys. The early form issues the register loads first and the cp.async copies in two
    // groups (slots < EV, the rest), so that its bound's keys land first.
    float x[REG ? 4 * REG : 1];
    auto load_registers = [&] {
#pragma unroll
        for (unsigned q = 0; is_reg(q); ++q) {
            const unsigned e0 = elem(q, 0u);
            if (vec) {
                const float4 v = e0 < hi ? ld_nc_f32x4(reinterpret_cast<const float4*>(row + e0))
                                         : make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
                x[4 * q] = v.x, x[4 * q + 1] = v.y, x[4 * q + 2] = v.z, x[4 * q + 3] = v.w;
            } else {
#pragma unroll
                for (unsigned e = 0; e < 4; ++e) x[4 * q + e] = e0 + e < hi ? ld_nc_f32(row + e0 + e) : neg_inf();
            }
        }
    };
    if constexpr (EARLY) load_registers();
    const unsigned bar = smem_addr(&loaded);
    if (BULK && vec) {
        const unsigned bytes = 4u * (hi - lo);         // a multiple of 16 (split_slice's 4-key slices, C % 4 == 0)
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // the init before the copies' complete_tx
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
            constexpr unsigned CHUNK = UNI_BULK_HELD_BYTES / UNI_BULK_CHUNKS;
            for (unsigned at = 0; at < bytes; at += CHUNK)
                uni_bulk_copy(smem_addr(dyn) + at, reinterpret_cast<const char*>(row + lo) + at, min(CHUNK, bytes - at),
                              bar);
        }
        // the slots past the slice: generic stores to bytes the copies do not write
#pragma unroll
        for (unsigned q = 0; q < UNI_VECS; ++q)
            if (elem(q, 0u) >= hi) *held(q) = make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
    } else {
#pragma unroll
        for (unsigned q = REG; q < UNI_VECS; ++q) {
            if (q >= nq) break;                        // OWN: padding slots stay unwritten (nothing reads them)
            float4* dst = held(q);
            const unsigned e0 = elem(q, 0u);
            if (vec && e0 < hi) {
                cp_async16(dst, row + e0);
            } else {
#pragma unroll
                for (unsigned e = 0; e < 4; ++e) {
                    if (e0 + e < hi) cp_async4(reinterpret_cast<float*>(dst) + e, row + e0 + e);
                    else reinterpret_cast<float*>(dst)[e] = neg_inf();
                }
            }
            if (EARLY && q + 1u == EV) cp_async_commit();   // group A: the bound's slots
        }
        cp_async_commit();
    }
    if constexpr (!EARLY) load_registers();
    if (threadIdx.x == 0) kmax_cta = 0u;              // before one_reset's barrier: every warp's atomicMax after it
    one_reset(s);                                      // under the loads' flight; ends with a barrier
    if (threadIdx.x == 0) n_union = 0u;
    if (SEG && threadIdx.x < CS) region_n[threadIdx.x] = 0u;   // before the arrive: every rank's red.add after its wait
    if (EARLY && threadIdx.x == 0) kmax_row = 0u;      // rank 0's: the ranks' red.max land after the exchange's barrier
    // OWN: rank 0's n_union and s.h1 zeroed before any rank's push, and every CTA started before any
    // DSMEM access: arrived here, waited for before the push, long after every rank arrived
    if (OWN && !LATE) cluster_arrive();
    // the thread max as a float (fmaxf drops NaN; -0 / +0 share a key): one conversion, not 32
    float xmax = neg_inf();
#pragma unroll
    for (unsigned j = 0; is_reg(j / 4u); ++j) xmax = fmaxf(xmax, x[j]);
    if (BULK && vec) {
        // the init is visible: one_reset's barrier came after it. Acquire: the copies' bytes
        unsigned done;
        do {
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(bar) : "memory");
        } while (!done);
    } else if (EARLY && nq >= EV) {
        cp_async_wait_group<1>();                      // group A (group B, maybe empty, still in flight)
    } else {
        cp_async_wait_all();                           // this thread's held slots (no other thread reads them)
    }
#pragma unroll
    for (unsigned q = REG; q < (EARLY ? EV : UNI_VECS); ++q) {
        if (q >= nq) break;
        const float4 v = *held(q);
        xmax = fmaxf(xmax, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    const unsigned tmax = topk_key(xmax);

    // 2: this CTA's bound b_r (the bin of its ceil(k / CS)-th largest thread max), the row's the least
    if (tmax != 0u) atomicAdd(&s.h0[tmax >> 20], 1u);
    const unsigned wmax = __reduce_max_sync(FULL_MASK, tmax);
    if ((threadIdx.x & 31u) == 0u) atomicMax(&kmax_cta, wmax);
    __syncthreads();
    TK_MARK(TK_READ);
    // LATE: the own form's arrive here, after every load of this thread landed, so that its release
    // (MEMBAR.ALL.GPU in SASS) has no load in flight to wait for; still after one_reset and long
    // before the wait ahead of the push
    if (OWN && LATE) cluster_arrive();
    if constexpr (WFIND) s2_find_warp<ONE_NB0>(s.h0, (k + CS - 1u) / CS, &s);   // ends with a barrier
    else s2_find<ONE_NB0>(s.h0, (k + CS - 1u) / CS, &s);
    if (!OWN && threadIdx.x == 0) bound = s.found_bin;
    TK_MARK(TK_DIGIT0);
    unsigned b = ~0u;
    if (OWN) {
        b = s.found_bin;                               // this rank's bound, block-uniform (s2_find's barrier)
        cluster_wait();                                // the arrive after one_reset: every rank arrived long ago
        TK_MARK(TK_SYNC0);
        if (threadIdx.x < CS) {                        // b_r and this rank's largest thread max, into every rank
            uni_st(uni_mapa(own_bound + r, threadIdx.x), b);
            uni_st(uni_mapa(own_kmax + r, threadIdx.x), kmax_cta);
        }
    } else {
        cluster_sync();                                // every rank's bound and max; rank 0's n_union zeroed
        TK_MARK(TK_SYNC0);
        if (threadIdx.x < 32u) {
            const unsigned w = threadIdx.x < CS ? ld_rank(&bound, threadIdx.x) : ~0u;
            const unsigned km = threadIdx.x < CS ? ld_rank(&kmax_cta, threadIdx.x) : 0u;
            b = __reduce_min_sync(FULL_MASK, w);
            const unsigned kr = __reduce_max_sync(FULL_MASK, km);
            if (!EARLY && threadIdx.x == 0) kmax_row = kr;   // the early form's comes by red.max below
        }
        if (threadIdx.x == 0) s.found_above = b;
        __syncthreads();
        b = s.found_above;                             // the same in every rank
    }
    TK_MARK(TK_BOUND);
    if constexpr (EARLY) {
        // group B landed; the thread max over every slot, the row's largest into rank 0's kmax_row
        // (zeroed before the barrier above; read after the one that ends the push)
        cp_async_wait_all();
#pragma unroll
        for (unsigned q = EV; q < UNI_VECS; ++q) {
            if (q >= nq) break;
            const float4 v = *held(q);
            xmax = fmaxf(xmax, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
        }
        const unsigned wall = __reduce_max_sync(FULL_MASK, topk_key(xmax));
        if ((threadIdx.x & 31u) == 0u) uni_red_max(uni_mapa(&kmax_row, 0u), wall);
    }

    // 3: the keys >= lo_key (and, with `upper`, < hi_key) into rank 0's union, each counted in rank
    // 0's window histogram when `count`. Scores are compared with topk_key_floor of the keys (x >=
    // tf exactly when topk_key(x) >= t, both under the same flush): the two rounds of the own form
    // push disjoint sets whose union is every key >= lo_key of the first.
    auto push = [&](unsigned lo_key, bool upper, unsigned hi_key, bool count, const UniWindow& win) {
        const float tf = topk_key_floor(lo_key), th = upper ? topk_key_floor(hi_key) : 0.0f;
        auto hit = [&](float v) { return v >= tf && !(upper && v >= th); };
        const unsigned lane = threadIdx.x & 31u;
        unsigned hits = 0u;
#pragma unroll
        for (unsigned j = 0; is_reg(j / 4u); ++j) hits |= (hit(x[j]) ? 1u : 0u) << j;
#pragma unroll
        for (unsigned q = REG; q < UNI_VECS; ++q) {
            if (q >= nq) break;
            const float4 v = *held(q);
            const float w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (unsigned e = 0; e < 4; ++e) hits |= (hit(w[e]) ? 1u : 0u) << (4u * q + e);
        }
        const unsigned n = __popc(hits);
        const unsigned incl = topk_warp_inclusive_sum(n);
        unsigned base = 0u;
        if (lane == 31u && incl != 0u) {
            if constexpr (SEG) {                       // the slots from this rank's counter; the count into rank 0's
                base = atomicAdd(&n_union, incl);      // region_n[r], which nobody waits for (the round's barrier publishes it)
                uni_red_add(uni_mapa(region_n + r, 0u), incl);
            } else {
                base = uni_atom_add(uni_mapa(&n_union, 0u), incl);
            }
        }
        unsigned slot = __shfl_sync(FULL_MASK, base, 31) + incl - n;
        constexpr unsigned SLOTS = SEG ? uni_region<CS>() : UNI_CAP;   // the slots this rank may fill
        const unsigned first = SEG ? r * uni_region<CS>() : 0u;        // and the first of them
        const unsigned u0 = uni_mapa(u, 0u);
        const unsigned h0r = uni_mapa(s.h1, 0u);
        // this lane's hits in increasing j (~1% of its keys): a register key picked by an unrolled
        // select (no register indexed at run time, no reload from global memory), a held one re-read
        // by its float4 slot; only the pushed keys converted
        while (hits) {
            const unsigned j = __ffs(hits) - 1u;
            hits &= hits - 1u;
            const unsigned q = j / 4u, e = j % 4u;
            float v;
            if (is_reg(q)) {
                v = x[0];
#pragma unroll
                for (unsigned i = 1; is_reg(i / 4u); ++i) v = i == j ? x[i] : v;
            } else {
                v = reinterpret_cast<const float*>(held(q))[e];
            }
            const unsigned key = topk_key(v);
            if (slot < SLOTS) uni_st_v2(u0 + 8u * (first + slot), key, elem(q, e));
            if (count) uni_red_add(h0r + 4u * win.digit(key), 1u);
            ++slot;
        }
    };
    if (EARLY) {
        // the window as the own form's, [b << 20, uni_own_top]: the row's largest key is not known
        // before the push (group B); +inf in the row: rank 0 ignores the histogram
        if (b != 0u) push(b << 20, false, 0u, true, UniWindow(b << 20, uni_own_top(b << 20)));
    } else if (OWN) {
        // each pushed key counted in rank 0's window over [b << 20, uni_own_top]: consistent wherever
        // the ranks' bounds agree, and rank 0 uses it only then (+inf in the row: rank 0 ignores it)
        if (b != 0u) push(b << 20, false, 0u, true, UniWindow(b << 20, uni_own_top(b << 20)));
    } else if (b != 0u) {                              // cluster-uniform
        // each pushed key also counted in rank 0's window histogram (s.h1, zeroed by its one_reset
        // before the first cluster barrier), unless +inf is in the row (rank 0 runs s2_select then)
        push(b << 20, false, 0u, kmax_row != DSA_TOPK_KEY_POSINF, UniWindow(b << 20, kmax_row));
    }
    TK_MARK(TK_WRITE);
    cluster_sync();                                    // the union complete (the own form: its first round)
    TK_MARK(TK_PASS2);
    bool agree = true;                                 // OWN: every rank's bound the same bin
    unsigned own_kr = 0u;                              // OWN: the row's largest thread max (only +inf is read)
    if (OWN) {
        // every rank reads the CS bounds stored in it (the same in every rank): where they differ the
        // ranks above the least push their keys in [bmin << 20, b_r << 20) so that the union is every
        // key >= bmin << 20, as the exchanged form's; no remote access after the barrier below. Its
        // window digits disagree then, so rank 0 counts the union into bmin's window itself.
        unsigned bmin = ~0u, bmax = 0u, kr = 0u;
#pragma unroll
        for (unsigned i = 0; i < CS; ++i) {
            bmin = min(bmin, own_bound[i]);
            bmax = max(bmax, own_bound[i]);
            kr = max(kr, own_kmax[i]);
        }
        agree = bmin == bmax;
        if (!agree && bmin != 0u) {                    // cluster-uniform
            if (b != bmin) push(bmin << 20, true, b << 20, false, UniWindow(bmin << 20, b << 20));
            cluster_sync();                            // the second round landed; no remote access after this
        }
        b = bmin;
        own_kr = kr;
    }
    if (r != 0u) {
        TK_MARK(TK_EXIT);
        return;
    }

    // 4: rank 0 selects the row's k best
    // SEG: the regions' counts (the last round's barrier published them); fits: every region held its pushes
    unsigned nu = n_union;
    bool regions_fit = true;
    typename UniViewOf<SEG, CS>::type view{u};
    if constexpr (SEG) {
        nu = 0u;
#pragma unroll
        for (unsigned i = 0; i < CS; ++i) {
            view.pre[i] = nu;
            nu += region_n[i];
            regions_fit = regions_fit && region_n[i] <= uni_region<CS>();
        }
    }
    const S2FinalOut fout{row, C, out + (size_t)m * k};
    // block-uniform: b, nu, fits and kmax_row are the same in every thread
    const unsigned kmax = OWN ? own_kr : kmax_row;
    const bool fits = SEG ? regions_fit : nu <= UNI_CAP;
    const bool window = b != 0u && fits && kmax != DSA_TOPK_KEY_POSINF;
    const UniWindow win(b << 20, OWN || EARLY ? uni_own_top(b << 20) : kmax);
    if (OWN && window && !agree) {                     // block-uniform: the ranks' digits disagreed, recount
        one_reset(s);                                  // s.h1, s.cnt, s.n_buf zero; ends with a barrier
        for (unsigned j = threadIdx.x; j < nu; j += ONE_THREADS) atomicAdd(&s.h1[win.digit(view.at(j).x)], 1u);
        __syncthreads();
    }
    const bool windowed = window && uni_window_select<WFIND>(view, nu, k, win, s.h1, fout.orow, s);
    if (!windowed) {
        one_reset(s);
        if constexpr (SEG) {
            if (b != 0u && fits) uni_gather_regions(u, view, nu);   // block-uniform
        }
        if (b != 0u && fits)
            s2_select<true, 2>(SmpBufSrc{u, nu}, ShrFinalOut{fout, u, nu, s.buf_idx, &s.n_buf}, k, s);
        else
            s2_select<true, 2>(S2Src<false>{row, C, 0u, vec, dyn}, fout, k, s);
    }
    TK_MARK(TK_FINAL);
    TK_MARK(TK_EXIT);
}


// One form's kernel NAME_c<CS>: union_body<CS, ARGS...> (BULK, OWN, EV, WFIND, LATE, SEG after CS). The
// cluster shape is compiled in (a plain launch of grid (CS, M) runs it; another shape traps).
#define DSA_TOPK_UNION_FORM(NAME, CS, ...)                                                                   \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(ONE_THREADS, UNI_CTAS_PER_SM)    \
        NAME##_c##CS(const float* __restrict__ scores, int* __restrict__ out, int C, int k) {               \
        union_body<CS, __VA_ARGS__>(scores, out, C, k);                                                      \
    }
