/*
Sparse MLA family, the gather roofline: the bandwidth ceiling of every sparse MLA design. The op and
the index conventions: sparse_mla_common.cuh.

It reads exactly what an attention kernel over the selection must read, the selected arena rows
(1 KiB each), once each and nothing else, and reduces them to an exact checksum so the reads cannot
be optimised away and the host can verify them bit for bit.

sparse_gather_xor: grid (splits, M), block 256. CTA (s, m) covers slots
    [s * W / splits, (s + 1) * W / splits) of row m (the launcher guarantees W % splits == 0 and
    (W / splits) % 8 == 0; the code is correct for any split anyway).
    It XORs every 16-byte word (as 4 x uint32, lanes x, y, z, w kept separate) of every valid
    selected row of its chunk and writes partial[(m * splits + s) * 4 + {0,1,2,3}]: every CTA writes
    its 4 words exactly once, zeros when its chunk holds no valid slot. No atomics. The host XORs the
    partials of a row (XOR is associative and commutative, so the split does not change the result).
Shape: a warp reads whole rows (lane l: 16-byte words l and l + 32, so each load instruction is
    512 contiguous bytes); the rows of a chunk are dealt to the 8 warps round-robin (warp w: rows
    w, w + 8, ...) so even a 64-row chunk keeps all 8 warps busy. The indirections (selection, then
    page table) are resolved 32 rows at a time, one row per lane, and the valid rows' arena row
    numbers compacted into a per-warp list in shared memory: two dependent round trips per 32 rows
    instead of per row, and no -1 slot costs a load slot. GATHER_ROWS rows (8 x 16 B per lane) are
    in flight before the first XOR.
sparse_gather_xor_fp8: the same over an FP8 arena (codes [rows][512] uint8, scales [rows] float32:
    516 bytes a row). A row is one 16-byte word a lane, so 8 rows (the same 128 bytes a lane) are
    in flight; the lane that resolves a row also loads its scale and XORs its bits into a fifth
    word: partial[(m * splits + s) * 5 + {0..3}] = the codes' words, + 4 = the scales'.
Both are one template (gather_xor_body): the row width in 16-byte words a lane, the rows in
flight, and whether rows carry a scale.
sparse_gather_tma: the same rows and the same checksum (BF16), copied into shared memory by the
    bulk-copy (TMA) engine instead of the SM's load path: what a producer built on it (one
    instruction a 128-byte row segment, ~8 a row, against ~64 lane copies in split_wgmma_ws's
    cp.async producer, whose consumers waited on it: NOTES.md) could feed a sparse MLA kernel.
    Layout of the copy: the arena as a 2-D tensor map [rows][512] of 2-byte elements, a box of
    {64 elements, 1 row} with the 128-byte swizzle (kernels/tma.py), i.e. exactly one 128-byte
    segment of a K-major SW128 wgmma tile row. Grid (splits, M), block GTMA_THREADS, one CTA an SM
    (GTMA_SMEM bytes of ring). Warp 0 produces: for each group of 32 chunk rows, a stage of the ring
    (GTMA_STAGES stages of 32 rows x 1 KiB, 1024-aligned), its empty barrier waited, lane l resolves
    row l (selection -> page table), lane 0 posts the stage's valid-row mask and arrives on the full
    barrier expecting valid x 1024 bytes, and each valid lane issues its row's 8 segment boxes
    (row l of the stage at + 1024 l, segment g at + 128 g); the next groups' token and page loads
    run one and two groups ahead. Warps 1.. wait on the full barrier,
    XOR the valid rows' 16-byte words (the swizzle permutes whole 16-byte words within a 128-byte
    segment, so the XOR is sparse_gather_xor's), and arrive on the empty barrier (one arrival a
    warp). No byte of an invalid row is read. The partial as sparse_gather_xor's.
    sparse_gather_tma4: the same with 4 producer warps (2 segments of each row apiece);
    sparse_gather_bulk: each row one 1 KiB 1-D bulk copy instead (no tensor map, no swizzle). They
    tell whether the box rate belongs to the issuing warp, to the copy engine per request, or to its
    bytes (kernels/sparse_mla/NOTES.md).
    sparse_gather_tma4_runs: tma4 with a box of {64 elements, 4 rows} wherever four lanes of a
    quad (lanes 4j..4j+3) resolve to four consecutive arena rows (the grouped selection's runs of
    kpool = 4 tokens on a 64-token page): a quarter of the boxes there, one a run segment, from the
    quad's first lane; other valid rows keep their one-row boxes. The stage is segment-major
    ([8 segments][32 rows][128 B]: a K-major SW128 wgmma tile's own layout, where a run's rows of
    one segment lie 128 B apart), so a four-row box lands whole. The second tensor map (box of 4
    rows) follows the first at + 128 bytes. Same checksum: the XOR over the valid rows' words.
*/

