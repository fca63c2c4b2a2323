/*
Sparse MLA decode, design split_wgmma_ws (sm_90a; BF16 latent and FP8 latent): split_wgmma's math
(split_wgmma.cu: the swizzle, the descriptors, the register fragment of P, the S exchange; its
header is the reference for every layout used here) with the tile chain broken by warp
specialisation. The split-K contract is split_wgmma's (and split_mma's): grid (splits, M); CTA
(s, m) takes slots [s W / splits, (s + 1) W / splits) of row m, a ragged last tile masked, and writes
every element of part_ml [(m splits + s) 64 + h][2] = (max of its scaled scores, -inf if none valid;
sum of exp(score - max)) and part_acc [(m splits + s) 64 + h][512] = sum of exp(score - max) c_j;
the shared sparse_mla_combine (exported from this module too) makes out and lse. The op and the
index conventions: sparse_mla_common.cuh (q [M][64][512] bf16, selection [M][W] int32, -1 slots
never read, page_table [M][pages_per_stream], the arena [rows][512] bf16; FP8: codes [rows][512]
e4m3 and row_scale [rows] f32, value = e4m3(code) x scale, kernels/fp8.py).

Kernels: sparse_mla_split_wgmma_ws (BF16) and sparse_mla_split_wgmma_ws_fp8 (FP8), ws_split<FP8>;
sparse_mla_split_wgmma_ws_nol2, the BF16 kernel without the L2 look-ahead (one cost at a time);
sparse_mla_split_wgmma_ws_async_qearly (QEARLY): the async kernel with the cold chain reordered (below);
sparse_mla_split_wgmma_ws_async_bf16p (PB16): the async kernel writing its partial accumulators in BF16
(half the bytes; its combine is sparse_mla_combine_bf16p); sparse_mla_split_wgmma_ws_async_bulkp (BULKP):
the async kernel staging its FP32 partials in the ring and writing them by bulk copies;
sparse_mla_split_wgmma_ws_async_bulkp16 (BULKP and PB16): the same with BF16 partials;
sparse_mla_split_wgmma_ws_async_qearly_bulkp16: bulkp16 with QEARLY's cold chain;
sparse_mla_split_wgmma_ws_async_bulkp_pdl / _bulkp16_pdl / _qearly_bulkp16_pdl: those kernels as the first
of a programmatic pair with their combine (smla_pdl_enter, below);
sparse_mla_split_wgmma_ws_async (ASYNC, BF16, no look-ahead): the producer never waits for its own
copies. The form above has each producer thread wait (cp.async.wait_group 0) until its copies of tile
t landed before it arrives on full[s] and moves on, so a tile costs the producer its issue plus the
copies' whole flight before it can start the next one. ASYNC arrives by
cp.async.mbarrier.arrive.noinc instead: the arrive-on happens by itself when the thread's earlier
cp.async have completed, and the thread goes straight to the next tile's empty wait. Then nothing
runs between a copy landing and the arrive, so the generic -> async proxy fence moves to the
consumers (every consumer thread executes fence.proxy.async.shared::cta after its full wait: the
acquire makes the producers' copies visible to it in the generic proxy, the fence orders them before
its own wgmma operand reads). full[s] counts 129 arrivals there: the 128 producer threads' copy
completions and thread 0's ordinary (release) arrive after it wrote the tile's validity words. The
consumers' descriptors are split_wgmma's LEAN ones (built once a tile, each k-step's offset added).

The cold chain (QEARLY): before tile 0 can land, a producer thread waits for three dependent memory
trips (selection -> page table -> the arena rows' copies), and the async form issues q's 32 copies a
thread between the second and the third: after the rows are known, so their issue sits between the
rows and tile 0's copies. QEARLY issues them right after the token loads instead, under those loads'
flight (the page loads wait for the tokens anyway). Both forms issue q before tile 0, and tile 0's
full barrier waits for both (the noinc arrive counts every earlier cp.async of the thread): only
where q's issue time goes moves. ncu put 31 % of the producer's samples in
this prologue (NOTES.md, 2026-12-07 afternoon).

CTA: 3 warpgroups, 384 threads, __launch_bounds__(384, 1), one CTA an SM.
  WG 0, the producer (setmaxnreg.dec to WS_PRODUCER_REGS = 40; FP8 72): resolves every tile's
    rows (lane l of each producer warp carries slots l and 32 + l: selection -> page table -> arena
    row, the loads of a tile made one iteration before their use), prefetches tiles t + 1 .. t + 3
    into L2 (prefetch.global.L2, 128-B lines: 4 a producer thread a tile, FP8 2; the bulk form
    would be issued lane by lane, NOTES.md) while it fills stage t % 2 with tile t, and writes each tile's validity bits (FP8: and its row scales, loaded a tile ahead).
  WGs 1-2, the consumers (setmaxnreg.inc to WS_CONSUMER_REGS = 232; FP8 216): consumer warpgroup
    cw owns latent dims [256 cw, 256 cw + 256) and does exactly split_wgmma's per-tile math:
    S_cw = Q[:, half] C[:, half]^T (16 x m64n64k16 SS), S = S_0 + S_1 through the exchange buffer with named barrier 1 (the 256
    consumer threads only: bar.sync 1, 256), online softmax in registers, O_cw += P C[:, half]
    (4 x m64n256k16 RS, P from the S accumulators, the tile as the transposed B).
  Registers: 128 x producer + 256 x consumer <= 384 x 168 = 64512, the CTA's launch allocation
  (40 / 232 and 72 / 216 meet it exactly; setmaxnreg.inc waits until the pool has the registers,
  so a larger sum would hang, static_assert below).

The ring (WS_STAGES = 2 stages of 64 slots: sQ 64 KiB + 2 x 64 KiB + the exchange 32 KiB = 224 KiB;
a third 64 KiB stage does not fit, NOTES.md "split_wgmma_ws" says why 32-slot stages paired as one
64-slot tile would not buy one either) with two mbarriers a stage:
  full[s]  (count 128, every producer thread; ASYNC: 129 and the fence at the consumers, header
           above): arrived by producer thread i after its copies of the stage's tile landed
           (cp.async.wait_group 0 / its st.shared) and after its fence.proxy.async.shared::cta (its
           generic-proxy writes made visible to the async proxy, which the wgmma operand reads go
           through); the release of the arrive and the acquire of try_wait make the tile, its mask
           and its scales visible to every consumer thread.
  empty[s] (count 256, every consumer thread): arrived by consumer thread i after its
           wgmma.wait_group 0 of the tile's PV (its warpgroup's last read of the stage).
  Tile t lives in stage t % 2; its k-th use of that stage is k = t / 2. The consumers wait full[s]
  with parity k & 1 (the k-th completion of full[s]); the producer, for t >= 2, waits empty[s] with
  parity (k - 1) & 1 (the consumers' release of tile t - 2). tests/test_sparse_mla_wgmma.py
  ring_model runs this protocol for ntiles 0..9 and 2..4 stages: no stage written before its
  consumers freed it, no tile read before it is full, parities never two phases apart.
Producer, per tile t: the rows of tile t + 3 (from the page and token loaded at t - 1) prefetched,
the page of tile t + 4 and the token of tile t + 5 loaded; wait empty[s] (t >= 2); the validity bits
of tile t (two ballots) stored; the copies; wait; fence; arrive full[s] (ASYNC: the noinc arrive
and thread 0's, no wait). Its copies of tile t fly while the consumers compute tile t - 1 (with 2
stages one 64 KiB tile is in the ring's flight at a time, as split_wgmma's); the L2 prefetches keep
tiles t + 1 .. t + 3 (192 KiB an SM) in flight from DRAM beyond the ring, so a tile's copy reads L2:
that is the point of the design.
Consumers, per tile: wait full[s]; S; bar.sync 2, 256 (both consumer warpgroups done reading the
exchange of tile t - 1: a warpgroup may run ahead to tile t's writes while its partner still reads
tile t - 1's; t >= 1); write S_cw; bar.sync 1, 256; read S_(1 - cw); softmax; PV; arrive empty[s].
No CTA-wide barrier after the prologue (mbarrier init + __syncthreads, before the role split).

BF16 (FP8 = false): the producer copies 16-B chunks by cp.async (zero-fill for an invalid slot)
into the 128-B swizzle (wg_swz): thread p copies chunk p % 64 of rows p / 64 + 2 i (i < 32; a warp
512 contiguous bytes of one row: conflict-free). q (bf16) is copied the same way in tile 0's group.
FP8 (FP8 = true; the arena of split_mma_fp8): the producer reads 16 codes at a time by ld.global.nc
(16 a thread a tile, in two batches of 8, the first issued before the empty wait), widens them
exactly to f16 (cvt.rn.f16x2.e4m3x2: every e4m3 value is an f16), and st.shared's the 32 bytes as
two 16-B chunks (2 cc, 2 cc + 1) of the same swizzled [64][512] 16-bit layout. Lane (rr = lane / 4,
cq = lane % 4) of pass e = warp + 4 i takes row 8 (e / 8) + rr, code chunk 4 (e % 8) + cq: a warp's
16-B stores spread over the 8 bank groups 4 lanes each (conflict-free; a warp along one row would
hit 4 of the 8 twice). The row scales go to sScale[stage][64] (0 for an invalid slot), the codes of
an invalid slot are stored as zeros (its p is 0; 0 x stale data could be NaN). q is read by the
producer in the prologue, bf16 -> f32 (exact) -> f16 by cvt.rn.f16x2.f32: exact for |q| in
[2^-14, 65504] (bf16's 8 mantissa bits fit f16's 11), an absolute error <= 2^-25 below (f16
subnormals), inf above (not produced by any input here). The consumers run the f16 wgmma
(.f32.f16.f16, f32 accumulation) and apply the row scale where split_mma_fp8 does:
    s_j = (softmax_scale x scale_j) x (q16 . code_j)                                   (f32)
    p_j = exp(s_j - max);  PV's A operand a_j = f16(p_j x scale_j / R);  l += p_j    (f32, unrounded)
    O   = R x sum_j a_j code_j  (R applied once, to the partial O at the end)
R, one per consumer thread (the same in both warpgroups), is the largest row scale of the CTA's
first tile (1 if that tile has no valid slot): f16's normal range starts at 2^-14, and p_j x scale_j
with scale ~ 3.3 / 448 would put most weights among the f16 subnormals (relative error up to 2^-3
on the small ones); p_j x scale_j / R keeps the largest weight of a tile ~1, as p_j is in the BF16
form. R is a constant of the CTA, so the online rescaling by alpha is unchanged.

Shared memory (a 1024-aligned base placed at run time; the launcher gives WS_SMEM_BYTES, 1024 of it
slack): sQ [64][512] 16-bit at 0 (bf16 or f16), the ring 2 x [64][512] at 65536, the exchange
[2 wg][8][128] float4 at 196608, sScale [2][64] f32 at 229376 (FP8), sMask [2][2] u32 at 229888
(bit l of word h: slot 32 h + l valid), full[2] and empty[2] (u64) at 229904: 229936 used.

wgmma ordering as split_wgmma: wgmma.fence before each batch, commit, wait_group 0, the operand pins
(fence_regs) around them. Only where the build targets sm_90a (-arch=sm_90a -DSPARSE_MLA_WGMMA_SM90A,
the launcher's options); for plain sm_90 (the compile test) each kernel body is a trap.
*/

