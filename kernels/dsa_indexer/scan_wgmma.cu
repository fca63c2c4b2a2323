/*
DSA indexer scan, design scan_wgmma_e4m3: FP8 keys x FP8 queries on Hopper's native FP8 tensor-core
path, wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 (sm_90a only). The op, layouts and index
conventions: scan_common.cuh; q[m][j] = q_codes[m][j] x q_scales[m][j] (one FP32 scale a (stream,
head), > 0), keys cand_dim [M][C][128] e4m3 codes with one FP32 scale a key (> 0).

One CTA = one warpgroup (128 threads, 4 warps) walks 64-key tiles (tile c0 = 64 x tile):
    D[64 keys x 32 heads] = K[64 x 128] . Q^T[128 x 32] as 4 wgmma of k = 32 (dims 32 s .. 32 s + 31),
    both operands from shared memory through matrix descriptors (wgmma "SS"), dims in their natural
    order (no permutation: nothing is read into registers by fragment).
Why A is not from registers (the first version of this file, SCAN_NOTES "wgmma e4m3"): the wgmma A
    operand is 4 consecutive registers (a0, a1, a2, a3) = (row g, row g + 8, row g, row g + 8), so no
    16-byte load of one key row lands in it; ptxas (nvcc 13.0) then moves every loaded word into the
    quads right after the next tile's LDGs (16 MOVs a tile), and a move of a load in flight waits for
    it: the next tile's loads would complete before this tile's wgmma, one tile in flight a warp.
Shared memory (1024-byte aligned at run time inside a static array): q's tile (4 KiB) and SCAN_WGMMA_
    STAGES key tiles (8 KiB each) and their scales (256 B each). Both matrices are K-major (a row =
    one key / one head = 128 codes = 128 bytes) and 128-byte swizzled: 16-byte chunk c of row r at
    byte r * 128 + ((c ^ (r % 8)) * 16) of its tile (8-row atoms of 1024 B). The descriptor (CUTLASS
    include/cute/arch/mma_sm90_desc.hpp, union GmmaDescriptor: start address >> 4 in bits [0, 14),
    leading byte offset >> 4 in [16, 30), stride byte offset >> 4 in [32, 46), base offset in
    [49, 52), layout type in [62, 64) with SWIZZLE_128B = 1; make_gmma_desc, Major::K, in
    include/cute/atom/mma_traits_sm90_gmma.hpp: a swizzled K-major layout takes LBO = 1 ("unused,
    assumed 1") and SBO = the stride between 8-row groups, here 1024 B = 64): start = the tile's
    shared address + 32 s for k-step s (32 codes = 32 bytes inside the 128-byte swizzle row; the
    hardware XORs address bits [4, 7) with [7, 10) after adding row and chunk offsets, which is why
    DeepGEMM advances the start address by WGMMA::K bytes per k-step for its FP8 K-major tiles), base
    offset 0 (every tile 1024-aligned; 32 s < 128 leaves bits [7, 10) alone). A is 64 rows (8 atoms),
    B 32 rows (4 atoms); both the same descriptor form.
The pipeline (per CTA, every thread): SCAN_WGMMA_STAGES - 1 tiles of keys in flight through
    cp.async.cg (16 bytes a thread, 4 a tile, straight to L2 -> shared memory, rows at or past
    eligible[m] zero-filled with src-size 0 and never read) plus one 4-byte cp.async of each row's
    scale; one commit group a tile (empty past the CTA's last tile, so the counts stay uniform).
    Tile k: cp.async.wait_group STAGES - 2 (this thread's copies of tile k landed); at a stream change
    __syncthreads (every warp past its last wgmma of the old stream), q's 4 KiB and the folded weights
    rewritten; fence.proxy.async.shared::cta (the generic-proxy writes, cp.async's and q's, made
    visible to the async proxy the wgmma read through); __syncthreads; then issue tile k + STAGES - 1
    into the stage tile k - 1 used (every warp finished its wgmma and epilogue: the barrier);
    wgmma.fence, 4 wgmma (scale-d 0 on the first: no zeroing), commit_group, wait_group 0 (its asm
    names the 16 accumulators, so no epilogue read moves above it).
D (registers, 16 f32 a thread; CUTLASS CLayout_64xN): d[4 j + 2 v1 + v0] = row 16 warp + g + 8 v1,
    head 8 j + 2 t + v0 (g = lane / 4, t = lane % 4): mma.sync's D per 8-head n-tile j, so the epilogue
    is scan_mma's: relu, x wq = w x q_scale (folded once a stream, right because q_scale > 0: relu(qs
    x) = qs relu(x)), the 8 heads a thread holds, two quad shuffles, x the key's scale, -inf for
    eligible <= row < C, nothing written past C.
Work: the M x ceil(C / 64) tiles flattened stream-major; CTA b takes [b tpc, (b + 1) tpc) (a persistent
    grid, the launcher's). Control flow is CTA-uniform (wgmma and the barriers need every warp).

The wgmma code exists only where the build targets sm_90a (the launcher compiles this file with
-arch=sm_90a -DSCAN_WGMMA_SM90A; nvcc -arch=sm_90a defines __CUDA_ARCH_FEAT_SM90_ALL): for plain sm_90
(the repository's compile test) the kernel body is a trap, so a wrong-arch build fails loudly
instead of scoring nothing. -DSCAN_WGMMA_UNGUARDED
compiles the wgmma code for any arch: with -arch=sm_90, ptxas rejects it (SCAN_NOTES).
Precision: wgmma's FP8 accumulation is not FP32 (DeepSeek-V3 report §3.3.2: about 14 bits kept on
    H800): SCAN_NOTES "wgmma e4m3"; the GPU test holds this variant to 5e-3, not 1e-5.
*/