#include "sparse_mla_common.cuh"

#define GATHER_THREADS 256
#define GATHER_WARPS (GATHER_THREADS / 32)
#define GATHER_BATCH_BYTES 128  // bytes a lane has in flight before it XORs any (4 BF16 rows, 8 FP8 rows)


// The block's XOR of every thread's words into partial[slot * WORDS + k]: a butterfly within each
// warp, then the GATHER_WARPS warps' words through shared memory (red). WORDS 5: sx is the fifth.
template <int WORDS>
__device__ __forceinline__ void gather_write_partial(unsigned x, unsigned y, unsigned z, unsigned w, unsigned sx,
                                                     unsigned (*red)[WORDS], unsigned* __restrict__ partial,
                                                     size_t slot) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        x ^= __shfl_xor_sync(FULL_MASK, x, o);
        y ^= __shfl_xor_sync(FULL_MASK, y, o);
        z ^= __shfl_xor_sync(FULL_MASK, z, o);
        w ^= __shfl_xor_sync(FULL_MASK, w, o);
        if (WORDS == 5) sx ^= __shfl_xor_sync(FULL_MASK, sx, o);
    }
    if (lane == 0) {
        red[warp][0] = x;
        red[warp][1] = y;
        red[warp][2] = z;
        red[warp][3] = w;
        if (WORDS == 5) red[warp][WORDS - 1] = sx;
    }
    __syncthreads();
    if (threadIdx.x < WORDS) {
        unsigned v = 0u;
#pragma unroll
        for (int k = 0; k < GATHER_WARPS; ++k) v ^= red[k][threadIdx.x];
        partial[slot * WORDS + threadIdx.x] = v;
    }
}