#include "sparse_mla_split_mma.cuh"  // common, quad_row_max / quad_row_sum, st_v2_f32, sparse_mla_combine
#include "sparse_mla_wgmma.cuh"      // wg_swz, wg_desc, the wgmma shapes and fences, wg_tok / wg_page / wg_row
#include "sparse_mla_timeline.cuh"   // SMT_*: per-CTA probes, nothing unless -DSPARSE_MLA_TIMELINE

#define SPARSE_MLA_SPLIT_WGMMA_WS_THREADS 384
#define SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES 230960  // 229936 used + 1024 alignment slack
#define WS_STAGES 2
#define WS_TILE 64
#define WS_Q_AT 0
#define WS_RING_AT 65536
#define WS_STAGE_BYTES 65536
#define WS_X_AT 196608     // WS_RING_AT + WS_STAGES * WS_STAGE_BYTES
#define WS_SCALE_AT 229376 // WS_X_AT + 2 * 8 * 128 * 16
#define WS_MASK_AT 229888  // WS_SCALE_AT + WS_STAGES * 64 * 4
#define WS_BAR_AT 229904   // WS_MASK_AT + WS_STAGES * 2 * 4 (8-aligned)
#define WS_USED 229936     // WS_BAR_AT + 2 * WS_STAGES * 8
#define WS_PREFETCH 3      // tiles ahead of the copied one whose rows are prefetched into L2
#define WS_PRODUCER_REGS 40
#define WS_CONSUMER_REGS 232
#define WS_PRODUCER_REGS_FP8 72   // 8 16-B loads in flight a producer thread (56: ~30 spills a tile)
#define WS_CONSUMER_REGS_FP8 216  // 208 would spill 5 registers a tile, 216 spills one
// What ptxas gives a __launch_bounds__(384, 1) kernel (65536 / 384 rounded down to 8; its -v says 168):
// the CTA's register pool, within which setmaxnreg only moves registers. A sum above it would leave
// setmaxnreg.inc waiting forever.
#define WS_LAUNCH_REGS 168
static_assert(WS_X_AT == WS_RING_AT + WS_STAGES * WS_STAGE_BYTES && WS_SCALE_AT == WS_X_AT + 2 * 8 * 128 * 16 &&
                  WS_MASK_AT == WS_SCALE_AT + WS_STAGES * 64 * 4 && WS_BAR_AT == WS_MASK_AT + WS_STAGES * 2 * 4 &&
                  WS_BAR_AT % 8 == 0 && WS_USED == WS_BAR_AT + 2 * WS_STAGES * 8 &&
                  WS_USED + 1024 == SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES && WS_STAGE_BYTES == WS_TILE * SMLA_DIM * 2,
              "smem layout");
static_assert(SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES <= 232448, "227 KiB of dynamic shared memory an SM");
static_assert(128 * WS_PRODUCER_REGS + 256 * WS_CONSUMER_REGS <= 384 * WS_LAUNCH_REGS &&
                  128 * WS_PRODUCER_REGS_FP8 + 256 * WS_CONSUMER_REGS_FP8 <= 384 * WS_LAUNCH_REGS &&
                  384 * WS_LAUNCH_REGS <= 65536 && WS_LAUNCH_REGS % 8 == 0 && 384 * (WS_LAUNCH_REGS + 8) > 65536,
              "setmaxnreg moves registers within the CTA's launch allocation: 128 producer + 256 consumer threads");

// The alternate-tile form (sparse_mla_split_wgmma_ws_alt, the section "The alternate-tile form"
// below): q, the two 64-slot stages, P of each consumer warpgroup's tile (bf16 [64][64], 128-byte
// swizzled K-major: the A operand of the partner's PV), the two warpgroups' row maxima and the row
// sums' exchange, the validity words, full[2][2] and empty[2][2].
#define SPARSE_MLA_SPLIT_WGMMA_WS_ALT_SMEM_BYTES 214864  // 213840 used + 1024 alignment slack
#define ALT_P_AT 196608     // WS_RING_AT + 2 stages; sP[wg] at ALT_P_AT + 8192 wg
#define ALT_M_AT 212992     // ALT_P_AT + 2 * 8192; sM[wg][64] f32
#define ALT_L_AT 213504     // ALT_M_AT + 2 * 64 * 4; sL[64] f32
#define ALT_MASK_AT 213760  // ALT_L_AT + 64 * 4; [2 stages][2] u32
#define ALT_BAR_AT 213776   // ALT_MASK_AT + 16; full[s][h] at + 8 (2 s + h), empty[s][h] at + 32 + 8 (2 s + h)
#define ALT_USED 213840     // ALT_BAR_AT + 8 * 8
static_assert(ALT_P_AT == WS_RING_AT + WS_STAGES * WS_STAGE_BYTES && ALT_M_AT == ALT_P_AT + 2 * 8192 &&
                  ALT_L_AT == ALT_M_AT + 2 * 64 * 4 && ALT_MASK_AT == ALT_L_AT + 64 * 4 &&
                  ALT_BAR_AT == ALT_MASK_AT + 16 && ALT_BAR_AT % 8 == 0 && ALT_USED == ALT_BAR_AT + 64 &&
                  ALT_USED + 1024 == SPARSE_MLA_SPLIT_WGMMA_WS_ALT_SMEM_BYTES && ALT_P_AT % 1024 == 0,
              "alternate-tile smem layout");

#ifdef SPARSE_MLA_WGMMA_ENABLED

// mbar_init / mbar_arrive / mbar_wait: sparse_mla_common.cuh (the TMA gather uses them too).
// named_sync<ID, N>: ../common/wgmma.cuh (here over the 256 threads of the two consumer warpgroups).
template <int R>
__device__ __forceinline__ void regs_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
// cp.async of 16 bytes to a shared-space address (src_bytes 0: zero-fill, nothing read).
__device__ __forceinline__ void cp_async16_sh(unsigned saddr, const void* gmem, unsigned src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void st_shared_v4(unsigned addr, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// Two e4m3 codes (the lower-addressed in the low byte) -> two f16 (the first in the low half), exact.
__device__ __forceinline__ unsigned e4m3x2_to_f16x2(unsigned two) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)(two & 0xFFFFu)));
    return h;
}

