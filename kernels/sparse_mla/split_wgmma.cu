/*
Sparse MLA decode, design split_wgmma (BF16 latent, sm_90a): the split-K contract of split_mma
(sparse_mla_split_mma.cuh: grid (splits, M); CTA (s, m) takes slots [s W / splits, (s + 1) W / splits)
of row m, any length, a ragged last tile masked; it writes every element of
    part_ml [((m splits + s) 64 + h) 2 + 0] = max of its scaled scores (natural log units; -inf if none valid)
    part_ml [((m splits + s) 64 + h) 2 + 1] = sum over its valid slots of exp(score - max)
    part_acc[((m splits + s) 64 + h) 512 + d] = sum of exp(score - max) c_j[d]   (unnormalised)
then the shared sparse_mla_combine), with both products on Hopper's warpgroup MMA. The op and the
index conventions: sparse_mla_common.cuh (q [M][64][512] bf16, selection [M][W] int32 with -1 slots
never read, page_table [M][pages_per_stream], arena [rows][512] bf16).

CTA: 2 warpgroups (256 threads, __launch_bounds__(256, 1)). The 64 heads are wgmma's M = 64.
Warpgroup h (0, 1) owns latent dims [256 h, 256 h + 256) and, per 64-slot tile:
    S_h[64 heads x 64 slots] = Q[:, half h] . C[:, half h]^T   16 x wgmma m64n64k16 "SS"
    S = S_0 + S_1 (exchanged through shared memory: thread i of both warpgroups holds the same
        (head, slot) positions, fp32 addition commutes, so both hold a bit-identical S and compute
        the same max, p and row sum with no further exchange)
    online softmax in registers (a head row's 64 slots sit in one quad: two shuffles)
    O_h[64 x 256] = alpha O_h + P[64 x 64] . C[:, half h]      4 x wgmma m64n256k16 "RS", B transposed
P never leaves registers: the m64n64 f32 accumulator of S, packed to bf16 pairs, is the A fragment
of m64k16 (FlashAttention-3's trick; the mapping is modelled in tests/test_sparse_mla.py):
    D (m64nN f32, PTX ISA "wgmma .m64nNk16 register fragment layout for accumulator D"; CUTLASS
      CLayout_64xN): d[4 j + 2 v1 + v0] = (row 16 w + g + 8 v1, col 8 j + 2 t + v0),
      w = warp in the warpgroup, g = lane / 4, t = lane % 4
    A (m64k16 bf16 in registers, the same ISA section's A figure): a0 = (row 16 w + g, k 2t, 2t + 1),
      a1 = (row + 8, k 2t, 2t + 1), a2 = (row, k 2t + 8, 2t + 9), a3 = (row + 8, k 2t + 8, 2t + 9),
      the lower k in the low half
    so for k-step ks (slots 16 ks .. 16 ks + 15): a_i = pack(d[8 ks + 2 i], d[8 ks + 2 i + 1]).
    (CUTLASS 7107b05 include/cute/atom/mma_traits_sm90_gmma.hpp: CLayout_64xN, line 434, and the
    register-A ALayout_64x16, line 451, are the same ((4,8,4),(2,2,.)):((128,1,16),(64,8,512)).)

Shared memory (from a 1024-aligned base placed at run time; the launcher gives SMEM_BYTES, which
includes the 1024 of slack):
    sQ   [64 heads][512]    65536   q[m]
    ring [2][64 slots][512] 131072  the tile ring (invalid slots zero-filled)
    xbuf [2 wg][8][128] float4  32768  the S exchange ([chunk][thread]: a warp's float4 stores and
                                       loads are 512 contiguous bytes, conflict-free)
sQ and every tile are stored in 128-byte-swizzle atoms (8 rows x 128 B, 1024-aligned; the hardware
XORs address bits [4, 7) with [7, 10)): element (row r, dim d) at byte
    (r / 8) * 8192 + (d / 64) * 1024 + (r % 8) * 128 + (((d / 8) % 8) ^ (r % 8)) * 16 + (d % 8) * 2
i.e. [row group r / 8][segment d / 64][8 rows][128 B]. The descriptors (CUTLASS
include/cute/arch/mma_sm90_desc.hpp GmmaDescriptor: start >> 4 in bits [0, 14), LBO >> 4 in
[16, 30), SBO >> 4 in [32, 46), base offset [49, 52) = 0, layout [62, 64) = 1 = SWIZZLE_128B), from
make_gmma_desc in include/cute/atom/mma_traits_sm90_gmma.hpp (commit 7107b05, lines 180-262):
  * K-major (S: A = q, B = the tile; canonical ((8,n),2):((8,SBO),1) in 16-B units): LBO unused (1),
    SBO = 8192 (between 8-row groups); k-step s of warpgroup h (dims 256 h + 16 s ..): start =
    base + (4 h + s / 4) * 1024 + (s % 4) * 32 (32 B a k16 step inside a 128-B segment, the next
    segment 1024 B on), as scan_wgmma.cu advances 32 B a k32 e4m3 step. M = 64 heads and N = 64
    slots are both 8 row groups at SBO.
  * MN-major (PV: B = the tile read as K x N = slots x dims, dims contiguous; imm-trans-b = 1, what
    CUTLASS's SM90 RS atoms pass for tnspB = Major::MN; canonical ((8,n),(8,k)):((1,LBO),(8,SBO)),
    line 234, LBO = stride<0,1> = between 64-dim atoms along N, SBO = stride<1,1> = between 8-slot
    groups along K, line 258): LBO = 1024 (the next segment), SBO = 8192 (the next row group);
    k-step ks of warpgroup h: start = stage + 2 ks * 8192 + 4 h * 1024 (1024-aligned). N = 256 dims
    are 4 atoms at LBO, K = 16 slots 2 groups at SBO.
The cp.async writes: thread tid copies chunk c = tid % 64 of rows r = tid / 64 + 4 i (i < 16); a
warp covers 512 contiguous bytes of one row, each 8 lanes one 128-B swizzle row (8 distinct bank
groups): conflict-free.

Pipeline (2 stages, every control decision CTA-uniform). Prologue: q and tile 0 in commit group 0.
Iteration it: cp.async.wait_group 0 (this thread's copies of tile it landed), fence.proxy.async
(its generic-proxy writes made visible to the async proxy wgmma reads through), __syncthreads (every
thread's copies visible; every warpgroup past its wgmma.wait_group 0 of tile it - 1, so tile
it - 1's stage and the exchange buffer are free), issue tile it + 1 into the other stage (one
commit group a tile, empty past the last), then compute tile it while tile it + 1 flies.
Row resolution AHEAD (split_mma_ahead's lesson): lane l of every warp carries slots l and 32 + l of
a tile through the selection and page-table reads, each load consumed the iteration after it was
issued: at iteration it the token of tile it + 3 and the page of tile it + 2 are loaded, tile
it + 1 is issued from the page (and token) loaded at it - 1, tile it's validity ballot uses its
token loaded at it - 2. The arena row a copy thread needs is broadcast from its lane by shuffle.
Masks: an invalid slot (-1, or at or past the chunk's end) scores -inf (its row is zero-filled, never
read); a head row with nothing valid so far keeps max -inf, p = 0 and alpha = 1 (split_mma's guard).
wgmma ordering: wgmma.fence before each batch (the accumulators and P were written by ordinary
instructions), commit_group, wait_group 0; empty asm with "+f" on the accumulators and P around the
fence and after the wait (CUTLASS's warpgroup_fence_operand), so the compiler moves no ordinary
access to them across those points.

The 32-slot instance (sparse_mla_split_wgmma_t32, wg_split<32, 4>; issue 13's tuning): the same
code with TILE = 32 and a 4-stage ring, so 3 tiles (96 KiB) fly while one computes (the 64-slot form
has one 64 KiB tile in flight, issued only after the loop-top barrier). Differences, all
compile-time: S is m64n32k16 SS (16 accumulators; B = 32 rows = 4 row groups at the same SBO), the
exchange 2 x 4 float4 a thread (16 KiB), one token a lane a tile (one ballot), PV 2 k-steps; tile
it + 3 goes into stage (it + 3) % 4 = tile it - 1's, issued right after tile it's S wgmmas are
committed (under them; the stage was freed by the loop-top barrier, which every thread passes only
after its wgmma.wait_group 0 of tile it - 1's PV); the loop-top wait is cp.async.wait_group 2
(groups committed: 3 in the prologue + one an iteration = tiles 0 .. it + 2, so all but the newest
two = tile it landed). The AHEAD chain generalises to tq[k] = token of tile it + k, k <= L + 1
(L = STAGES - 1): tile it + L issued from the page loaded at it - 1, the page of tile it + L + 1
and the token of tile it + L + 2 loaded at it (tests/test_sparse_mla_wgmma.py chain_model checks
the rows, the masks, the waits and the stage reuse of both instances). Shared memory: sQ 64 KiB +
4 x 32 KiB + 16 KiB = 208 KiB (+ 1 KiB slack). m64n32k16 SS reads 2 KiB of q + 1 KiB of tile per
16 MMA clocks = 192 B/clk against the shared-memory port's 128: S runs at 24 clk a k-step, 1.5x
its MMA time (NOTES.md, "split_wgmma tuning").

The cluster form (sparse_mla_split_wgmma_t32_c{2,4,8}, wg_split<32, 4, CS>; M >= 4): grid (CS, M),
the CS splits of a stream one thread-block cluster (compile-time __cluster_dims__), splits = CS,
no partials and no combine kernel. After the loop: __syncthreads (shared memory free), each CTA's
(max, sum) a head published at X_AT, barrier.cluster (1); threads 0-63 read every rank's pair of
head tid through DSMEM (mapa + ld.shared::cluster) and keep gmax = max_r max_r, L = sum_r sum_r
exp(max_r - gmax) locally; each thread writes its O scaled by exp(max - gmax) (0 for an empty
split) to its own shared memory, [64][WG_SO_STRIDE] f32 from offset 0 (over sQ and the ring);
barrier.cluster (2); CTA r sums columns [r 512 / CS, (r + 1) 512 / CS) of all 64 heads over the CS
ranks' scaled O (float4 DSMEM loads), divides by L and writes bf16 out; rank 0 writes lse = gmax +
log L; a row with no valid slot (gmax = -inf) gets zeros and -inf, sparse_mla_combine's contract;
barrier.cluster (3) so that no CTA exits while another reads its shared memory.

The wgmma code exists only where the build targets sm_90a (the launcher passes -arch=sm_90a
-DSPARSE_MLA_WGMMA_SM90A; nvcc -arch=sm_90a defines __CUDA_ARCH_FEAT_SM90_ALL); for plain sm_90 (the
repository's compile test) the kernel body is a trap, as scan_wgmma.cu's.
*/