#include "scan_mma_ops.cuh"  // scan_common.cuh, folded_weights

#define SCAN_WGMMA_THREADS 128    // one warpgroup
#define SCAN_WGMMA_TILE 64        // keys a CTA tile (the launcher reads it)
#define SCAN_WGMMA_STAGES 4       // key tiles in shared memory: STAGES - 1 in flight
#define SCAN_WGMMA_CTAS_PER_SM 4  // launch bounds
#define SCAN_WGMMA_Q_BYTES (SCAN_HEADS * SCAN_DIM)            // 4096
#define SCAN_WGMMA_K_BYTES (SCAN_WGMMA_TILE * SCAN_DIM)       // 8192
// shared layout, offsets from the 1024-aligned base: q | STAGES key tiles | STAGES x 64 scales
#define SCAN_WGMMA_KEYS_AT SCAN_WGMMA_Q_BYTES
#define SCAN_WGMMA_SCALES_AT (SCAN_WGMMA_KEYS_AT + SCAN_WGMMA_STAGES * SCAN_WGMMA_K_BYTES)
#define SCAN_WGMMA_SMEM (SCAN_WGMMA_SCALES_AT + SCAN_WGMMA_STAGES * SCAN_WGMMA_TILE * 4)

// SCAN_WGMMA_SM90A: the launcher's define beside -arch=sm_90a (no reliance on NVRTC defining the
// feature macro); __CUDA_ARCH_FEAT_SM90_ALL: nvcc -arch=sm_90a; SCAN_WGMMA_UNGUARDED: the arch check.
#if defined(SCAN_WGMMA_SM90A) || defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(SCAN_WGMMA_UNGUARDED)
#define SCAN_WGMMA_ENABLED 1
#endif

#ifdef SCAN_WGMMA_ENABLED

// The 32-bit shared-memory address of a generic pointer into this CTA's shared memory (the two lines
// topk_resident.cu and kda_common.cuh have; copied, as they are, rather than shared across files).
__device__ __forceinline__ unsigned shared_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 g; cvta.to.shared.u64 g, %1; cvt.u32.u64 %0, g; }" : "=r"(a) : "l"(p));
    return a;
}

// The byte of 16-byte chunk c of row r in a 128-byte-swizzled K-major tile (header).
__device__ __forceinline__ unsigned sw128(int r, int c) { return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4)); }

// The descriptor of a SWIZZLE_128B K-major tile at shared address addr (1024-aligned + 32 s; header).
__device__ __forceinline__ unsigned long long wgmma_desc_sw128(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4)      // start address >> 4, bits [0, 14)
         | (1ull << 16)                                       // LBO: unused for swizzled K-major, 1
         | ((unsigned long long)(1024 >> 4) << 32)            // SBO: 8 rows x 128 B
         | (1ull << 62);                                      // layout type SWIZZLE_128B (base offset 0)
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_stages() {
    asm volatile("cp.async.wait_group %0;" ::"n"(SCAN_WGMMA_STAGES - 2) : "memory");
}
#include "../common/wgmma.cuh"  // fence_proxy_async_shared, wgmma_fence / _commit (cp_async_commit: ../common/device.cuh)

// wait_group 0 naming the accumulators: the epilogue's reads of d cannot be scheduled above it.
__device__ __forceinline__ void wgmma_wait_all(float (&d)[16]) {
    asm volatile("wgmma.wait_group.sync.aligned 0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15])
                 :
                 : "memory");
}