// The rows rk (lane l: slots l and 32 + l of one tile) into L2, as 128-byte lines by
// prefetch.global.L2, a per-thread instruction: producer thread p takes slot p / 2 (its row from
// lane (p / 2) % 32 of half p / 64, warp-uniform), lines (p % 2) LINES / 2 .. of it. (The bulk form,
// cp.async.bulk.prefetch.L2, is a uniform-datapath instruction that ptxas issues one distinct address
// at a time: NOTES.md, "The 64-slot chain", measured at 5f502b2.)
template <int BYTES>
__device__ __forceinline__ void ws_prefetch_tile(const unsigned char* abytes, const int (&rk)[2], int p) {
    constexpr int PER = BYTES / 128 / 2;  // lines a thread: 4 (BF16 rows), 2 (FP8 codes)
    const int src = (p >> 6) ? rk[1] : rk[0];
    const int row = __shfl_sync(FULL_MASK, src, (p >> 1) & 31);
    if (row >= 0) {
        const unsigned char* line = abytes + (size_t)row * BYTES + (p & 1) * PER * 128;
#pragma unroll
        for (int i = 0; i < PER; ++i) asm volatile("prefetch.global.L2 [%0];" ::"l"(line + 128 * i));
    }
}

// ---- the producer warpgroup -------------------------------------------------------------------
// q[m] into sQ by producer thread p (tile 0's group / tile 0's full arrive covers it): chunk c = p % 64
// of rows p / 64 + 2 i. FP8: bf16 -> f16 (header), 8 loads in flight.
template <bool FP8>
__device__ __forceinline__ void ws_stage_q(unsigned char* smem, unsigned base, const bf16* __restrict__ q, int m, int p,
                                           int ntiles) {
    if (ntiles > 0) {
        const bf16* qm = q + (size_t)m * SMLA_HEADS * SMLA_DIM;
        const int c = p & 63;
        if constexpr (!FP8) {
#pragma unroll 8
            for (int i = 0; i < 32; ++i) {
                const int r = (p >> 6) + 2 * i;
                cp_async16_zfill(smem + WS_Q_AT + wg_swz(r, c), qm + r * SMLA_DIM + c * 8, 16u);
            }
        } else {
#pragma unroll 1
            for (int b = 0; b < 4; ++b) {
                uint4 v[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) v[i] = ld_nc_v4(qm + ((p >> 6) + 2 * (8 * b + i)) * SMLA_DIM + c * 8);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int r = (p >> 6) + 2 * (8 * b + i);
                    st_shared_v4(base + WS_Q_AT + wg_swz(r, c), pack_f16x2(bf_lo(v[i].x), bf_hi(v[i].x)),
                                 pack_f16x2(bf_lo(v[i].y), bf_hi(v[i].y)), pack_f16x2(bf_lo(v[i].z), bf_hi(v[i].z)),
                                 pack_f16x2(bf_lo(v[i].w), bf_hi(v[i].w)));
                }
            }
        }
    }
    SMT_MARK(p == 0, SMT_Q);
}

// Tile t's slot 32 h + lane: lane's arena row (-1 invalid); the rows of this thread's warp for
// tile t are rw[h] in every lane (each producer warp resolves the same rows: no exchange needed).
template <bool FP8, bool L2, bool ASYNC = false, bool ALT = false, bool QEARLY = false>
__device__ __forceinline__ void ws_producer(unsigned char* smem, unsigned base, const bf16* __restrict__ q,
                                            const void* __restrict__ arena, const float* __restrict__ row_scale,
                                            const int* __restrict__ sel_m, const int* __restrict__ pt_m, int m,
                                            int start, int end, int ntiles, int page_size) {
    constexpr int PF = WS_PREFETCH;
    const int p = threadIdx.x, lane = p & 31, pw = p >> 5;  // producer thread 0..127, its warp 0..3
    static_assert(!ALT || (ASYNC && !FP8 && !L2), "the alternate-tile form's ring: the async BF16 producer without look-ahead");
    // full[s] at bar + 8 s, empty[s] at bar + 16 + 8 s; ALT (the half-tile ring, below): full[s][h] at
    // bar + 8 (2 s + h), empty[s][h] at bar + 32 + 8 (2 s + h), h = the latent half this thread copies
    const unsigned bar = base + (ALT ? ALT_BAR_AT : WS_BAR_AT);
    unsigned* mask = reinterpret_cast<unsigned*>(smem + (ALT ? ALT_MASK_AT : WS_MASK_AT));
    const unsigned half8 = ALT ? 8u * (unsigned)((p >> 5) & 1) : 0u;  // chunk p % 64 < 32: dims 0-255
    float* sscale = reinterpret_cast<float*>(smem + WS_SCALE_AT);
    const unsigned char* abytes = static_cast<const unsigned char*>(arena);
    constexpr int ROW_BYTES = FP8 ? SMLA_CODE_ROW_BYTES : SMLA_DIM * 2;

    // The chain (as split_wgmma's AHEAD, deeper): rw[k] rows of tiles t + k (k < PF); pgA / tkA the
    // page (in flight) and token of tile t + PF; tkB the token of tile t + PF + 1.
    int rw[PF][2], pgA[2], tkA[2], tkB[2];
    int tk[PF + 2][2];
#pragma unroll
    for (int k = 0; k < PF + 2; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h) tk[k][h] = wg_tok<WS_TILE>(sel_m, start, end, k, h, lane);
    // QEARLY: q's copies are issued while the tokens are in flight (the page loads below wait for
    // them); otherwise after the rows, where issuing its 32 copies a thread delays tile 0's issue
    if constexpr (QEARLY) ws_stage_q<FP8>(smem, base, q, m, p, ntiles);
    {
        int pk[PF + 1][2];
#pragma unroll
        for (int k = 0; k <= PF; ++k)
#pragma unroll
            for (int h = 0; h < 2; ++h) pk[k][h] = wg_page(pt_m, tk[k][h], page_size);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int k = 0; k < PF; ++k) rw[k][h] = wg_row(pk[k][h], tk[k][h], page_size);
            pgA[h] = pk[PF][h];
            tkA[h] = tk[PF][h];
            tkB[h] = tk[PF + 1][h];
        }
    }
    // tiles 1 .. PF - 1 into L2 now (tile PF at t = 0 below; tile 0 is copied at once)
    if constexpr (L2) {
#pragma unroll
        for (int k = 1; k < PF; ++k) ws_prefetch_tile<ROW_BYTES>(abytes, rw[k], p);
    }
    // FP8: the row scales are loaded a tile ahead into a register (threads 0..63: slot p = 32 pw +
    // lane, row rw[.][pw]); the address of row 0 where the slot is invalid (the load may be speculated)
    float sv = 0.f;
    if constexpr (FP8) {
        if (p < 64) {
            const int myrow = pw == 0 ? rw[0][0] : rw[0][1];
            const float x = ld_nc_f32(row_scale + (myrow >= 0 ? myrow : 0));
            sv = myrow >= 0 ? x : 0.f;
        }
    }

    if constexpr (!QEARLY) ws_stage_q<FP8>(smem, base, q, m, p, ntiles);
    SMT_ACC(empty_wait);
    unsigned soff[4];  // BF16 copies: wg_swz(p / 64 + 2 k, p % 64)
#pragma unroll
    for (int k = 0; k < 4; ++k) soff[k] = wg_swz((p >> 6) + 2 * k, p & 63);