#include "sparse_mla_split_mma.cuh"  // common, st_v2_f32, and sparse_mla_combine (exported from this module too)

#define SPARSE_MLA_SPLIT_WGMMA_THREADS 256
#define SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES 230400      // 229376 used + 1024 alignment slack
#define SPARSE_MLA_SPLIT_WGMMA_T32_SMEM_BYTES 214016  // 212992 used + 1024 (the 32-slot, 4-stage form)
#define WG_TILE 64                                     // slots a tile (sparse_mla_split_wgmma)
#define WG_Q_AT 0
#define WG_RING_AT 65536
#define WG_STAGE_BYTES 65536

// The shared layout of a (TILE, STAGES) instance: sQ 64 KiB, the ring of STAGES [TILE][512] bf16
// tiles, the S exchange [2 wg][TILE / 8 float4][128 threads].
template <int TILE, int STAGES>
struct WgLayout {
    static constexpr int STAGE_BYTES = TILE * SMLA_DIM * 2;
    static constexpr int X_AT = WG_RING_AT + STAGES * STAGE_BYTES;
    static constexpr int USED = X_AT + 2 * (TILE / 8) * 128 * 16;
};
static_assert(WgLayout<WG_TILE, 2>::STAGE_BYTES == WG_STAGE_BYTES, "smem layout");
static_assert(WgLayout<WG_TILE, 2>::USED + 1024 == SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES, "smem layout");
static_assert(WgLayout<32, 4>::USED + 1024 == SPARSE_MLA_SPLIT_WGMMA_T32_SMEM_BYTES, "smem layout");
// The cluster form's scaled O, [64 heads][WG_SO_STRIDE] f32 from offset 0 (over sQ and the ring),
// and its (max, sum) / (gmax, L) words at X_AT (over the exchange buffer).
#define WG_SO_STRIDE 520  // 512 + 8: rows 16 w + g of a warp's stores 32 B apart in the banks
static_assert(64 * WG_SO_STRIDE * 4 <= WgLayout<32, 4>::X_AT && 64 * WG_SO_STRIDE * 4 <= WgLayout<64, 2>::X_AT &&
                  4 * 64 * 4 <= WgLayout<32, 4>::USED - WgLayout<32, 4>::X_AT, "cluster combine layout");