// D (64 x 32 f32) = (ACC ? D : 0) + A (64 x 32 e4m3) . B^T (B: 32 heads x 32 e4m3), both by descriptor.
template <bool ACC>
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[16], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"((int)ACC)
        : "memory");
}

// A position in the stream-major walk: tile `tile` of stream m, whose eligible count is elig.
struct Cursor {
    int m, tile, elig;
    __device__ __forceinline__ void advance(const int* __restrict__ eligible, int M, int ntiles) {
        if (++tile == ntiles) {
            tile = 0;
            ++m;
            elig = m < M ? ld_nc_s32(eligible + m) : 0;  // read once a stream, never past M
        }
    }
};

// Tile `at` of the walk into stage `stage` by cp.async: thread i copies ids i + 128 j (j < 4), row r =
// id / 8 = i / 8 + 16 j, chunk c = id % 8 = i % 8 of key c0 + r, to sw128(r, c) = sw128(i / 8, i % 8) +
// 2048 j (16 j leaves r % 8 alone) from byte 16 id = 16 i + 2048 j of the tile's keys: one base
// pointer a tile and immediate offsets (dst0 = the thread's sw128(i / 8, i % 8)). A warp covers 4
// whole key rows (512 contiguous bytes). Rows at or past elig are zero-filled (src-size 0, the
// address clamped to the stream's row 0: nothing past eligible is read); threads < 64 copy one scale.
__device__ __forceinline__ void issue_tile(const Cursor& at, unsigned base, unsigned dst0, int stage,
                                           const unsigned char* __restrict__ keys, const float* __restrict__ scales,
                                           int C) {
    constexpr int J = SCAN_WGMMA_K_BYTES / 16 / SCAN_WGMMA_THREADS;   // 4
    constexpr int STEP = SCAN_WGMMA_THREADS * 16;                     // 2048 bytes = 16 rows
    const int c0 = at.tile * SCAN_WGMMA_TILE;
    const size_t stream = (size_t)at.m * (size_t)C;
    const unsigned dst = base + SCAN_WGMMA_KEYS_AT + stage * SCAN_WGMMA_K_BYTES + dst0;
    const unsigned char* src = keys + (stream + (size_t)c0) * SCAN_DIM + 16 * threadIdx.x;
    if (c0 + SCAN_WGMMA_TILE <= at.elig) {  // CTA-uniform: every row eligible
#pragma unroll
        for (int j = 0; j < J; ++j) cp_async16(dst + STEP * j, src + STEP * j, 16);
    } else {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const bool ok = c0 + (int)(threadIdx.x >> 3) + 16 * j < at.elig;
            cp_async16(dst + STEP * j, ok ? (const void*)(src + STEP * j) : (const void*)(keys + stream * SCAN_DIM),
                       ok ? 16 : 0);
        }
    }
    if (threadIdx.x < SCAN_WGMMA_TILE) {
        const int r = threadIdx.x;
        const bool ok = c0 + r < at.elig;
        cp_async4(base + SCAN_WGMMA_SCALES_AT + (stage * SCAN_WGMMA_TILE + r) * 4, scales + stream + (ok ? c0 + r : 0),
                  ok ? 4 : 0);
    }
}

// q's codes of stream m into the swizzled B tile (natural dim order) and this thread's folded weights
// wq = w x q_scale of heads 8 j + 2 t + e. The caller brackets it with a barrier before (the old q is
// no longer read) and the fence + barrier after.
__device__ __forceinline__ void write_q(unsigned char* smem, float (&wr)[4][2], const unsigned char* __restrict__ q,
                                        const float* __restrict__ qs, const float* __restrict__ w, int m, int t) {
#pragma unroll
    for (int j = 0; j < SCAN_WGMMA_Q_BYTES / 16 / SCAN_WGMMA_THREADS; ++j) {
        const int id = threadIdx.x + SCAN_WGMMA_THREADS * j;
        const int h = id >> 3, c = id & 7;
        *reinterpret_cast<uint4*>(smem + sw128(h, c)) = ld_nc_v4(q + ((size_t)m * SCAN_HEADS + h) * SCAN_DIM + 16 * c);
    }
    folded_weights(wr, qs, w, m, t);
}

#endif  // SCAN_WGMMA_ENABLED