#pragma unroll 1
    for (int t = 0; t < ntiles; ++t) {
        const int s = t & (WS_STAGES - 1);
        const unsigned stage = base + WS_RING_AT + (unsigned)(s * WS_STAGE_BYTES);
        // 1. tile t + PF's rows, into L2 (rows past the chunk are -1: nothing prefetched)
        int rn[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) rn[h] = wg_row(pgA[h], tkA[h], page_size);
        if constexpr (L2) ws_prefetch_tile<ROW_BYTES>(abytes, rn, p);
        // 2. the chain one tile on: page of tile t + PF + 1 (used next iteration), token of t + PF + 2
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tkA[h] = tkB[h];
            pgA[h] = wg_page(pt_m, tkA[h], page_size);
            tkB[h] = wg_tok<WS_TILE>(sel_m, start, end, t + PF + 2, h, lane);
        }
        const unsigned vm0 = __ballot_sync(FULL_MASK, rw[0][0] >= 0), vm1 = __ballot_sync(FULL_MASK, rw[0][1] >= 0);
        SMT_MARK(p == 0 && t == 0, SMT_ROWS0);

        if constexpr (!FP8) {
            // 3. the stage free (tile t - 2's consumers done), then tile t by cp.async
            if (t >= WS_STAGES) {
                SMT_T0(w0);
                mbar_wait(ALT ? bar + 32 + 16 * s + half8 : bar + 16 + 8 * s, (unsigned)((t / WS_STAGES - 1) & 1));
                SMT_ADD(empty_wait, w0);
            }
            if (p == 0) {
                mask[2 * s] = vm0;
                mask[2 * s + 1] = vm1;
            }
            // Rows r = p / 64 + 2 k + 8 j (k < 4, j < 8) of chunk c = p % 64: the swizzled offsets of
            // k are fixed a thread (a row group 8 rows on is 8192 B on), the global chunk offset too;
            // the shared address is passed as such (no generic -> shared conversion a copy). The j
            // loop stays rolled: unrolled, the compiler hoists the shuffles above the empty wait and
            // spills them at WS_PRODUCER_REGS.
            const unsigned char* a_c = abytes + (p & 63) * 16;
#pragma unroll 1
            for (int j = 0; j < 8; ++j) {
                const int src = j < 4 ? rw[0][0] : rw[0][1];  // r / 32 = j / 4: warp-uniform
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int r = (p >> 6) + 2 * k + 8 * j;  // warp-uniform
                    const int row = __shfl_sync(FULL_MASK, src, r & 31);
                    // an invalid slot copies 0 bytes from row 0's chunk (a valid address): no select
                    cp_async16_sh(stage + soff[k] + 8192u * j, a_c + ((size_t)(unsigned)max(row, 0) << 10),
                                  row >= 0 ? 16u : 0u);
                }
            }
            if constexpr (ASYNC) {
                // full[s] completes once every producer thread's copies so far (tile t; at t = 0 q too)
                // have landed (the noinc arrive is one of its 129 counts) and thread 0's release arrive
                // after the validity words; the consumers fence the proxies (header)
                const unsigned full = ALT ? bar + 16 * s + half8 : bar + 8 * s;
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(full) : "memory");
                if (p == 0) mbar_arrive(full);
            } else {
                cp_async_commit();
                cp_async_wait<0>();  // this thread's copies of tile t (and at t = 0 of q) landed
            }
        } else {
            // 3. codes of tile t: pass e = pw + 4 i takes row 8 (e / 8) + lane / 4, code chunk
            // 4 (e % 8) + lane % 4 (header); batch 0 loaded before the empty wait
            const unsigned char* codes = abytes;
            const int rr = lane >> 2, cq = lane & 3;
#pragma unroll 1
            for (int b = 0; b < 2; ++b) {  // rolled: unrolled, the compiler hoists batch 1 and spills
                uint4 v[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int e = pw + 4 * (8 * b + i), r = 8 * (e >> 3) + rr;
                    const int src = (e >> 5) ? rw[0][1] : rw[0][0];  // r / 32 = e / 32: warp-uniform
                    const int row = __shfl_sync(FULL_MASK, src, r & 31);
                    // the address of row 0 where the slot is invalid (the load may be speculated)
                    const uint4 x = ld_nc_v4(codes + (size_t)(row >= 0 ? row : 0) * SMLA_CODE_ROW_BYTES +
                                             (4 * (e & 7) + cq) * 16);
                    v[i] = row >= 0 ? x : make_uint4(0u, 0u, 0u, 0u);
                }
                if (b == 0) {
                    if (t >= WS_STAGES) {
                        SMT_T0(w0);
                        mbar_wait(bar + 16 + 8 * s, (unsigned)((t / WS_STAGES - 1) & 1));
                        SMT_ADD(empty_wait, w0);
                    }
                    if (p == 0) {
                        mask[2 * s] = vm0;
                        mask[2 * s + 1] = vm1;
                    }
                    if (p < 64) sscale[s * 64 + p] = sv;
                }
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int e = pw + 4 * (8 * b + i), r = 8 * (e >> 3) + rr, cc = 4 * (e & 7) + cq;
                    st_shared_v4(stage + wg_swz(r, 2 * cc), e4m3x2_to_f16x2(v[i].x), e4m3x2_to_f16x2(v[i].x >> 16),
                                 e4m3x2_to_f16x2(v[i].y), e4m3x2_to_f16x2(v[i].y >> 16));
                    st_shared_v4(stage + wg_swz(r, 2 * cc + 1), e4m3x2_to_f16x2(v[i].z),
                                 e4m3x2_to_f16x2(v[i].z >> 16), e4m3x2_to_f16x2(v[i].w),
                                 e4m3x2_to_f16x2(v[i].w >> 16));
                }
            }
        }
        // 4. this thread's writes of the stage (and of q) visible to the async proxy, then full[s]
        if constexpr (!ASYNC) {
            fence_proxy_async_shared();
            mbar_arrive(bar + 8 * s);
        }
        SMT_MARK(p == 0 && t == 0, SMT_ISSUED0);
        // 5. the rows one tile on
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int k = 0; k < PF - 1; ++k) rw[k][h] = rw[k + 1][h];
            rw[PF - 1][h] = rn[h];
        }
        if constexpr (FP8) {  // tile t + 1's scales
            if (p < 64) {
                const int myrow = pw == 0 ? rw[0][0] : rw[0][1];
                const float x = ld_nc_f32(row_scale + (myrow >= 0 ? myrow : 0));
                sv = myrow >= 0 ? x : 0.f;
            }
        }
    }
    SMT_MARK(p == 0, SMT_ISSUED);
    // nothing in flight at exit (ntiles = 0: nothing was issued). ASYNC commits no group (its copies
    // are counted by the noinc arrives), and wait_group waits only for committed groups: wait_all.
    if constexpr (ASYNC)
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    else
        cp_async_wait<0>();
    SMT_MARK(p == 0, SMT_DRAINED);
    SMT_COUNT(p == 0, SMT_C_EMPTY_WAIT, empty_wait);
}