#include "sparse_mla_wgmma.cuh"  // the wgmma helpers split_wgmma_ws.cu shares

#ifdef SPARSE_MLA_WGMMA_ENABLED
// One TILE-slot tile into a stage by cp.async. rows[h]: lane l's arena row of slot 32 h + l (-1:
// zero-fill, nothing read). Thread tid copies chunk c = tid % 64 of rows r = tid / 64 + 4 i, so
// r / 32 = i / 8 is the half (64 slots: rows < 32 for i < 8, >= 32 after); r is warp-uniform, so
// every lane of the warp takes part in each shuffle.
// LEAN (sparse_mla_split_wgmma_lean): the same copies with the addresses hoisted. Row r = r0 + 4 i
// (r0 = tid / 64) sits in row group i / 2 at row r0 + 4 (i % 2) of its 8, so chunk c lands at
// (i / 2) 8192 + soff[i % 2], soff[v] = wg_swz(r0 + 4 v, c), and reads gbase + row x 1024: ~5 SASS
// instructions a copy where wg_swz and the pointer arithmetic per copy took ~25 (the resident form
// showed the copy path is ~35 % of split_wgmma's instructions; the kernel is issue-latency bound).
template <int TILE>
__device__ __forceinline__ void wg_issue_lean(unsigned stage, const bf16* __restrict__ arena, const int (&rows)[TILE / 32]) {
    const int c = threadIdx.x & 63, r0 = threadIdx.x >> 6;
    const unsigned soff0 = wg_swz(r0, c), soff1 = wg_swz(r0 + 4, c);
    const unsigned char* gbase = reinterpret_cast<const unsigned char*>(arena) + 16 * c;
#pragma unroll
    for (int i = 0; i < (TILE * SMLA_ROW_CHUNKS) / SPARSE_MLA_SPLIT_WGMMA_THREADS; ++i) {
        const int row = __shfl_sync(FULL_MASK, rows[i >> 3], (r0 + 4 * i) & 31);
        const unsigned char* src = gbase + (size_t)max(row, 0) * (SMLA_DIM * 2);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(stage + (i >> 1) * 8192 + ((i & 1) ? soff1 : soff0)),
                     "l"(src), "r"(row >= 0 ? 16u : 0u)
                     : "memory");
    }
}

template <int TILE>
__device__ __forceinline__ void wg_issue(unsigned char* stage, const bf16* __restrict__ arena, const int (&rows)[TILE / 32]) {
    const int c = threadIdx.x & 63;
#pragma unroll
    for (int i = 0; i < (TILE * SMLA_ROW_CHUNKS) / SPARSE_MLA_SPLIT_WGMMA_THREADS; ++i) {
        const int r = (threadIdx.x >> 6) + 4 * i;
        const int row = __shfl_sync(FULL_MASK, rows[i >> 3], r & 31);
        const bool ok = row >= 0;
        cp_async16_zfill(stage + wg_swz(r, c), ok ? arena + (size_t)row * SMLA_DIM + c * 8 : arena, ok ? 16u : 0u);
    }
}

