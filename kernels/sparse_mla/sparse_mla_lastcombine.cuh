/*
The last-CTA combine (issue 13, the "_lc" forms of split_wgmma.cu and split_wgmma_ws.cu): the split
kernel writes its partial state as every split design does (part_acc [M][splits][64][512] f32,
part_ml [M][splits][64][2], the split-K contract of sparse_mla_split_mma.cuh), then the row's LAST
CTA TO FINISH merges every split of its row into out [M][64][512] bf16 and lse [M][64] f32 in the
same kernel: no second launch. sparse_mla_combine's math and split order exactly (the result is the
same to the bit): gmax = max_s max_s; L = sum_s sum_s exp(max_s - gmax) in split order, an empty
split (max -inf) skipped; out = (sum_s exp(max_s - gmax) part_acc_s, fmaf in split order) / L,
bf16 round to nearest even; lse = gmax + log L; a row with no valid slot: out = 0, lse = -inf.
The final store and lse are sparse_mla_combine.cuh's own helpers (smla_store_out4, smla_lse).

The counter protocol (lc_last_cta): count [M] uint32, owned by the launcher, zeroed once when the
step is built. After its partial stores each CTA passes a barrier of the merging threads (their
stores before the counting thread's fence), the counting thread fences (__threadfence) and adds 1
to count[m]; the CTA that gets splits - 1 is the last: it sets count[m] = 0 (every CTA of the row
has counted, so the next launch starts from zero with no memset), fences again (every other CTA's
partials, fenced before its add, are visible to it) and merges; the others exit. Copied from
kernels/dsa_indexer/topk_common.cuh split_last_cta (another family's header: NVRTC sees only this
folder), with a named barrier over the merging threads instead of __syncthreads (split_wgmma_ws's
producer warpgroup does not take part). Nothing waits on another CTA, so any number of waves is
safe. The partials of other CTAs are read with ld.global.cg (L2; never the non-coherent .nc path,
never a stale L1 line), as asm volatile with a memory clobber so the compiler keeps them after the
barrier.

The merge, by the LC_THREADS (256) merging threads t of the last CTA, in its shared memory (free:
every thread is past its last wgmma and copy):
  1. the row's part_ml (splits x 128 contiguous floats) staged into sml [splits][64][2];
  2. thread t < 64 (head t): gmax, L and the split weights wt[s][t] = exp(max_s - gmax), -1 for an
     empty split (skipped, as the combine's `continue`), in split order; lse written;
  3. thread t: head h = t / 4, float4 columns c = 4 j + t % 4 (j < 32): a warp reads 8 heads x 64
     contiguous bytes a load (whole 32-byte sectors). LC_ITEMS columns at a time, the loads of split
     s + 1 issued before split s is accumulated (2 x LC_ITEMS 16-byte loads in flight a thread,
     128 KiB an SM: enough for one SM's L2 read rate at a loaded L2 latency up to ~1 µs), then out.
Bytes the merge reads: splits x (128 KiB + 512 B) a row, all from L2 (written by this launch);
the one CTA reads them alone, so the merge time is splits x 128 KiB / one SM's L2 read rate
(NOTES.md, "last-CTA combine").

Shared memory of the merge (floats from `table`, 16-byte aligned): the last-flag word at 0, sml at
4, wt at 4 + splits 128, gl [64][2] (gmax, L) after: LC_TABLE_BYTES(splits), at most
LC_TABLE_BYTES(LC_MAX_SPLITS) (each kernel file asserts it fits the space it gives).
*/
#ifndef SPARSE_MLA_LASTCOMBINE_CUH
#define SPARSE_MLA_LASTCOMBINE_CUH

#include "sparse_mla_combine.cuh"