// ---- the consumer warpgroups ------------------------------------------------------------------
template <bool FP8, bool ASYNC = false, bool COOP = false, bool PB16 = false, bool BULKP = false>
__device__ __forceinline__ void ws_consumer(unsigned char* smem, unsigned base, float* __restrict__ part_acc,
                                            float* __restrict__ part_ml, int m, int s_split, int splits, int ntiles,
                                            float scale, bf16* __restrict__ out = nullptr,
                                            float* __restrict__ lse = nullptr, unsigned long long* __restrict__ row_count = nullptr) {
    const int ct = threadIdx.x - 128;        // consumer thread 0..255
    const int cw = ct >> 7, tl = ct & 127;   // consumer warpgroup (dims 256 cw ..), thread in it
    const int lane = tl & 31, w = tl >> 5, g = lane >> 2, t4 = lane & 3;
    const unsigned bar = base + WS_BAR_AT;
    const unsigned* mask = reinterpret_cast<const unsigned*>(smem + WS_MASK_AT);
    const float* sscale = reinterpret_cast<const float*>(smem + WS_SCALE_AT);
    float4* xbuf = reinterpret_cast<float4*>(smem + WS_X_AT);

    float m_run[2] = {neg_inf(), neg_inf()};  // running max of the scaled scores (rows 16 w + g, + 8)
    float l_run[2] = {0.f, 0.f};              // running sum of the weights
    float o[128];  // O_cw: o[4 n + 2 v1 + v0] = (row 16 w + g + 8 v1, dim 256 cw + 8 n + 2 t4 + v0)
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float rref = 1.f, rinv = 1.f;  // FP8: R (header) and 1 / R
    SMT_ACC(full_wait);

#pragma unroll 1
    for (int it = 0; it < ntiles; ++it) {
        const int s = it & (WS_STAGES - 1);
        SMT_T0(w0);
        mbar_wait(bar + 8 * s, (unsigned)((it / WS_STAGES) & 1));
        SMT_ADD(full_wait, w0);
        SMT_MARK(ct == 0 && it == 0, SMT_FULL0);
        if constexpr (ASYNC) fence_proxy_async_shared();  // the producers' copies, seen by this thread's wgmmas
        const unsigned vm[2] = {mask[2 * s], mask[2 * s + 1]};
        const unsigned stage = base + WS_RING_AT + (unsigned)(s * WS_STAGE_BYTES);

        // ---- S_cw[64 x 64] = Q[:, half] . C[:, half]^T: 16 k-steps of 16 dims ----------------------
        float sc[32];  // sc[4 j + 2 v1 + v0] = (row 16 w + g + 8 v1, slot 8 j + 2 t4 + v0)
#pragma unroll
        for (int i = 0; i < 32; ++i) sc[i] = 0.f;
        fence_regs(sc);
        wgmma_fence();
        // ASYNC: split_wgmma's LEAN descriptors (built once a tile, each k-step's start added: the start
        // field is the address >> 4 in the low 14 bits and shared addresses stay below 2^18)
        const unsigned long long dq0 = wg_desc(base + WS_Q_AT + (unsigned)(cw * 4 * 1024), 16, 8192);
        const unsigned long long dt0 = wg_desc(stage + (unsigned)(cw * 4 * 1024), 16, 8192);
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const unsigned off = (unsigned)(cw * 4 * 1024 + (k >> 2) * 1024 + (k & 3) * 32);
            const unsigned step = (unsigned)(((k >> 2) * 1024 + (k & 3) * 32) / 16);
            const unsigned long long da = ASYNC ? dq0 + step : wg_desc(base + WS_Q_AT + off, 16, 8192);
            const unsigned long long db = ASYNC ? dt0 + step : wg_desc(stage + off, 16, 8192);
            if constexpr (FP8)
                wgmma_m64n64k16_ss_f16(sc, da, db, k > 0);
            else
                wgmma_m64n64k16_ss(sc, da, db, k > 0);
        }
        wgmma_commit();
        wgmma_wait0();
        fence_regs(sc);

        // ---- S = S_0 + S_1 through shared memory (named barriers over the 256 consumer threads) ----
        if (it > 0) named_sync<2, 256>();  // both warpgroups done reading tile it - 1's exchange
#pragma unroll
        for (int k = 0; k < 8; ++k)
            xbuf[(cw * 8 + k) * 128 + tl] = make_float4(sc[4 * k], sc[4 * k + 1], sc[4 * k + 2], sc[4 * k + 3]);
        named_sync<1, 256>();  // both halves written
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float4 v = xbuf[((cw ^ 1) * 8 + k) * 128 + tl];
            sc[4 * k] += v.x;
            sc[4 * k + 1] += v.y;
            sc[4 * k + 2] += v.z;
            sc[4 * k + 3] += v.w;
        }

        // ---- online softmax (a head row lives in one quad) -----------------------------------------
        // FP8: the row scale of slot 8 j + 2 t4 + v0 is sscale[s][8 j + 2 t4 + v0] (0: invalid)
        const float* ts = sscale + s * 64 + 2 * t4;
        if constexpr (FP8) {
            if (it == 0) {  // R: the largest scale of the first tile over the quad's 64 slots
                float mx = 0.f;
#pragma unroll
                for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(ts[8 * j], ts[8 * j + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
                rref = mx > 0.f ? mx : 1.f;
                rinv = 1.f / rref;
            }
        }
        unsigned pa[4][4];  // P as the A operand of PV k-step ks (split_wgmma.cu header)
        {
            float mt[2] = {neg_inf(), neg_inf()};
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int bit = 8 * (j & 3) + 2 * t4 + (e & 1);  // slot 8 j + 2 t4 + (e & 1), mod 32
                    const float f = FP8 ? scale * ts[8 * j + (e & 1)] : scale;
                    const float v = ((vm[j >> 2] >> bit) & 1u) ? f * sc[4 * j + e] : neg_inf();
                    sc[4 * j + e] = v;
                    mt[e >> 1] = fmaxf(mt[e >> 1], v);
                }
            float alpha[2], mn[2];
            bool none[2];
            quad_row_max(mt, m_run, mn, none, alpha);  // sparse_mla_split_mma.cuh
#pragma unroll
            for (int i = 0; i < 32; ++i) sc[i] = none[(i >> 1) & 1] ? 0.f : __expf(sc[i] - mn[(i >> 1) & 1]);
            float ls[2] = {0.f, 0.f};
            if constexpr (FP8) {
                // the weights on the codes: p scale_j / R (header); the row sums add p itself
#pragma unroll
                for (int i = 0; i < 32; ++i) ls[(i >> 1) & 1] += sc[i];
#pragma unroll
                for (int ks = 0; ks < 4; ++ks)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int j = 2 * ks + (i >> 1), v1 = i & 1;  // sc[8 ks + 2 i] = sc[4 j + 2 v1]
                        pa[ks][i] = pack_f16x2(sc[4 * j + 2 * v1] * (ts[8 * j] * rinv),
                                               sc[4 * j + 2 * v1 + 1] * (ts[8 * j + 1] * rinv));
                    }
            } else {
#pragma unroll
                for (int ks = 0; ks < 4; ++ks)
#pragma unroll
                    for (int i = 0; i < 4; ++i) pa[ks][i] = pack_bf16x2(sc[8 * ks + 2 * i], sc[8 * ks + 2 * i + 1]);
                // the row sums add the bf16-rounded weights PV multiplies by (as split_wgmma)
#pragma unroll
                for (int ks = 0; ks < 4; ++ks)
#pragma unroll
                    for (int i = 0; i < 4; ++i) ls[i & 1] += bf_lo(pa[ks][i]) + bf_hi(pa[ks][i]);
            }
            quad_row_sum(ls, alpha, mn, l_run, m_run);
#pragma unroll
            for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
        }

        // ---- O_cw[64 x 256] += P[64 x 64] . C[:, half]: 4 k-steps of 16 slots ----------------------
        fence_regs(o);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) fence_regs(pa[ks]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const unsigned long long db = ASYNC ? wg_desc(stage + (unsigned)(cw * 4 * 1024), 1024, 8192) + (unsigned)(ks * 2 * 8192 / 16)
                                                : wg_desc(stage + (unsigned)(ks * 2 * 8192 + cw * 4 * 1024), 1024, 8192);
            if constexpr (FP8)
                wgmma_m64n256k16_rs_f16(o, pa[ks], db);
            else
                wgmma_m64n256k16_rs(o, pa[ks], db);
        }
        wgmma_commit();
        wgmma_wait0();
        fence_regs(o);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) fence_regs(pa[ks]);
        mbar_arrive(bar + 16 + 8 * s);  // this thread is done with the stage (its scales and mask too)
        SMT_MARK(ct == 0 && it == 0, SMT_DONE0);
    }
    SMT_MARK(ct == 0, SMT_LOOP);
    SMT_COUNT(ct == 0, SMT_C_FULL_WAIT, full_wait);

    // ---- partial state out (FP8: R x O; BF16: rref = 1) ------------------------------------------
    // PB16: part_acc holds BF16 (sparse_mla_combine_bf16p reads it); the BF16 latent only (rref = 1).
    // BULKP: staged in the ring and the exchange buffer (free once both warpgroups are past their last
    // PV: named barrier 4; every copy into the ring landed before its tile's full wait returned), then
    // one bulk copy a row by consumer threads 0..63 (wg_stage_partials, BF16 with PB16)
    if constexpr (BULKP) {
        static_assert(WS_RING_AT + 64 * PART_PITCH <= WS_SCALE_AT, "the staged partial fits the ring and the exchange");
        const unsigned stage_at = base + WS_RING_AT;
        const size_t ms = (size_t)m * (size_t)splits + (size_t)s_split;
        named_sync<4, 256>();  // the other warpgroup's last PV has read the ring and its S the exchange
        if (cw == 0 && t4 == 0) st_part_ml(part_ml, ms, 16 * w + g, m_run, l_run);
        wg_stage_partials<PB16>(stage_at, 16 * w + g, cw, t4, o);   // PB16: BF16 rows, 1 KiB copies
        fence_proxy_async_shared();  // this thread's staged values, visible to the bulk copies
        named_sync<4, 256>();
        if (ct < SMLA_HEADS) wg_bulk_store_row<PB16>(part_acc, ms, stage_at, ct);
    } else if constexpr (PB16)
        wg_store_partials_bf16(reinterpret_cast<bf16*>(part_acc), part_ml, (size_t)m * (size_t)splits + (size_t)s_split,
                               16 * w + g, cw, t4, m_run, l_run, o);
    else
        wg_store_partials(part_acc, part_ml, (size_t)m * (size_t)splits + (size_t)s_split, 16 * w + g, cw, t4, m_run,
                          l_run, o, rref);
    // COOP: the 256 consumer threads merge a 1 / splits share of the row (named barrier 3; the ring is
    // free: every tile was waited full, so every copy landed, and every wgmma has retired)
    if constexpr (COOP)
        wg_coop_combine<256, 3>(part_acc, part_ml, out, lse, row_count, m, s_split, splits, ct,
                                reinterpret_cast<float*>(smem + WS_RING_AT));
}