// The AHEAD step of iteration it (header): issue tile it + L (L = STAGES - 1 tiles ahead) into its
// stage from the page loaded one iteration ago and its token loaded two ago, commit one group (empty
// past the last tile), then move the chain one tile on: tq[k] <- tq[k + 1], the page of the new
// tq[L] loaded, the token of tile it + L + 2 loaded. tq[k][h] = token of slot 32 h + lane of tile
// it + k; pg[h] = page of tq[L][h].
template <int TILE, int STAGES, bool LEAN = false>
__device__ __forceinline__ void wg_ahead(unsigned char* ring, const bf16* __restrict__ arena, const int* __restrict__ sel_m,
                                         const int* __restrict__ pt_m, int start, int end, int ntiles, int it,
                                         int page_size, int lane, int (&tq)[STAGES + 1][TILE / 32],
                                         int (&pg)[TILE / 32]) {
    constexpr int H = TILE / 32, L = STAGES - 1;
    if (it + L < ntiles) {
        int rows[H];
#pragma unroll
        for (int h = 0; h < H; ++h) rows[h] = wg_row(pg[h], tq[L][h], page_size);
        if constexpr (LEAN)
            wg_issue_lean<TILE>(smem_addr(ring) + ((it + L) & (STAGES - 1)) * WgLayout<TILE, STAGES>::STAGE_BYTES, arena, rows);
        else
            wg_issue<TILE>(ring + ((it + L) & (STAGES - 1)) * WgLayout<TILE, STAGES>::STAGE_BYTES, arena, rows);
    }
    cp_async_commit();  // always: one group a tile
#pragma unroll
    for (int h = 0; h < H; ++h) {
#pragma unroll
        for (int k = 0; k <= L; ++k) tq[k][h] = tq[k + 1][h];
        pg[h] = wg_page(pt_m, tq[L][h], page_size);
        tq[L + 1][h] = wg_tok<TILE>(sel_m, start, end, it + L + 2, h, lane);
    }
}

// Thread-block cluster helpers (the same as kernels/dsa_indexer/topk_common.cuh's, copied: NVRTC
// sees only this folder).
__device__ __forceinline__ unsigned wg_cluster_nctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster; release / acquire: shared-memory writes before it are
// visible to every CTA's reads after it (it is a CTA barrier too).
__device__ __forceinline__ void wg_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The float / float4 at the same shared-memory offset as `local` in CTA `rank` of this cluster.
__device__ __forceinline__ float ld_rank_f32(const float* local, unsigned rank) {
    unsigned ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}
__device__ __forceinline__ float4 ld_rank_f4(const float* local, unsigned rank) {
    unsigned ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(ra) : "memory");
    return v;
}

#endif  // SPARSE_MLA_WGMMA_ENABLED

#ifdef SPARSE_MLA_WGMMA_ENABLED
// CTA (s, m) of a (TILE, STAGES) instance (header): TILE = 64, STAGES = 2 is sparse_mla_split_wgmma,
// TILE = 32, STAGES = 4 sparse_mla_split_wgmma_t32. With two stages the next tile is issued right
// after the loop-top barrier (the stage it overwrites was freed by that barrier); with more, tile
// it + STAGES - 1 is issued after tile it's S wgmmas are committed, so the copy issue runs under
// the S wgmmas instead of delaying them (the stage it overwrites, tile it - 1's, was freed by the
// same barrier: every thread passes it only after its wgmma.wait_group 0 of tile it - 1's PV).
// CS = 0: the partial states out (the split-K contract); CS >= 2: the CTA is rank s of a cluster of
// the stream's CS splits (splits = CS) and the cluster combines in shared memory (header).
// The cooperative form's combine (wg_split with CS = WG_COOP; sparse_mla_split_wgmma_coop):
// wg_coop_combine (sparse_mla_wgmma.cuh) over the CTA's 256 threads.
#define WG_COOP (-1)

template <int TILE, int STAGES, int CS, bool RESIDENT = false, bool LEAN = false>
__device__ __forceinline__ void wg_split(unsigned char* smem_raw, const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                         const int* __restrict__ page_table, const int* __restrict__ selection,
                                         float* __restrict__ part_acc, float* __restrict__ part_ml, bf16* __restrict__ out,
                                         float* __restrict__ lse, int M, int W, int pages_per_stream, int page_size,
                                         int splits, float scale, unsigned long long* __restrict__ row_count = nullptr) {
    static_assert(TILE == 32 || TILE == 64, "the S wgmma is m64n32 or m64n64");
    static_assert(STAGES >= 2 && (STAGES & (STAGES - 1)) == 0, "a power-of-two ring");
    constexpr int H = TILE / 32;   // token halves a lane carries (slots 32 h + lane)
    constexpr int L = STAGES - 1;  // tiles in flight while one computes
    constexpr int NSC = TILE / 2;  // S accumulators a thread (m64nTILE f32)
    constexpr int KS = TILE / 16;  // PV k-steps
    constexpr int NX = TILE / 8;   // float4s of S a thread exchanges
    using Lay = WgLayout<TILE, STAGES>;
    constexpr bool issue_after_s = STAGES > 2;

    static_assert(!RESIDENT || (CS == 0 && STAGES == 2), "the resident form: split_wgmma's two-kernel instance");
    static_assert(CS == 0 || CS == 2 || CS == 4 || CS == 8 || CS == WG_COOP,
                  "partials (0), a cluster's CTAs splitting the 512 columns, or the cooperative combine");
    if (dynamic_smem_bytes() < Lay::USED + 1024) __trap();
    if (CS > 0 && (wg_cluster_nctarank() != (unsigned)CS || splits != CS)) __trap();  // launched without its cluster
    // The swizzle atoms need 1024-aligned addresses: place the layout at run time (nothing relies
    // on where the dynamic window starts).
    const unsigned raw_addr = smem_addr(smem_raw);
    const unsigned pad = wg_align_pad(raw_addr);
    unsigned char* smem = smem_raw + pad;
    const unsigned base = raw_addr + pad;
    float4* xbuf = reinterpret_cast<float4*>(smem + Lay::X_AT);

    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, tl = tid & 127;  // warpgroup (dims 256 wg ..), thread in it
    const int w = tl >> 5, g = lane >> 2, t4 = lane & 3;
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + TILE - 1) / TILE;
    const int* sel_m = selection + (size_t)m * (size_t)W;
    const int* pt_m = page_table + (size_t)m * (size_t)pages_per_stream;

    // ---- prologue: q[m] and tile 0 in group 0, tiles 1 .. L - 1 one group each; the chain -----------
    wg_stage_q<SPARSE_MLA_SPLIT_WGMMA_THREADS>(smem + WG_Q_AT, q, m, tid);
    int tq[L + 2][H];  // tq[k][h]: token of slot 32 h + lane of tile it + k (the AHEAD chain, header)
    int pg[H];         // page of tq[L][h]
    // every token load first, then every page load, then the copies: one dependent round trip
    // RESIDENT: the stream's first tile (slots 0 .. TILE - 1) is the only one read, into stage 0
    const int tok_start = RESIDENT ? 0 : start, tok_end = RESIDENT ? min(W, TILE) : end;