// LOADS: 16-byte words a lane reads of a row (2: BF16 rows of 1 KiB; 1: FP8 codes of 512 B).
// SCALED: the rows carry an FP32 scale each (row_scale[row]), XORed into word 4 of the partial.
template <int LOADS, bool SCALED>
__device__ __forceinline__ void gather_xor_body(const uint4* __restrict__ rows, const float* __restrict__ row_scale,
                                                const int* __restrict__ page_table, const int* __restrict__ selection,
                                                unsigned* __restrict__ partial, int M, int W, int pages_per_stream,
                                                int page_size, int splits) {
    constexpr int ROWS = GATHER_BATCH_BYTES / (16 * LOADS);  // rows a warp has in flight
    constexpr int WORDS = SCALED ? 5 : 4;                      // words of a partial
    __shared__ unsigned red[GATHER_WARPS][WORDS];
    __shared__ long long list[GATHER_WARPS][32];  // a round's valid arena rows, per warp
    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block: the barrier below is never split
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // 64-bit products: s * W cannot overflow even for very long selections.
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int n = end - start;  // rows of this chunk
    const int* sel = selection + (size_t)m * (size_t)W + start;

    unsigned x = 0u, y = 0u, z = 0u, w = 0u, sx = 0u;  // sx: the scales' bits (SCALED)
    // Rounds of 256 chunk rows; in a round lane l of warp w resolves chunk row base + 8 l + w.
    // The warp's valid rows are compacted into list[warp][0 .. nv) (ballot rank, order kept), so
    // the batched loads below are unconditional: with "valid ? load : 0" per row, ptxas copied each
    // row's data out of the load registers (waiting for it) before the next row's load reused them.
    for (int base = 0; base < n; base += 32 * GATHER_WARPS) {
        const int i = base + 8 * lane + warp;
        long long my_row = -1;  // arena row of chunk row i; -1 if out of the chunk or an empty slot
        if (i < n) {
            const int t = ld_nc_s32(sel + i);
            if (t >= 0) my_row = (long long)row_of(page_table, m, t, pages_per_stream, page_size);
        }
        // The scale of the lane's own row, loaded now and XORed after the batches (its latency
        // hides behind theirs instead of stalling the round's first load).
        float my_scale = 0.f;
        if (SCALED && my_row >= 0) my_scale = ld_nc_f32(row_scale + my_row);
        const unsigned valid = __ballot_sync(FULL_MASK, my_row >= 0);
        if (my_row >= 0) list[warp][__popc(valid & ((1u << lane) - 1u))] = my_row;
        __syncwarp();
        const int nv = __popc(valid);  // warp-uniform
        int k = 0;
#pragma unroll 1
        for (; k + ROWS <= nv; k += ROWS) {
            // All row numbers first, then all loads, then the XORs.
            long long r[ROWS];
#pragma unroll
            for (int u = 0; u < ROWS; ++u) r[u] = list[warp][k + u];
            uint4 a[ROWS][LOADS];
#pragma unroll
            for (int u = 0; u < ROWS; ++u) {
                const uint4* p = rows + (size_t)r[u] * (32 * LOADS);
#pragma unroll
                for (int l = 0; l < LOADS; ++l) a[u][l] = ld_nc_v4(p + lane + 32 * l);
            }
#pragma unroll
            for (int u = 0; u < ROWS; ++u)
#pragma unroll
                for (int l = 0; l < LOADS; ++l) {
                    x ^= a[u][l].x;
                    y ^= a[u][l].y;
                    z ^= a[u][l].z;
                    w ^= a[u][l].w;
                }
        }
        for (; k < nv; ++k) {  // the last nv % ROWS rows, one at a time
            const uint4* p = rows + (size_t)list[warp][k] * (32 * LOADS);
#pragma unroll
            for (int l = 0; l < LOADS; ++l) {
                const uint4 a = ld_nc_v4(p + lane + 32 * l);
                x ^= a.x;
                y ^= a.y;
                z ^= a.z;
                w ^= a.w;
            }
        }
        if (SCALED) sx ^= __float_as_uint(my_scale);  // 0.f's bits are 0: no row, no change
        __syncwarp();  // every lane has read list[warp] before the next round overwrites it
    }

    gather_write_partial<WORDS>(x, y, z, w, sx, red, partial, (size_t)m * (size_t)splits + (size_t)s);
}

// minBlocks 4 (64 registers): with the default bound ptxas held the kernel to 32 registers and
// interleaved the first rows' XORs with the last rows' loads (waiting for data with only two rows
// in flight); at 56 registers all 8 loads of a batch issue back to back, and 4 CTAs x 8 warps x
// 4 KiB = 128 KiB are in flight per SM.
extern "C" __global__ void __launch_bounds__(GATHER_THREADS, 4)
sparse_gather_xor(const bf16* __restrict__ arena, const int* __restrict__ page_table,
                  const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                  int pages_per_stream, int page_size, int splits) {
    gather_xor_body<2, false>(reinterpret_cast<const uint4*>(arena), nullptr, page_table, selection, partial, M, W,
                              pages_per_stream, page_size, splits);
}

extern "C" __global__ void __launch_bounds__(GATHER_THREADS, 4)
sparse_gather_xor_fp8(const unsigned char* __restrict__ codes, const float* __restrict__ row_scale,
                      const int* __restrict__ page_table, const int* __restrict__ selection,
                      unsigned* __restrict__ partial, int M, int W, int pages_per_stream, int page_size,
                      int splits) {
    gather_xor_body<1, true>(reinterpret_cast<const uint4*>(codes), row_scale, page_table, selection, partial, M, W,
                             pages_per_stream, page_size, splits);
}