#define LC_THREADS 256     // the merging threads: split_wgmma's CTA, split_wgmma_ws's two consumer warpgroups
#define LC_ITEMS 16        // float4 columns a thread accumulates at once (twice that many loads in flight)
#define LC_MAX_SPLITS 192  // splits a row the shared-memory table holds (the launcher refuses more)
#define LC_TABLE_BYTES(splits) (16 + (splits) * (128 + 64) * 4 + SMLA_HEADS * 2 * 4)
static_assert(SMLA_HEADS * SMLA_DIM / 4 == LC_THREADS * 32 && 32 % LC_ITEMS == 0,
              "thread t: head t / 4, 32 float4 columns, in batches of LC_ITEMS");

// Barrier ID over the LC_THREADS merging threads (ID 0 with 256 threads: split_wgmma's whole CTA).
template <int ID>
__device__ __forceinline__ void lc_sync() {
    asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(LC_THREADS) : "memory");
}

// Coherent loads of what other CTAs of this launch wrote: L2 (.cg), kept after the barrier.
__device__ __forceinline__ float4 ld_cg_f4(const float* p) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}

// The row's last CTA to finish (header): true in it, after it has reset count[m]; t is the merging
// thread's index (0 counts); last: a shared word. Uniform over the merging threads (two barriers).
template <int ID>
__device__ __forceinline__ bool lc_last_cta(unsigned* count, int m, unsigned P, unsigned* last, int t) {
    lc_sync<ID>();  // every merging thread's partial stores before thread 0's fence
    if (t == 0) {
        __threadfence();
        const unsigned done = atomicAdd(count + m, 1u);
        if (done == P - 1u) {
            count[m] = 0u;    // every CTA of the row has counted: ready for the next launch
            __threadfence();  // the other CTAs' partials, fenced before their adds, are visible
        }
        *last = done == P - 1u;
    }
    lc_sync<ID>();
    return *last != 0u;
}