#pragma unroll
    for (int k = 0; k < L + 2; ++k)
#pragma unroll
        for (int h = 0; h < H; ++h) tq[k][h] = (RESIDENT && k > 0) ? -1 : wg_tok<TILE>(sel_m, tok_start, tok_end, k, h, lane);
    {
        int pk[L + 1][H];
#pragma unroll
        for (int k = 0; k <= L; ++k)
#pragma unroll
            for (int h = 0; h < H; ++h) pk[k][h] = wg_page(pt_m, tq[k][h], page_size);
#pragma unroll
        for (int k = 0; k < L; ++k) {
            int rows[H];
#pragma unroll
            for (int h = 0; h < H; ++h) rows[h] = wg_row(pk[k][h], tq[k][h], page_size);
            if (k < ntiles && (!RESIDENT || k == 0)) {
                if constexpr (LEAN)
                    wg_issue_lean<TILE>(base + WG_RING_AT + k * Lay::STAGE_BYTES, arena, rows);
                else
                    wg_issue<TILE>(smem + WG_RING_AT + k * Lay::STAGE_BYTES, arena, rows);
            }
            cp_async_commit();  // group k: tile k (and q, k = 0); empty past the last tile
        }
#pragma unroll
        for (int h = 0; h < H; ++h) pg[h] = pk[L][h];
    }

    // Rows of this thread: head 16 w + g (index 0) and 16 w + g + 8 (index 1).
    float m_run[2] = {neg_inf(), neg_inf()};  // running max of the scaled scores
    float l_run[2] = {0.f, 0.f};              // running sum of bf16(exp(score - m_run))
    float o[128];  // O_wg: o[4 n + 2 v1 + v0] = (row 16 w + g + 8 v1, dim 256 wg + 8 n + 2 t4 + v0)
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;