// ---- the alternate-tile form (sparse_mla_split_wgmma_ws_alt) ------------------------------------
// Why: split_wgmma_ws_async's consumers split every tile by latent dims and walk it in lockstep
// (S halves, the S exchange, softmax, PV), so the tensor cores idle during both warpgroups' softmax
// and a stage is freed only when both PVs retire; the copy of tile t + 2 then has one tile's math
// to land in (NOTES.md, "the half-tile ring read against our work split"). Here (FlashMLA's sm90
// sparse split, read for technique, kernels/sparse_mla/NOTES.md 2026-12-06):
//   * consumer warpgroup cw computes S (all 512 dims) and the softmax of every other 64-slot tile:
//     pair i's tile a = 2 i (stage 0) is warpgroup 0's, tile b = 2 i + 1 (stage 1) warpgroup 1's;
//   * O is split along the latent: warpgroup cw owns dims [256 cw, 256 cw + 256) and multiplies both
//     tiles' P into it, its own P from registers (RS), the partner's from shared memory (SS);
//   * only the row maxima cross before the PVs: warpgroup 0 publishes new0 = max(m, max_a), warpgroup 1
//     takes new1 = max(new0, max_b) (the pair's max) and publishes it; warpgroup 0 then scales its P
//     by exp(new0 - new1) for the partner and its O and l before the second PV. The row sums stay per
//     warpgroup (each scaled by the same factors) and are added once at the end;
//   * the ring is the half-tile ring: each stage's two latent halves have their own full and empty
//     mbarriers (producer warps 0 and 2 copy dims 0-255, warps 1 and 3 dims 256-511: the chunk map
//     p % 64 of ws_producer), freed by the warpgroup whose PV reads them last, in the order
//     a-left (warpgroup 0's own PV), b-right (warpgroup 1's own PV), a-right and b-left (the partner
//     PVs), so a half's refill starts while the other half is still read.
// Schedule of pair i (A-D: named barriers 1-4 over the 256 consumer threads, arrive on one side,
// sync on the other; E = 5 once at the end):
//   wg 0: [S_a issued at the end of pair i - 1] softmax_a; sM0; arrive A | PV(a, left, RS); wait;
//         free a-left | sync B; sf = exp(new0 - new1); sP0 = bf16(P_a sf); arrive C | sync D; O, l *= sf;
//         PV(b, left, SS sP1) | S_(a + 2) left half; wait_group 1: free b-left; right half; wait.
//   wg 1: S_b (right half first: b-right lands first) | sync A; softmax_b against new0; sM1; arrive B |
//         PV(b, right, RS); sP1 = P_b; arrive D | sync C; PV(a, right, SS sP0) | wait_group 1: free
//         b-right; wait: free a-right.
// Each barrier's next arrive follows the previous phase's sync (A: wg 0 arrives A(i + 1) after
// sync B(i), which wg 1 arrives after sync A(i); B, C, D alike), and each exchange buffer's rewrite
// follows the partner's last read by such a chain (tests/test_sparse_mla_wgmma.py, alt_model).
// A pair without tile b (ntiles odd): warpgroup 1 skips S_b and its own PV, its max is new0, and
// warpgroup 0 skips the PV on b; the barriers run as in any pair.

// Each warpgroup reads one fixed stage, so every descriptor and P address below is loop-invariant:
// ptxas hoisted all of them (32 + 32 S descriptors, 16 P addresses) out of the pair loop and
// spilled ~1.1 KB. `opaque` hides the base from it where it is used, so each is rebuilt there (one
// add a wgmma, as split_wgmma_lean's descriptors).
template <typename T>
__device__ __forceinline__ T opaque(T v) {
    if constexpr (sizeof(T) == 8)
        asm volatile("" : "+l"(v));
    else
        asm volatile("" : "+r"(v));
    return v;
}

// S of the tile at `stage` over latent half h's 16 k-steps (k-step kk = 16 h + k: dims 16 kk ..).
template <int H>
__device__ __forceinline__ void alt_s_half(float (&sc)[32], unsigned long long dq0, unsigned long long dt0, bool first) {
    dq0 = opaque(dq0);
    dt0 = opaque(dt0);
    fence_regs(sc);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int kk = 16 * H + k;
        const unsigned step = (unsigned)(((kk >> 2) * 1024 + (kk & 3) * 32) / 16);
        wgmma_m64n64k16_ss(sc, dq0 + step, dt0 + step, (first && k == 0) ? 0 : 1);
    }
    wgmma_commit();
}

// The softmax of this warpgroup's own tile: scores scaled and masked, the new running max taken over
// m_run, `other` (the partner's published max; -inf for warpgroup 0) and the tile's; O and l
// scaled to it; P = exp(s - max) kept in sc (f32) and packed as the RS A fragments pa; l adds the
// bf16-rounded weights (this thread's slots only: the quad's four are added at the end).
__device__ __forceinline__ void alt_softmax(float (&sc)[32], const unsigned (&vm)[2], float scale, int t4,
                                            const float (&other)[2], float (&m_run)[2], float (&l_run)[2],
                                            float (&o)[128], unsigned (&pa)[4][4]) {
    float mt[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int bit = 8 * (j & 3) + 2 * t4 + (e & 1);  // slot 8 j + 2 t4 + (e & 1), mod 32
            const float v = ((vm[j >> 2] >> bit) & 1u) ? scale * sc[4 * j + e] : neg_inf();
            sc[4 * j + e] = v;
            mt[e >> 1] = fmaxf(mt[e >> 1], v);
        }
    float mn[2], alpha[2];
    bool none[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(FULL_MASK, mt[r], 1));
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(FULL_MASK, mt[r], 2));
        mn[r] = fmaxf(fmaxf(m_run[r], other[r]), mt[r]);
        none[r] = mn[r] == neg_inf();
        alpha[r] = none[r] ? 1.f : __expf(m_run[r] - mn[r]);  // m_run = -inf -> 0 (o and l are 0)
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) sc[i] = none[(i >> 1) & 1] ? 0.f : __expf(sc[i] - mn[(i >> 1) & 1]);
    float ls[2] = {0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            pa[ks][i] = pack_bf16x2(sc[8 * ks + 2 * i], sc[8 * ks + 2 * i + 1]);
            ls[i & 1] += bf_lo(pa[ks][i]) + bf_hi(pa[ks][i]);
        }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l_run[r] = l_run[r] * alpha[r] + ls[r];
        m_run[r] = mn[r];
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// P (pa's words: pa[ks][i] = (row 16 w + g + 8 (i & 1), slots 8 (2 ks + i / 2) + 2 t4, + 1)) into
// sP [64][64] bf16, 128-byte swizzled K-major: row r at (r / 8) 1024 + (r % 8) 128, 16-byte chunk j
// at (j ^ r % 8) 16 (a warp's 32 stores of one (ks, i) hit 32 distinct banks).
__device__ __forceinline__ void alt_store_p(unsigned sp, int w, int g, int t4, const unsigned (&pa)[4][4]) {
    sp = opaque(sp);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = 2 * ks + (i >> 1);
            const unsigned a = sp + (unsigned)((2 * w + (i & 1)) * 1024 + g * 128 + ((j ^ g) << 4) + 4 * t4);
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(pa[ks][i]) : "memory");
        }
}

// O_cw += P . C[:, half cw] over the tile at `stage`: P from registers (pa) or from sP (sp).
__device__ __forceinline__ void alt_pv_rs(float (&o)[128], unsigned (&pa)[4][4], unsigned stage, int cw) {
    fence_regs(o);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) fence_regs(pa[ks]);
    wgmma_fence();
    const unsigned long long db = opaque(wg_desc(stage + (unsigned)(cw * 4 * 1024), 1024, 8192));
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n256k16_rs(o, pa[ks], db + (unsigned)(ks * 1024));
    wgmma_commit();
}
__device__ __forceinline__ void alt_pv_ss(float (&o)[128], unsigned sp, unsigned stage, int cw) {
    fence_regs(o);
    wgmma_fence();
    const unsigned long long da = opaque(wg_desc(sp, 16, 1024));
    const unsigned long long db = opaque(wg_desc(stage + (unsigned)(cw * 4 * 1024), 1024, 8192));
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n256k16_ss(o, da + (unsigned)(2 * ks), db + (unsigned)(ks * 1024));
    wgmma_commit();
}