// ---- sparse_gather_tma (variant gather_tma): the gather through the bulk-copy engine ------------
#define GTMA_THREADS 256
#define GTMA_WARPS (GTMA_THREADS / 32)
static_assert(GTMA_WARPS == GATHER_WARPS, "gather_write_partial reduces GATHER_WARPS warps");
#define GTMA_ROWS 32                      // rows a stage: one producer lane each
#define GTMA_STAGES 6                     // 192 KiB of ring: more in flight than gather_xor's 128 KiB an SM
#define GTMA_STAGE_BYTES (GTMA_ROWS * 1024)
#define GTMA_SMEM 197632                  // the ring + 1024 B of slack to place it 1024-aligned (a literal: the launcher reads it)
static_assert(GTMA_SMEM == GTMA_STAGES * GTMA_STAGE_BYTES + 1024, "GTMA_SMEM: the ring and its alignment slack");

// PRODUCERS warps issue the boxes (warp p: segments [p S, (p + 1) S) of every row, S = 8 /
// PRODUCERS, each warp resolving the group's rows itself), the other warps XOR. BULK: each row one
// 1-D bulk copy of its 1 KiB (cp.async.bulk, no tensor map, no swizzle: a row-major stage no wgmma
// operand can read as it is), src the arena; else src the tensor map's address.
template <int PRODUCERS, bool BULK, bool RUNS = false>
__device__ __forceinline__ void gather_tma_body(const void* __restrict__ src, const int* __restrict__ page_table,
                                                const int* __restrict__ selection, unsigned* __restrict__ partial,
                                                int M, int W, int pages_per_stream, int page_size, int splits) {
    static_assert(8 % PRODUCERS == 0 && PRODUCERS < GTMA_WARPS, "whole segments a producer warp, a consumer left");
    static_assert(!BULK || PRODUCERS == 1, "a bulk row copy is one instruction: one producer warp");
    static_assert(!(RUNS && BULK), "the runs' boxes come from the tensor maps");
    constexpr int SEGS = 8 / PRODUCERS;    // 128-byte segments a producer warp issues of each row
    extern __shared__ __align__(16) unsigned char gtma_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * GTMA_STAGES];   // full, then empty
    __shared__ unsigned stage_valid[GTMA_STAGES];
    __shared__ unsigned red[GTMA_WARPS][4];
    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    if (dynamic_smem_bytes() < GTMA_SMEM) __trap();
    const unsigned ring = (smem_addr(gtma_smem) + 1023u) & ~1023u;  // the swizzle's 1024-B pattern
    const unsigned full0 = smem_addr(bars), empty0 = full0 + 8u * GTMA_STAGES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int groups = (end - start + GTMA_ROWS - 1) / GTMA_ROWS;
    if (threadIdx.x == 0) {
        for (int st = 0; st < GTMA_STAGES; ++st) {
            mbar_init(full0 + 8u * st, PRODUCERS);                 // each producer warp's expect-tx arrival
            mbar_init(empty0 + 8u * st, GTMA_WARPS - PRODUCERS);   // one arrival a consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    unsigned x = 0u, y = 0u, z = 0u, w = 0u;
    if (warp < PRODUCERS) {
        // Lane l carries chunk row l of each group: the token of group g + 1 is loaded while group g
        // is issued, its page looked up at the end of iteration g (used at g + 1, after the empty
        // wait), so the two dependent loads of a group are off the issue path once the ring is full.
        const int* sel = selection + (size_t)m * (size_t)W;
        auto token = [&](int g) {
            const int i = start + g * GTMA_ROWS + lane;
            return g < groups && i < end ? ld_nc_s32(sel + i) : -1;
        };
        auto arena_row = [&](int t) {
            return t >= 0 ? (long long)row_of(page_table, m, t, pages_per_stream, page_size) : -1ll;
        };
        // The descriptor was written to global memory by a host copy (the generic proxy); the copy
        // engine reads it through the tensor-map proxy: acquire it once, in every issuing thread.
        if (!BULK) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(src) : "memory");
        const void* src4 = static_cast<const unsigned char*>(src) + 128;   // RUNS: the 4-row box's map
        if (RUNS) asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(src4) : "memory");
        long long row = arena_row(token(0));
        int tok_next = token(1);
        for (int g = 0; g < groups; ++g) {
            const int st = g % GTMA_STAGES;
            const unsigned use = (unsigned)(g / GTMA_STAGES);
            mbar_wait(empty0 + 8u * st, (use & 1u) ^ 1u);   // the first use of a stage passes at once
            const unsigned valid = __ballot_sync(FULL_MASK, row >= 0);
            if (lane == 0) {
                if (warp == 0) stage_valid[st] = valid;     // released by the arrival below
                mbar_arrive_expect_tx(full0 + 8u * st, (unsigned)__popc(valid) * 128u * SEGS);
            }
            __syncwarp();
            // RUNS: a quad whose four rows are consecutive arena rows is one box of 4 rows a segment,
            // issued by its first lane (arena rows fit an int: spec refuses 2^31 and more)
            bool run_head = false, in_run = false;
            if (RUNS) {
                const int r = (int)row;
                const int r1 = __shfl_down_sync(FULL_MASK, r, 1), r2 = __shfl_down_sync(FULL_MASK, r, 2),
                          r3 = __shfl_down_sync(FULL_MASK, r, 3);
                run_head = (lane & 3) == 0 && r >= 0 && r1 == r + 1 && r2 == r + 2 && r3 == r + 3;
                in_run = __shfl_sync(FULL_MASK, run_head, lane & ~3);
            }
            if (RUNS && row >= 0 && (!in_run || run_head)) {
                const unsigned dst = ring + (unsigned)st * GTMA_STAGE_BYTES + 128u * (unsigned)lane;
#pragma unroll
                for (int seg = warp * SEGS; seg < (warp + 1) * SEGS; ++seg)
                    tma_load_2d(dst + (GTMA_STAGE_BYTES / 8u) * seg, run_head ? src4 : src, 64 * seg, (int)row,
                                full0 + 8u * st);
            } else if (!RUNS && row >= 0) {
                const unsigned dst = ring + (unsigned)st * GTMA_STAGE_BYTES + 1024u * (unsigned)lane;
                if (BULK) {
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                                 ::"r"(dst), "l"(static_cast<const unsigned char*>(src) + (size_t)row * 1024u),
                                 "r"(full0 + 8u * st) : "memory");
                } else {
#pragma unroll
                    for (int seg = warp * SEGS; seg < (warp + 1) * SEGS; ++seg)
                        tma_load_2d(dst + 128u * seg, src, 64 * seg, (int)row, full0 + 8u * st);
                }
            }
            row = arena_row(tok_next);
            tok_next = token(g + 2);
        }
    } else {
        const int c0 = threadIdx.x - 32 * PRODUCERS;        // 0 .. the consumers' threads - 1
        for (int g = 0; g < groups; ++g) {
            const int st = g % GTMA_STAGES;
            mbar_wait(full0 + 8u * st, (unsigned)(g / GTMA_STAGES) & 1u);
            const unsigned valid = stage_valid[st];
            const unsigned base = ring + (unsigned)st * GTMA_STAGE_BYTES;
            for (int c = c0; c < GTMA_ROWS * 64; c += GTMA_THREADS - 32 * PRODUCERS) {
                // 16-B word c: row c / 64 (row-major stage), row (c / 8) % 32 (RUNS: segment-major)
                const int r = RUNS ? (c >> 3) & (GTMA_ROWS - 1) : c >> 6;
                if ((valid >> r) & 1u) {
                    unsigned a, b, d, e;
                    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                                 : "=r"(a), "=r"(b), "=r"(d), "=r"(e) : "r"(base + 16u * c));
                    x ^= a;
                    y ^= b;
                    z ^= d;
                    w ^= e;
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8u * st);   // this warp is done with the stage
        }
    }
    gather_write_partial<4>(x, y, z, w, 0u, red, partial, (size_t)m * (size_t)splits + (size_t)s);
}