// Merge every split of row m into out and lse (header, steps 1-3), by the LC_THREADS threads t of
// barrier ID. table: LC_TABLE_BYTES(splits) of free shared memory, 16-byte aligned.
template <int ID>
__device__ __forceinline__ void lc_merge(float* table, const float* part_acc, const float* part_ml, bf16* out,
                                         float* lse, int m, int splits, int t) {
    float* sml = table + 4;                   // [splits][64][2]
    float* wt = sml + splits * 128;           // [splits][64]
    float* gl = wt + splits * SMLA_HEADS;     // [64][2]
    const size_t ms0 = (size_t)m * (size_t)splits;

    // 1. the row's (max, sum) pairs, 4 float4 loads a thread in flight
    {
        const float* src = part_ml + ms0 * (SMLA_HEADS * 2);
        const int n4 = splits * (SMLA_HEADS * 2 / 4);
        for (int i0 = t; i0 < n4; i0 += 4 * LC_THREADS) {
            float4 v[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (i0 + k * LC_THREADS < n4) v[k] = ld_cg_f4(src + 4 * (i0 + k * LC_THREADS));
#pragma unroll
            for (int k = 0; k < 4; ++k)
                if (i0 + k * LC_THREADS < n4) reinterpret_cast<float4*>(sml)[i0 + k * LC_THREADS] = v[k];
        }
    }
    lc_sync<ID>();

    // 2. head t: gmax, L, the split weights (sparse_mla_combine's loop, split by split)
    if (t < SMLA_HEADS) {
        float gmax = neg_inf();
        for (int s = 0; s < splits; ++s) gmax = fmaxf(gmax, sml[(s * SMLA_HEADS + t) * 2]);
        float L = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float mx = sml[(s * SMLA_HEADS + t) * 2];
            float f = -1.f;       // an empty split: skipped (its sum and acc are 0)
            if (gmax != neg_inf() && mx != neg_inf()) {
                f = __expf(mx - gmax);
                L = fmaf(sml[(s * SMLA_HEADS + t) * 2 + 1], f, L);
            }
            wt[s * SMLA_HEADS + t] = f;
        }
        gl[2 * t] = gmax;
        gl[2 * t + 1] = L;
        lse[(size_t)m * SMLA_HEADS + t] = gmax == neg_inf() ? neg_inf() : smla_lse(gmax, L);
    }
    lc_sync<ID>();

    // 3. out: head h = t / 4, float4 columns c = 4 j + t % 4 (float offset 16 j + 4 (t % 4))
    const int h = t >> 2;
    const float gmax = gl[2 * h], L = gl[2 * h + 1];
    bf16* orow = out + ((size_t)m * SMLA_HEADS + (size_t)h) * SMLA_DIM + 4 * (t & 3);
    if (gmax == neg_inf()) {  // no valid slot in the whole row
#pragma unroll
        for (int j = 0; j < 32; ++j) st_v2_b32(orow + 16 * j, 0u, 0u);
        return;
    }
    const float* arow = part_acc + (ms0 * SMLA_HEADS + (size_t)h) * SMLA_DIM + 4 * (t & 3);  // split s: + s 64 512
    constexpr size_t SPLIT = (size_t)SMLA_HEADS * SMLA_DIM;
#pragma unroll 1
    for (int b = 0; b < 32 / LC_ITEMS; ++b) {
        const float* ab = arow + 16 * LC_ITEMS * b;
        float a[LC_ITEMS][4];
        float4 cur[LC_ITEMS], nxt[LC_ITEMS];
#pragma unroll
        for (int k = 0; k < LC_ITEMS; ++k) {
            a[k][0] = a[k][1] = a[k][2] = a[k][3] = 0.f;
            cur[k] = ld_cg_f4(ab + 16 * k);
            nxt[k] = make_float4(0.f, 0.f, 0.f, 0.f);  // the last split loads nothing
        }
        float fc = wt[h];
#pragma unroll 1
        for (int s = 0; s < splits; ++s) {
            float fn = 0.f;
            if (s + 1 < splits) {  // split s + 1 in flight while split s is accumulated
                fn = wt[(s + 1) * SMLA_HEADS + h];
#pragma unroll
                for (int k = 0; k < LC_ITEMS; ++k) nxt[k] = ld_cg_f4(ab + (size_t)(s + 1) * SPLIT + 16 * k);
            }
            if (fc >= 0.f) {  // sparse_mla_combine: a = fmaf(v, f, a) for every split not empty
#pragma unroll
                for (int k = 0; k < LC_ITEMS; ++k) {
                    a[k][0] = fmaf(cur[k].x, fc, a[k][0]);
                    a[k][1] = fmaf(cur[k].y, fc, a[k][1]);
                    a[k][2] = fmaf(cur[k].z, fc, a[k][2]);
                    a[k][3] = fmaf(cur[k].w, fc, a[k][3]);
                }
            }
#pragma unroll
            for (int k = 0; k < LC_ITEMS; ++k) cur[k] = nxt[k];
            fc = fn;
        }
#pragma unroll
        for (int k = 0; k < LC_ITEMS; ++k)
            smla_store_out4(orow + 16 * (LC_ITEMS * b + k), a[k][0], a[k][1], a[k][2], a[k][3], L);
    }
}

// After the CTA's partial stores: the counter, then (the last CTA only) the merge. table: free
// shared memory of LC_TABLE_BYTES(splits), 16-byte aligned, that no thread of the CTA touches again.
template <int ID>
__device__ __forceinline__ void lc_epilogue(float* table, unsigned* count, const float* part_acc, const float* part_ml,
                                            bf16* out, float* lse, int m, int splits, int t) {
    if (splits > LC_MAX_SPLITS) __trap();  // the launcher refuses it; the table would not fit
    if (!lc_last_cta<ID>(count, m, (unsigned)splits, reinterpret_cast<unsigned*>(table), t)) return;
    lc_merge<ID>(table, part_acc, part_ml, out, lse, m, splits, t);
}

#endif  // SPARSE_MLA_LASTCOMBINE_CUH