// q_codes [M][32][128] e4m3, q_scales [M][32] FP32 (> 0), w [M][32], keys [M][C][128] e4m3, scales
// [M][C], eligible [M], scores [M][C]; tiles_per_cta: the launcher's (its CTAs cover every tile).
extern "C" __global__ void __launch_bounds__(SCAN_WGMMA_THREADS, SCAN_WGMMA_CTAS_PER_SM)
scan_wgmma_e4m3(const unsigned char* __restrict__ q, const float* __restrict__ q_scales,
                const float* __restrict__ w, const unsigned char* __restrict__ keys,
                const float* __restrict__ scales, const int* __restrict__ eligible, float* __restrict__ scores,
                int M, int C, int tiles_per_cta) {
#ifdef SCAN_WGMMA_ENABLED
    // The tiles at a 1024-byte aligned shared address (the 128-byte swizzle's atoms), placed inside
    // the array at run time: nothing relies on where the compiler puts it.
    __shared__ __align__(1024) unsigned char raw[SCAN_WGMMA_SMEM + 1024];
    const unsigned raw_addr = shared_addr(raw);
    const unsigned pad = (1024u - (raw_addr & 1023u)) & 1023u;
    unsigned char* smem = raw + pad;
    const unsigned base = raw_addr + pad;
    const float* tile_scales = reinterpret_cast<const float*>(smem + SCAN_WGMMA_SCALES_AT);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int ntiles = (C + SCAN_WGMMA_TILE - 1) / SCAN_WGMMA_TILE;  // ints: M x C < 2^31 (check_point)
    const int total = M * ntiles;
    const int first = blockIdx.x * tiles_per_cta;
    const int last = min(first + tiles_per_cta, total);
    if (first >= last) return;  // CTA-uniform: the whole CTA leaves, no barrier is left waiting

    const unsigned dst0 = sw128(threadIdx.x >> 3, threadIdx.x & 7);  // this thread's chunk in a key tile
    Cursor cur{first / ntiles, first % ntiles, 0};
    cur.elig = ld_nc_s32(eligible + cur.m);
    Cursor ahead = cur;  // the next tile to issue
#pragma unroll
    for (int k = 0; k < SCAN_WGMMA_STAGES - 1; ++k) {
        if (first + k < last) {
            issue_tile(ahead, base, dst0, k, keys, scales, C);
            ahead.advance(eligible, M, ntiles);
        }
        cp_async_commit();
    }

    const unsigned long long q_desc = wgmma_desc_sw128(base);
    float wr[4][2];
    int q_stream = -1;  // the stream whose q sits in shared memory
#pragma unroll 1
    for (int k = 0; first + k < last; ++k) {
        const int stage = k % SCAN_WGMMA_STAGES;
        cp_async_wait_stages();  // this thread's copies of tile k have landed
        if (cur.m != q_stream) {
            __syncthreads();     // every warp is past its wgmma of the old stream's last tile
            write_q(smem, wr, q, q_scales, w, cur.m, t);
            q_stream = cur.m;
        }
        fence_proxy_async_shared();
        __syncthreads();         // every thread's tile-k copies (and q) visible; tile k - 1 fully consumed
        if (first + k + SCAN_WGMMA_STAGES - 1 < last) {
            issue_tile(ahead, base, dst0, (k + SCAN_WGMMA_STAGES - 1) % SCAN_WGMMA_STAGES, keys, scales, C);
            ahead.advance(eligible, M, ntiles);
        }
        cp_async_commit();

        float d[16];
        const unsigned long long da0 = wgmma_desc_sw128(base + SCAN_WGMMA_KEYS_AT + stage * SCAN_WGMMA_K_BYTES);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            // + 32 s bytes = + 2 s in the start-address field (< 2^14 units: no carry out of it)
            const unsigned long long da = da0 + 2 * s, db = q_desc + 2 * s;
            if (s == 0) wgmma_e4m3_ss<false>(d, da, db);
            else wgmma_e4m3_ss<true>(d, da, db);
        }
        wgmma_commit();
        wgmma_wait_all(d);

        // rows g and g + 8 of this warp's 16: d[4 j + e] is n-tile j's element e, mma.sync's D layout
        const float2 sums = quad_head_sums(reinterpret_cast<const float (&)[4][4]>(d), wr);
        const int r = 16 * warp + g + 8 * (t & 1);  // t = 0: row g, t = 1: row g + 8 of this warp's 16
        const int row = cur.tile * SCAN_WGMMA_TILE + r;
        const float value = ((t & 1) ? sums.y : sums.x) * tile_scales[stage * SCAN_WGMMA_TILE + r];
        if (t < 2 && row < C) scores[(size_t)cur.m * (size_t)C + row] = row < cur.elig ? value : neg_inf();
        cur.advance(eligible, M, ntiles);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // leave no copy in flight (the trailing groups are empty)
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}