extern "C" __global__ void __launch_bounds__(GTMA_THREADS, 1)
sparse_gather_tma(const void* __restrict__ tmap, const int* __restrict__ page_table,
                  const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                  int pages_per_stream, int page_size, int splits) {
    gather_tma_body<1, false>(tmap, page_table, selection, partial, M, W, pages_per_stream, page_size, splits);
}

// 4 producer warps, 2 segments of each row apiece: whether the box rate is the issuing warp's or the SM's.
extern "C" __global__ void __launch_bounds__(GTMA_THREADS, 1)
sparse_gather_tma4(const void* __restrict__ tmap, const int* __restrict__ page_table,
                   const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                   int pages_per_stream, int page_size, int splits) {
    gather_tma_body<4, false>(tmap, page_table, selection, partial, M, W, pages_per_stream, page_size, splits);
}

// tma4 with a 4-row box a segment over each run of four consecutive arena rows: whether a quarter
// of the requests where the grouped selection has runs brings the copy engine to the gather's rate.
extern "C" __global__ void __launch_bounds__(GTMA_THREADS, 1)
sparse_gather_tma4_runs(const void* __restrict__ tmaps, const int* __restrict__ page_table,
                        const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                        int pages_per_stream, int page_size, int splits) {
    gather_tma_body<4, false, true>(tmaps, page_table, selection, partial, M, W, pages_per_stream, page_size, splits);
}