// Consumer warpgroup cw of the alternate-tile form (the schedule above). CTA-uniform branches only.
__device__ __forceinline__ void alt_consumer(unsigned char* smem, unsigned base, float* __restrict__ part_acc,
                                             float* __restrict__ part_ml, int m, int s_split, int splits, int ntiles,
                                             float scale) {
    const int ct = threadIdx.x - 128;
    const int cw = ct >> 7, tl = ct & 127;
    const int lane = tl & 31, w = tl >> 5, g = lane >> 2, t4 = lane & 3;
    const int row0 = 16 * w + g;  // and row0 + 8
    const unsigned bar = base + ALT_BAR_AT;  // full[s][h] at bar + 16 s + 8 h, empty[s][h] at bar + 32 + ...
    const unsigned* mask = reinterpret_cast<const unsigned*>(smem + ALT_MASK_AT);
    float* sm = reinterpret_cast<float*>(smem + ALT_M_AT);  // sM[wg][64]
    float* sl = reinterpret_cast<float*>(smem + ALT_L_AT);
    const unsigned stage0 = base + WS_RING_AT, stage1 = stage0 + WS_STAGE_BYTES;
    const unsigned sp0 = base + ALT_P_AT, sp1 = sp0 + 8192;
    const unsigned long long dq0 = wg_desc(base + WS_Q_AT, 16, 8192);
    const int npairs = (ntiles + 1) / 2;

    float m_run[2] = {neg_inf(), neg_inf()};
    float l_run[2] = {0.f, 0.f};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float sc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) sc[i] = 0.f;
    unsigned pa[4][4];
    if (cw == 0) {
        const unsigned long long dt0 = wg_desc(stage0, 16, 8192);
        if (ntiles > 0) {  // S of tile 0
            mbar_wait(bar, 0u);
            fence_proxy_async_shared();
            alt_s_half<0>(sc, dq0, dt0, true);
            mbar_wait(bar + 8, 0u);
            fence_proxy_async_shared();
            alt_s_half<1>(sc, dq0, dt0, false);
            wgmma_wait0();
            fence_regs(sc);
        }
#pragma unroll 1
        for (int i = 0; i < npairs; ++i) {
            const bool has_b = 2 * i + 1 < ntiles;
            const unsigned vm[2] = {mask[0], mask[1]};
            const float none2[2] = {neg_inf(), neg_inf()};
            alt_softmax(sc, vm, scale, t4, none2, m_run, l_run, o, pa);
            if (t4 == 0) {
                sm[row0] = m_run[0];
                sm[row0 + 8] = m_run[1];
            }
            named_arrive<1, 256>();  // A: new0 published
            alt_pv_rs(o, pa, stage0, 0);
            wgmma_wait0();
            fence_regs(o);
            mbar_arrive(bar + 32);  // a-left free
            named_sync<2, 256>();   // B: new1 published
            float sf[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float n1 = sm[64 + row0 + 8 * r];
                sf[r] = n1 == m_run[r] ? 1.f : __expf(m_run[r] - n1);  // new0 <= new1; -inf == -inf -> 1
                m_run[r] = n1;
            }
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pa[ks][e] = pack_bf16x2(bf_lo(pa[ks][e]) * sf[e & 1], bf_hi(pa[ks][e]) * sf[e & 1]);
            alt_store_p(sp0, w, g, t4, pa);
            fence_proxy_async_shared();  // sP0 seen by the partner's wgmma operand reads
            named_arrive<3, 256>();      // C: sP0 written
            named_sync<4, 256>();        // D: sP1 written (or tile b absent)
#pragma unroll
            for (int r = 0; r < 2; ++r) l_run[r] *= sf[r];
#pragma unroll
            for (int k = 0; k < 128; ++k) o[k] *= sf[(k >> 1) & 1];
            if (has_b) alt_pv_ss(o, sp1, stage1, 0);
            if (2 * i + 2 < ntiles) {  // S of tile a + 2 under the PV on b
                const unsigned par = (unsigned)((i + 1) & 1);
                mbar_wait(bar, par);
                fence_proxy_async_shared();
                alt_s_half<0>(sc, dq0, dt0, true);
                wgmma_wait<1>();
                if (has_b) mbar_arrive(bar + 32 + 16);  // b-left free
                mbar_wait(bar + 8, par);
                fence_proxy_async_shared();
                alt_s_half<1>(sc, dq0, dt0, false);
                wgmma_wait0();
                fence_regs(sc);
                fence_regs(o);
            } else {
                wgmma_wait0();
                fence_regs(o);
                if (has_b) mbar_arrive(bar + 32 + 16);  // b-left free
            }
        }
        // the row sums: the quad's four slots, then warpgroup 1's (E)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 1);
            l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 2);
        }
        named_sync<5, 256>();
        l_run[0] += sl[row0];
        l_run[1] += sl[row0 + 8];
    } else {
        const unsigned long long dt1 = wg_desc(stage1, 16, 8192);
#pragma unroll 1
        for (int i = 0; i < npairs; ++i) {
            const bool has_b = 2 * i + 1 < ntiles;
            unsigned vm[2] = {0u, 0u};
            if (has_b) {  // S of tile b, right half first (freed and refilled first)
                const unsigned par = (unsigned)(i & 1);
                mbar_wait(bar + 16 + 8, par);
                fence_proxy_async_shared();
                alt_s_half<1>(sc, dq0, dt1, true);
                mbar_wait(bar + 16, par);
                fence_proxy_async_shared();
                alt_s_half<0>(sc, dq0, dt1, false);
                wgmma_wait0();
                fence_regs(sc);
                vm[0] = mask[2];
                vm[1] = mask[3];
            }
            named_sync<1, 256>();  // A: new0
            const float n0[2] = {sm[row0], sm[row0 + 8]};
            alt_softmax(sc, vm, scale, t4, n0, m_run, l_run, o, pa);  // no valid slot without b: max new0
            if (t4 == 0) {
                sm[64 + row0] = m_run[0];
                sm[64 + row0 + 8] = m_run[1];
            }
            named_arrive<2, 256>();  // B: new1 published
            if (has_b) {  // P_b into sP1 before the RS wgmma that reads pa is issued (no access to
                          // a wgmma's A registers before its wait, PTX ISA), then PV(b, right)
                alt_store_p(sp1, w, g, t4, pa);
                fence_proxy_async_shared();
                alt_pv_rs(o, pa, stage1, 1);
            }
            named_arrive<4, 256>();  // D: sP1 written
            named_sync<3, 256>();    // C: sP0 written
            alt_pv_ss(o, sp0, stage0, 1);
            if (has_b) {
                wgmma_wait<1>();
                mbar_arrive(bar + 32 + 16 + 8);  // b-right free
            }
            wgmma_wait0();
            fence_regs(o);
            mbar_arrive(bar + 32 + 8);  // a-right free
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 1);
            l_run[r] += __shfl_xor_sync(FULL_MASK, l_run[r], 2);
        }
        if (t4 == 0) {
            sl[row0] = l_run[0];
            sl[row0 + 8] = l_run[1];
        }
        named_arrive<5, 256>();
    }
    // both warpgroups end on the same max (warpgroup 1's last, which warpgroup 0 took); part_ml is
    // warpgroup 0's (the total sum); each warpgroup writes its 256 columns of O
    wg_store_partials(part_acc, part_ml, (size_t)m * (size_t)splits + (size_t)s_split, row0, cw, t4, m_run, l_run, o,
                      1.f);
}

// CTA (s, m) (header). arena: bf16 rows (FP8 = false) or e4m3 codes with row_scale (FP8 = true);
// L2 = false: the same kernel without the L2 look-ahead (sparse_mla_split_wgmma_ws_nol2); ASYNC: the
// producer's arrives by cp.async.mbarrier.arrive.noinc (sparse_mla_split_wgmma_ws_async, header);
// ALT: the alternate-tile form (the section above: its consumers, the half-tile ring's barriers).
template <bool FP8, bool L2 = true, bool ASYNC = false, bool COOP = false, bool ALT = false, bool QEARLY = false,
          bool PB16 = false, bool BULKP = false>