#pragma unroll 1
    for (int it = 0; it < ntiles; ++it) {
        // validity of tile it's slots 32 h + l (lane l), the same bit masks in every warp
        unsigned vm[H];
#pragma unroll
        for (int h = 0; h < H; ++h) vm[h] = __ballot_sync(FULL_MASK, tq[0][h] >= 0);

        // Groups committed so far: L (prologue) + it (one an iteration) = tiles 0 .. it + L - 1;
        // all but the newest L - 1 complete = tile it landed (and, at it = 0, q).
        cp_async_wait<STAGES - 2>();
        fence_proxy_async_shared();  // this thread's copies visible to the async proxy
        __syncthreads();          // every thread's copies; both warpgroups done with tile it - 1 and xbuf
        if constexpr (!issue_after_s && !RESIDENT)
            wg_ahead<TILE, STAGES, LEAN>(smem + WG_RING_AT, arena, sel_m, pt_m, start, end, ntiles, it, page_size, lane, tq, pg);

        const unsigned stage = base + WG_RING_AT + (unsigned)(((RESIDENT ? 0 : it) & (STAGES - 1)) * Lay::STAGE_BYTES);

        // ---- S_wg[64 x TILE] = Q[:, half] . C[:, half]^T: 16 k-steps of 16 dims -------------------
        float sc[NSC];  // sc[4 j + 2 v1 + v0] = (row 16 w + g + 8 v1, slot 8 j + 2 t4 + v0)
#pragma unroll
        for (int i = 0; i < NSC; ++i) sc[i] = 0.f;
        fence_regs(sc);
        wgmma_fence();
        // LEAN: both descriptors built once a tile and each k-step's offset added (the start field is
        // the address >> 4 in the low 14 bits; shared addresses stay below 2^18: no carry out of it)
        const unsigned long long dq0 = wg_desc(base + WG_Q_AT + (unsigned)(wg * 4 * 1024), 16, 8192);
        const unsigned long long dt0 = wg_desc(stage + (unsigned)(wg * 4 * 1024), 16, 8192);
#pragma unroll
        for (int k = 0; k < 16; ++k) {  // dims 256 wg + 16 k ..: segment 4 wg + k / 4, 32 B a step in it
            const unsigned off = (unsigned)(wg * 4 * 1024 + (k >> 2) * 1024 + (k & 3) * 32);
            const unsigned long long da = LEAN ? dq0 + (unsigned)(((k >> 2) * 1024 + (k & 3) * 32) / 16)
                                               : wg_desc(base + WG_Q_AT + off, 16, 8192);
            const unsigned long long db = LEAN ? dt0 + (unsigned)(((k >> 2) * 1024 + (k & 3) * 32) / 16)
                                               : wg_desc(stage + off, 16, 8192);
            if constexpr (TILE == 64)
                wgmma_m64n64k16_ss(sc, da, db, k > 0);
            else
                wgmma_m64n32k16_ss(sc, da, db, k > 0);
        }
        wgmma_commit();
        if constexpr (issue_after_s)  // under the S wgmmas; touches no S register
            wg_ahead<TILE, STAGES, LEAN>(smem + WG_RING_AT, arena, sel_m, pt_m, start, end, ntiles, it, page_size, lane, tq, pg);
        wgmma_wait0();
        fence_regs(sc);

        // ---- S = S_0 + S_1 through shared memory ------------------------------------------------
#pragma unroll
        for (int k = 0; k < NX; ++k)
            xbuf[(wg * NX + k) * 128 + tl] = make_float4(sc[4 * k], sc[4 * k + 1], sc[4 * k + 2], sc[4 * k + 3]);
        __syncthreads();  // both halves written (the next write is after the next loop-top barrier)
#pragma unroll
        for (int k = 0; k < NX; ++k) {
            const float4 v = xbuf[((wg ^ 1) * NX + k) * 128 + tl];
            sc[4 * k] += v.x;
            sc[4 * k + 1] += v.y;
            sc[4 * k + 2] += v.z;
            sc[4 * k + 3] += v.w;
        }

        // ---- online softmax (a head row lives in one quad: lanes 4 g .. 4 g + 3) ------------------
        unsigned pa[KS][4];  // P as the A operand of PV k-step ks (header)
        {
            float mt[2] = {neg_inf(), neg_inf()};
#pragma unroll
            for (int j = 0; j < NSC / 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int bit = 8 * (j & 3) + 2 * t4 + (e & 1);  // slot 8 j + 2 t4 + (e & 1), mod 32
                    const unsigned vb = vm[j >> 2];                  // slots 32 (j / 4) ..
                    const float v = ((vb >> bit) & 1u) ? scale * sc[4 * j + e] : neg_inf();
                    sc[4 * j + e] = v;
                    mt[e >> 1] = fmaxf(mt[e >> 1], v);
                }
            float alpha[2], mn[2];
            bool none[2];
            quad_row_max(mt, m_run, mn, none, alpha);  // sparse_mla_split_mma.cuh
#pragma unroll
            for (int i = 0; i < NSC; ++i) sc[i] = none[(i >> 1) & 1] ? 0.f : __expf(sc[i] - mn[(i >> 1) & 1]);
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
#pragma unroll
                for (int i = 0; i < 4; ++i) pa[ks][i] = pack_bf16x2(sc[8 * ks + 2 * i], sc[8 * ks + 2 * i + 1]);
            // the row sums add the bf16-rounded weights PV multiplies by (as split_mma)
            float ls[2] = {0.f, 0.f};
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
#pragma unroll
                for (int i = 0; i < 4; ++i) ls[i & 1] += bf_lo(pa[ks][i]) + bf_hi(pa[ks][i]);  // a0, a2: row g
            quad_row_sum(ls, alpha, mn, l_run, m_run);
#pragma unroll
            for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
        }

        // ---- O_wg[64 x 256] += P[64 x TILE] . C[:, half]: KS k-steps of 16 slots ------------------
        fence_regs(o);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) fence_regs(pa[ks]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks)
            wgmma_m64n256k16_rs(o, pa[ks], LEAN ? wg_desc(stage + (unsigned)(wg * 4 * 1024), 1024, 8192) + (unsigned)(ks * 2 * 8192 / 16)
                                                : wg_desc(stage + (unsigned)(ks * 2 * 8192 + wg * 4 * 1024), 1024, 8192));
        wgmma_commit();
        wgmma_wait0();
        fence_regs(o);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) fence_regs(pa[ks]);
    }
    cp_async_wait<0>();  // nothing in flight at exit (the last groups are empty; ntiles = 0: q's)
    if constexpr (RESIDENT) {
        // ntiles copies of the same tile: lower the partial's max by log(ntiles x splits), so the
        // combine of the splits' partials is the attention over the tile once (header, resident form)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            if (m_run[r] != neg_inf()) m_run[r] -= __logf((float)ntiles * (float)splits);
    }

    const int h0 = 16 * w + g;  // and h0 + 8
    if constexpr (CS <= 0) {
        // ---- partial state out ---------------------------------------------------------------------
        wg_store_partials(part_acc, part_ml, (size_t)m * (size_t)splits + (size_t)s, h0, wg, t4, m_run, l_run, o, 1.f);
        if constexpr (CS == WG_COOP)
            wg_coop_combine<SPARSE_MLA_SPLIT_WGMMA_THREADS, 0>(part_acc, part_ml, out, lse, row_count, m, s, splits, tid,
                                                               reinterpret_cast<float*>(smem + WG_RING_AT));   // the ring: every copy landed (the wait above)
    } else {
        // ---- the cluster's combine (header), sparse_mla_combine's contract -------------------------
        // Shared memory is free: every copy landed (the wait above) and, past this barrier, every
        // warpgroup is past its last wgmma.wait_group (ring, sQ) and its last xbuf read.
        __syncthreads();
        float* ml = reinterpret_cast<float*>(smem + Lay::X_AT);  // [64][2]: this CTA's (max, sum), published
        float* gl = ml + 2 * SMLA_HEADS;                          // [64][2]: the cluster's (gmax, L), local
        float* so = reinterpret_cast<float*>(smem);               // [64][WG_SO_STRIDE]: this CTA's scaled O
        if (wg == 0 && t4 == 0) {
            ml[2 * h0] = m_run[0];
            ml[2 * h0 + 1] = l_run[0];
            ml[2 * (h0 + 8)] = m_run[1];
            ml[2 * (h0 + 8) + 1] = l_run[1];
        }
        wg_cluster_sync();  // (1) every CTA's ml visible
        if (tid < SMLA_HEADS) {  // head tid: gmax = max_r max_r, L = sum_r sum_r exp(max_r - gmax)
            float gmax = neg_inf(), L = 0.f;
#pragma unroll
            for (int r = 0; r < CS; ++r) gmax = fmaxf(gmax, ld_rank_f32(ml + 2 * tid, (unsigned)r));
#pragma unroll
            for (int r = 0; r < CS; ++r) {
                const float mx = ld_rank_f32(ml + 2 * tid, (unsigned)r);
                if (mx != neg_inf()) L = fmaf(ld_rank_f32(ml + 2 * tid + 1, (unsigned)r), __expf(mx - gmax), L);
            }
            gl[2 * tid] = gmax;
            gl[2 * tid + 1] = L;
        }
        __syncthreads();  // gl complete
        // O scaled by exp(max - gmax) (0 for an empty split: its O is 0 and its max -inf) into so;
        // rows padded to WG_SO_STRIDE floats so a warp's 8 rows g fall in distinct bank groups
        float f[2];
#pragma unroll
        for (int v = 0; v < 2; ++v) f[v] = m_run[v] == neg_inf() ? 0.f : __expf(m_run[v] - gl[2 * (h0 + 8 * v)]);
        float* srow0 = so + h0 * WG_SO_STRIDE + 256 * wg + 2 * t4;
        float* srow1 = srow0 + 8 * WG_SO_STRIDE;
#pragma unroll
        for (int n = 0; n < 32; ++n) {
            *reinterpret_cast<float2*>(srow0 + 8 * n) = make_float2(o[4 * n] * f[0], o[4 * n + 1] * f[0]);
            *reinterpret_cast<float2*>(srow1 + 8 * n) = make_float2(o[4 * n + 2] * f[1], o[4 * n + 3] * f[1]);
        }
        wg_cluster_sync();  // (2) every CTA's scaled O visible
        // CTA s writes columns [s 512 / CS, (s + 1) 512 / CS) of all 64 heads: float4 e = tid + 256 i
        // is head e / (COLS / 4), columns s COLS + 4 (e % (COLS / 4)) ..
        constexpr int COLS = SMLA_DIM / (CS ? CS : 1), Q4 = COLS / 4;
        constexpr int PER = SMLA_HEADS * Q4 / SPARSE_MLA_SPLIT_WGMMA_THREADS;
        static_assert(SMLA_HEADS * Q4 == PER * SPARSE_MLA_SPLIT_WGMMA_THREADS, "whole float4s a thread");
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int e = tid + SPARSE_MLA_SPLIT_WGMMA_THREADS * i;
            const int h = e / Q4, d = s * COLS + 4 * (e % Q4);
            const float gmax = gl[2 * h], L = gl[2 * h + 1];
            bf16* op = out + ((size_t)m * SMLA_HEADS + h) * SMLA_DIM + d;
            if (gmax == neg_inf()) {  // no valid slot in the whole row
                st_v2_b32(op, 0u, 0u);
                continue;
            }
            float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll
            for (int r = 0; r < CS; ++r) {
                const float4 v = ld_rank_f4(so + h * WG_SO_STRIDE + d, (unsigned)r);
                a0 += v.x;
                a1 += v.y;
                a2 += v.z;
                a3 += v.w;
            }
            // L >= 1: the split holding gmax contributes exp(0) = 1 for its maximal slot.
            st_v2_b32(op, pack_bf16x2(a0 / L, a1 / L), pack_bf16x2(a2 / L, a3 / L));
        }
        if (s == 0 && tid < SMLA_HEADS) {
            const float gmax = gl[2 * tid];
            lse[(size_t)m * SMLA_HEADS + tid] = gmax == neg_inf() ? neg_inf() : gmax + __logf(gl[2 * tid + 1]);
        }
        wg_cluster_sync();  // (3) no CTA leaves while another may still read its shared memory
    }
}
#endif  // SPARSE_MLA_WGMMA_ENABLED