// Each row one 1 KiB bulk copy (no tensor map, no swizzle): whether the engine's rate is per request
// or per byte, at 8x the bytes a request of gather_tma's boxes.
extern "C" __global__ void __launch_bounds__(GTMA_THREADS, 1)
sparse_gather_bulk(const bf16* __restrict__ arena, const int* __restrict__ page_table,
                   const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                   int pages_per_stream, int page_size, int splits) {
    gather_tma_body<1, true>(arena, page_table, selection, partial, M, W, pages_per_stream, page_size, splits);
}

// ---- sparse_gather_ring_* (variants gather_ring_<TILE>x<STAGES>): the wgmma designs' copy schedule alone --
// The same rows and checksum as sparse_gather_xor, moved the way split_wgmma's and
// split_wgmma_seesaw's cp.async rings move them, with no math: one CTA of 256 threads an SM
// (one_wave_splits), a ring of STAGES stages of TILE rows x 1 KiB, STAGES - 1 tiles in flight while
// one is "computed" (here: each thread XORs the 16-byte chunks it copied). Its time against
// gather_xor's (128 KiB in flight an SM from registers, 4 CTAs an SM) and against the designs' says
// how much of their distance from the gather is the depth of a shared-memory ring that must sit
// beside q (64 KiB) in one SM, rather than their math. The chunk's arena rows are resolved once in
// the prologue into shared memory (all loads in parallel), so no row chain sits on the copy path.
// Per tile: cp.async.wait_group STAGES - 2, __syncthreads (the stage of tile it - 1 free), tile
// it + STAGES - 1 issued into it, then tile it read. Thread tid copies chunk tid % 64 of rows
// tid / 64 + 4 i (split_wgmma's map: a warp 512 contiguous bytes of a row); an invalid row is
// zero-filled (cp.async src-size 0), so XORing it changes nothing: the checksum is gather_xor's.
#define GRING_THREADS 256

template <int TILE, int STAGES>
struct GatherRing {
    static constexpr int STAGE_BYTES = TILE * 1024;
    static constexpr int RING = STAGES * STAGE_BYTES;
};
// The rings' bytes (literals: the launcher reads them and adds 4 bytes a chunk slot for the row list)
#define GRING_RING_64x2 131072
#define GRING_RING_32x4 131072
#define GRING_RING_64x3 196608
#define GRING_RING_32x6 196608
static_assert(GRING_RING_64x2 == GatherRing<64, 2>::RING && GRING_RING_32x4 == GatherRing<32, 4>::RING &&
                  GRING_RING_64x3 == GatherRing<64, 3>::RING && GRING_RING_32x6 == GatherRing<32, 6>::RING,
              "GRING_RING literals");