__device__ __forceinline__ void ws_split(unsigned char* smem_raw, const bf16* __restrict__ q, const void* __restrict__ arena,
                                         const float* __restrict__ row_scale, const int* __restrict__ page_table,
                                         const int* __restrict__ selection, float* __restrict__ part_acc,
                                         float* __restrict__ part_ml, int M, int W, int pages_per_stream, int page_size,
                                         int splits, float scale, bf16* __restrict__ out = nullptr,
                                         float* __restrict__ lse = nullptr, unsigned long long* __restrict__ row_count = nullptr) {
    static_assert(!(FP8 && ASYNC), "the FP8 producer stores its widened codes itself: nothing for a copy to arrive on");
    static_assert(!ALT || (ASYNC && !COOP), "the alternate-tile form: the async producer, the two-kernel contract");
    static_assert(!PB16 || (!FP8 && !COOP && !ALT), "BF16 partials: the BF16 latent's two-kernel form");
    static_assert(!BULKP || (!FP8 && !COOP && !ALT), "bulk-stored partials: the BF16 latent's two-kernel form");
    if (dynamic_smem_bytes() < (ALT ? ALT_USED : WS_USED) + 1024) __trap();
    const unsigned raw_addr = smem_addr(smem_raw);
    const unsigned pad = wg_align_pad(raw_addr);
    unsigned char* smem = smem_raw + pad;
    const unsigned base = raw_addr + pad;

    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + WS_TILE - 1) / WS_TILE;
    SMT_ENTER(threadIdx.x == 0);
    SMT_COUNT(threadIdx.x == 0, SMT_C_TILES, ntiles);

    if (threadIdx.x == 0) {
        if constexpr (ALT) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {  // k = 2 stage + half
                // full: the 64 copying threads' noinc arrives (+ thread 0's release arrive on half 0)
                mbar_init(base + ALT_BAR_AT + 8 * k, (k & 1) ? 64 : 65);
                mbar_init(base + ALT_BAR_AT + 32 + 8 * k, 128);  // empty: the warpgroup whose PV reads the half last
            }
        } else {
#pragma unroll
            for (int st = 0; st < WS_STAGES; ++st) {
                mbar_init(base + WS_BAR_AT + 8 * st, ASYNC ? 129 : 128);  // full: every producer thread (ASYNC: + thread 0's)
                mbar_init(base + WS_BAR_AT + 16 + 8 * st, 256);  // empty: every consumer thread
            }
        }
    }
    __syncthreads();  // the barriers initialised before anyone arrives or waits (the only CTA barrier)
    SMT_MARK(threadIdx.x == 0, SMT_INIT);

    if (threadIdx.x < 128) {
        regs_dec<FP8 ? WS_PRODUCER_REGS_FP8 : WS_PRODUCER_REGS>();
        ws_producer<FP8, L2, ASYNC, ALT, QEARLY>(smem, base, q, arena, row_scale, selection + (size_t)m * (size_t)W,
                         page_table + (size_t)m * (size_t)pages_per_stream, m, start, end, ntiles, page_size);
    } else {
        regs_inc<FP8 ? WS_CONSUMER_REGS_FP8 : WS_CONSUMER_REGS>();
        if constexpr (ALT)
            alt_consumer(smem, base, part_acc, part_ml, m, s, splits, ntiles, scale);
        else
            ws_consumer<FP8, ASYNC, COOP, PB16, BULKP>(smem, base, part_acc, part_ml, m, s, splits, ntiles, scale, out, lse, row_count);
        SMT_MARK(threadIdx.x == 128, SMT_EXIT);
    }
}
#endif  // SPARSE_MLA_WGMMA_ENABLED

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws(const bf16* __restrict__ q, const bf16* __restrict__ arena, const int* __restrict__ page_table,
                          const int* __restrict__ selection, float* __restrict__ part_acc, float* __restrict__ part_ml,
                          int M, int W, int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false>(smem_raw, q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                    page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_fp8(const bf16* __restrict__ q, const unsigned char* __restrict__ codes,
                              const float* __restrict__ row_scale, const int* __restrict__ page_table,
                              const int* __restrict__ selection, float* __restrict__ part_acc,
                              float* __restrict__ part_ml, int M, int W, int pages_per_stream, int page_size,
                              int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<true>(smem_raw, q, codes, row_scale, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                   page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// split_wgmma_ws without the L2 look-ahead (the same rows resolved, no prefetch): what the
// look-ahead buys once the consumers carry no copy work (NOTES.md, split_wgmma_ws).
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_nol2(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                               const int* __restrict__ page_table, const int* __restrict__ selection,
                               float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                               int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false>(smem_raw, q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W,
                           pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// split_wgmma_ws_nol2 with the producer's arrives made by its copies' completion (header, ASYNC).
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                const int* __restrict__ page_table, const int* __restrict__ selection,
                                float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false, true>(smem_raw, q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W,
                                 pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// split_wgmma_ws_async with q's copies issued while the first tiles' tokens are in flight, before the
// page loads that wait for them (header: the cold chain), instead of after the rows are known, where
// issuing its 32 copies a producer thread stands between the rows and tile 0's copies.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_qearly(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                       const int* __restrict__ page_table, const int* __restrict__ selection,
                                       float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                       int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false, true, false, false, true>(smem_raw, q, arena, nullptr, page_table, selection, part_acc,
                                                     part_ml, M, W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// split_wgmma_ws_async with its partial accumulators stored in BF16 (wg_store_partials_bf16): half
// the 16 MiB a one-wave launch at M = 32 writes at once and its combine (sparse_mla_combine_bf16p)
// reads back; m and l stay FP32. part_acc [M][splits][64][512] bf16.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_bf16p(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                      const int* __restrict__ page_table, const int* __restrict__ selection,
                                      bf16* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                      int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false, true, false, false, false, true>(smem_raw, q, arena, nullptr, page_table, selection,
                                                            reinterpret_cast<float*>(part_acc), part_ml, M, W,
                                                            pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

#ifdef SPARSE_MLA_WGMMA_ENABLED
// The bulk-store forms' kernel body (the async producer, partials staged and bulk-copied): FP32 partials,
// or BF16 (PB16) ones in part_acc's bf16 bits; QEARLY: q's copies under the first tokens' flight.
// Shared by the plain and the programmatic kernels below.
template <bool PB16, bool QEARLY = false, typename P>
__device__ __forceinline__ void ws_bulkp(unsigned char* smem_raw, const bf16* __restrict__ q,
                                         const bf16* __restrict__ arena, const int* __restrict__ page_table,
                                         const int* __restrict__ selection, P* __restrict__ part_acc,
                                         float* __restrict__ part_ml, int M, int W, int pages_per_stream, int page_size,
                                         int splits, float scale) {
    ws_split<false, false, true, false, false, QEARLY, PB16, true>(smem_raw, q, arena, nullptr, page_table, selection,
                                                                    reinterpret_cast<float*>(part_acc), part_ml, M, W,
                                                                    pages_per_stream, page_size, splits, scale);
}
#endif

// split_wgmma_ws_async with its FP32 partials staged in shared memory and written by one bulk copy a
// row (wg_stage_partials / wg_bulk_store_row): the same bytes as the direct stores, in 64 linear 2 KiB
// requests instead of 64 scattered 8-byte stores a consumer thread.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_bulkp(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                      const int* __restrict__ page_table, const int* __restrict__ selection,
                                      float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                      int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_bulkp<false>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// The bulk-store epilogue with BF16 partials (wg_stage_partials<true> / wg_bulk_store_row<true>): the
// bf16p form's bytes in the bulkp form's 64 linear requests a CTA, 1 KiB each; part_acc
// [M][splits][64][512] bf16, read by sparse_mla_combine_bf16p.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_bulkp16(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                        const int* __restrict__ page_table, const int* __restrict__ selection,
                                        bf16* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                        int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_bulkp<true>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// bulkp16 with q's copies issued early (QEARLY, as sparse_mla_split_wgmma_ws_async_qearly): the two
// fixed costs the H200 timeline measured apart, the cold chain and the epilogue, cut in one kernel.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_qearly_bulkp16(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                               const int* __restrict__ page_table, const int* __restrict__ selection,
                                               bf16* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                               int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_bulkp<true, true>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size,
                         splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// bulkp / bulkp16 as the first kernel of a programmatic pair (PDL): the combine is launched with the
// programmatic-serialisation attribute and may start once every CTA here has triggered; its blocks
// wait (griddepcontrol.wait) for this grid's completion and memory, so what the pair saves is the
// gap between the two launches, not any overlap of their work. Why trigger at entry: a one-wave split
// grid is all resident by then (a CTA triggers at its start), the combine's early blocks can only take
// the SMs no split CTA holds (a split CTA keeps 384 threads x 168 registers of the SM's 65536), and
// they sit there waiting, ready. The wait at entry is the harness's contract for a step launched as a
// programmatic dependent of the step before (KernelStep, dependent): where the two steps share buffers,
// the previous combine still reads part_acc, which this grid rewrites (the sweep's chains give each step
// its own buffers, so there it guards nothing). Launched plainly both instructions are no-ops, so the
// kernel is its plain twin to the byte after them. Measured (H100, 797aadc; NOTES.md, 2026-12-07 late):
// 2.2-2.6 us off the step at M = 32, but 0.8-1.2 us more at M = 8, not yet explained.
__device__ __forceinline__ void smla_pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_bulkp_pdl(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                          const int* __restrict__ page_table, const int* __restrict__ selection,
                                          float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                          int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    smla_pdl_enter();
    ws_bulkp<false>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_bulkp16_pdl(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                            const int* __restrict__ page_table, const int* __restrict__ selection,
                                            bf16* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                            int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    smla_pdl_enter();
    ws_bulkp<true>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// qearly_bulkp16 as the first kernel of a programmatic pair: the three fixed-cost cuts in one kernel.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_qearly_bulkp16_pdl(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                                   const int* __restrict__ page_table, const int* __restrict__ selection,
                                                   bf16* __restrict__ part_acc, float* __restrict__ part_ml, int M,
                                                   int W, int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    smla_pdl_enter();
    ws_bulkp<true, true>(smem_raw, q, arena, page_table, selection, part_acc, part_ml, M, W, pages_per_stream, page_size,
                         splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// The async form with split_wgmma_coop's combine in the kernel (wg_coop_combine over the 256 consumer
// threads): launched cooperatively, grid (splits, M); out [M][64][512] bf16, lse [M][64], row_count [M] (64-bit)
// the launcher's (zero at build, never reset).
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_async_coop(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                                     const int* __restrict__ page_table, const int* __restrict__ selection,
                                     float* __restrict__ part_acc, float* __restrict__ part_ml, bf16* __restrict__ out,
                                     float* __restrict__ lse, unsigned long long* __restrict__ row_count, int M, int W,
                                     int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false, true, true>(smem_raw, q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W,
                                       pages_per_stream, page_size, splits, scale, out, lse, row_count);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}

// The alternate-tile form (its section above ws_split): grid (splits, M), split_wgmma's
// partials and the shared combine, SPARSE_MLA_SPLIT_WGMMA_WS_ALT_SMEM_BYTES of shared memory.
extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_WGMMA_WS_THREADS, 1)
sparse_mla_split_wgmma_ws_alt(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                              const int* __restrict__ page_table, const int* __restrict__ selection,
                              float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                              int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    ws_split<false, false, true, false, true>(smem_raw, q, arena, nullptr, page_table, selection, part_acc, part_ml, M,
                                              W, pages_per_stream, page_size, splits, scale);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}