// The kernels with the split-K contract's partials out (NAME(q, arena, page_table, selection,
// part_acc, part_ml, M, W, pages_per_stream, page_size, splits, scale); the combine follows) and with
// the cooperative combine (NAME(..., part_acc, part_ml, out, lse, row_count, M, ...)), one line each:
// the instance's wg_split template arguments are all that differ.
#ifdef SPARSE_MLA_WGMMA_ENABLED
#define WG_BODY(ARGS, OUT, LSE, COUNT)                                                                       \
    extern __shared__ __align__(1024) unsigned char smem_raw[];                                              \
    wg_split<ARGS>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, OUT, LSE, M, W,              \
                   pages_per_stream, page_size, splits, scale, COUNT);
#else
#define WG_BODY(ARGS, OUT, LSE, COUNT) __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
#define WG_ARGS(...) __VA_ARGS__
#define WG_PARTIALS_KERNEL(NAME, ARGS)                                                                       \
    extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_THREADS, 1)                          \
    NAME(const bf16* __restrict__ q, const bf16* __restrict__ arena, const int* __restrict__ page_table,     \
         const int* __restrict__ selection, float* __restrict__ part_acc, float* __restrict__ part_ml, int M, \
         int W, int pages_per_stream, int page_size, int splits, float scale) {                              \
        WG_BODY(WG_ARGS(ARGS), nullptr, nullptr, nullptr)                                                    \
    }