template <int TILE, int STAGES>
__device__ __forceinline__ void gather_ring_body(const bf16* __restrict__ arena, const int* __restrict__ page_table,
                                                 const int* __restrict__ selection, unsigned* __restrict__ partial,
                                                 int M, int W, int pages_per_stream, int page_size, int splits) {
    using G = GatherRing<TILE, STAGES>;
    constexpr int PER = TILE * 64 / GRING_THREADS;  // 16-byte chunks a thread copies a tile
    extern __shared__ __align__(16) unsigned char gring_smem[];
    __shared__ unsigned red[GATHER_WARPS][4];
    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + TILE - 1) / TILE;
    if (dynamic_smem_bytes() < (unsigned)(G::RING + 4 * ntiles * TILE)) __trap();  // the ring and the row list
    int* rows = reinterpret_cast<int*>(gring_smem + G::RING);  // arena row of chunk slot i, -1 invalid
    const int* sel = selection + (size_t)m * (size_t)W;
    for (int i = threadIdx.x; i < ntiles * TILE; i += GRING_THREADS) {
        const int t = start + i < end ? ld_nc_s32(sel + start + i) : -1;
        rows[i] = t >= 0 ? (int)row_of(page_table, m, t, pages_per_stream, page_size) : -1;
    }
    __syncthreads();
    const int c = threadIdx.x & 63, r0 = threadIdx.x >> 6;
    auto issue = [&](int tile) {
        if (tile < ntiles) {
            unsigned char* stage = gring_smem + (tile % STAGES) * G::STAGE_BYTES;
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                const int r = r0 + 4 * i;
                const int row = rows[tile * TILE + r];
                const bool ok = row >= 0;
                cp_async16_zfill(stage + r * 1024 + c * 16, ok ? arena + (size_t)row * SMLA_DIM + c * 8 : arena,
                                 ok ? 16u : 0u);
            }
        }
        cp_async_commit();  // one group a tile (empty past the last)
    };
#pragma unroll
    for (int k = 0; k < STAGES - 1; ++k) issue(k);
    unsigned x = 0u, y = 0u, z = 0u, w = 0u;
#pragma unroll 1
    for (int it = 0; it < ntiles; ++it) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile it
        __syncthreads();              // every thread past tile it - 1: its stage is free
        issue(it + STAGES - 1);
        const unsigned char* stage = gring_smem + (it % STAGES) * G::STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const uint4 v = *reinterpret_cast<const uint4*>(stage + (r0 + 4 * i) * 1024 + c * 16);
            x ^= v.x;
            y ^= v.y;
            z ^= v.z;
            w ^= v.w;
        }
    }
    cp_async_wait<0>();
    gather_write_partial<4>(x, y, z, w, 0u, red, partial, (size_t)m * (size_t)splits + (size_t)s);
}

#define GATHER_RING_KERNEL(TILE, STAGES)                                                                        \
    extern "C" __global__ void __launch_bounds__(GRING_THREADS, 1)                                             \
    sparse_gather_ring_##TILE##x##STAGES(const bf16* __restrict__ arena, const int* __restrict__ page_table,   \
                                         const int* __restrict__ selection, unsigned* __restrict__ partial,     \
                                         int M, int W, int pages_per_stream, int page_size, int splits) {       \
        gather_ring_body<TILE, STAGES>(arena, page_table, selection, partial, M, W, pages_per_stream, page_size, \
                                       splits);                                                                 \
    }
GATHER_RING_KERNEL(64, 2)  // split_wgmma's ring: one 64 KiB tile in flight
GATHER_RING_KERNEL(32, 4)  // split_wgmma_t32's: 96 KiB in flight
GATHER_RING_KERNEL(64, 3)  // 128 KiB in flight (no room beside q and the S exchange)
GATHER_RING_KERNEL(32, 6)  // 160 KiB in flight (no room beside q)