#define WG_COOP_KERNEL(NAME, ARGS)                                                                           \
    extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_THREADS, 1)                          \
    NAME(const bf16* __restrict__ q, const bf16* __restrict__ arena, const int* __restrict__ page_table,     \
         const int* __restrict__ selection, float* __restrict__ part_acc, float* __restrict__ part_ml,       \
         bf16* __restrict__ out, float* __restrict__ lse, unsigned long long* __restrict__ row_count, int M, int W,   \
         int pages_per_stream, int page_size, int splits, float scale) {                                     \
        WG_BODY(WG_ARGS(ARGS), out, lse, row_count)                                                          \
    }

WG_PARTIALS_KERNEL(sparse_mla_split_wgmma, WG_ARGS(WG_TILE, 2, 0))

// split_wgmma with the combine in the kernel (wg_coop_combine): launched cooperatively (every CTA
// resident at once), grid (splits, M); part_acc / part_ml as split_wgmma's (read back from L2),
// out [M][64][512] bf16 and lse [M][64] written by the row's CTAs, row_count [M] (64-bit) the launcher's
// (zero at build, never reset).
WG_COOP_KERNEL(sparse_mla_split_wgmma_coop, WG_ARGS(WG_TILE, 2, WG_COOP))

// The resident form (sparse_mla_split_wgmma_resident; component sparse_mla_math): split_wgmma with
// its gather taken out. Every CTA copies the stream's first 64 selected rows once into stage 0 and
// runs its chunk's ntiles iterations over them (the same barriers, S, exchange, softmax and PV; no
// copy, no row chain), then lowers its partial max by log(ntiles x splits): the combine of the
// splits' partials is then the attention over those 64 slots, checked against float64 like the
// layer. Its time is the design's math and synchronisation alone, the ceiling the gather roofline
// is for its memory side.
WG_PARTIALS_KERNEL(sparse_mla_split_wgmma_resident, WG_ARGS(WG_TILE, 2, 0, true))

// split_wgmma with its copy addresses hoisted and its descriptors added to (wg_issue_lean, LEAN above):
// the same schedule and math in fewer instructions (the kernel is bound by its warps' issue latency).
WG_PARTIALS_KERNEL(sparse_mla_split_wgmma_lean, WG_ARGS(WG_TILE, 2, 0, false, true))

// The lean form with the cooperative combine (split_wgmma_coop's launch contract).
WG_COOP_KERNEL(sparse_mla_split_wgmma_lean_coop, WG_ARGS(WG_TILE, 2, WG_COOP, false, true))

// 32-slot tiles in a 4-stage ring (3 tiles = 96 KiB in flight while one computes), S by m64n32k16.
WG_PARTIALS_KERNEL(sparse_mla_split_wgmma_t32, WG_ARGS(32, 4, 0))

// The 32-slot form with the combine in the cluster (no second launch, no partials): grid (CS, M),
// one cluster of CS CTAs a stream (compile-time __cluster_dims__, so a plain launch makes the
// clusters; one kernel per CS as topk_radix.cu's), splits = CS; out [M][64][512] bf16, lse [M][64].
#ifdef SPARSE_MLA_WGMMA_ENABLED
#define WG_CLUSTER_BODY(TILE, STAGES, CS)                                                                      \
    extern __shared__ __align__(1024) unsigned char smem_raw[];                                                \
    wg_split<TILE, STAGES, CS>(smem_raw, q, arena, page_table, selection, nullptr, nullptr, out, lse, M, W,    \
                               pages_per_stream, page_size, splits, scale);
#else
#define WG_CLUSTER_BODY(TILE, STAGES, CS) __trap();
#endif
// FORM: the kernel name's tile tag (_t32, or empty for the 64-slot form)
#define WG_CLUSTER_KERNEL(FORM, TILE, STAGES, CS)                                                              \
    extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_THREADS, 1) \
    sparse_mla_split_wgmma##FORM##_c##CS(const bf16* __restrict__ q, const bf16* __restrict__ arena,            \
                                         const int* __restrict__ page_table, const int* __restrict__ selection, \
                                         bf16* __restrict__ out, float* __restrict__ lse, int M, int W,         \
                                         int pages_per_stream, int page_size, int splits, float scale) {        \
        WG_CLUSTER_BODY(TILE, STAGES, CS)                                                                      \
    }
WG_CLUSTER_KERNEL(_t32, 32, 4, 2)
WG_CLUSTER_KERNEL(_t32, 32, 4, 4)
WG_CLUSTER_KERNEL(_t32, 32, 4, 8)
// The 64-slot, 2-stage form (split_wgmma's) with the same cluster combine: the 32-slot form was
// slower per tile on the H200 (reports/2026-12-01-sparse_mla-h200-174506), while its cluster combine
// saved ~10 us at M = 64 against its own two-kernel form; this pairs the faster tile with it.
WG_CLUSTER_KERNEL(, WG_TILE, 2, 2)
WG_CLUSTER_KERNEL(, WG_TILE, 2, 4)
WG_CLUSTER_KERNEL(, WG_TILE, 2, 8)
