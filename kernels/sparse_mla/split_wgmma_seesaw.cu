/*
Sparse MLA decode, design split_wgmma_seesaw (BF16 latent, sm_90a): split_wgmma's split-K contract
(grid (splits, M), part_acc / part_ml as split_wgmma.cu's header, the shared sparse_mla_combine) with
the two warpgroups on alternate tiles instead of in lockstep, so that one warpgroup's softmax runs
while the other's wgmmas do (FlashMLA's "seesaw" decode schedule; kernels/sparse_mla/NOTES.md, "The
next design"). Written from the measured reason split_wgmma stops at ~3.4 us a 64-slot tile: both
warpgroups walk each tile MMA -> scalar work -> MMA together, with nothing to fill the gaps.

CTA: 2 warpgroups (256 threads), 32-slot tiles. Warpgroup w owns the tiles j = 2 p + w (pair p) and
latent dims [256 w, 256 w + 256) of O. For its own tile it computes the full-depth
    S[64 heads x 32 slots] = Q . C_j^T          32 x wgmma m64n32k16 SS (all 512 dims)
and the tile's softmax, publishes P_j (bf16, as the RS A fragments), its running max and the tile's
row sums, and both warpgroups multiply P_j into their own O half:
    O_w[64 x 256] += P_j . C_j[:, half w]       2 x wgmma m64n256k16 RS (the tile as transposed B)
P crosses warpgroups as register fragments: thread t of both warpgroups holds the same (head, slot)
positions of an m64nN accumulator (split_wgmma.cu's header: D and A fragment layouts), so thread t
writes its 8 packed words and thread t of the partner reads them into the same A registers.

Independent row maxima. Each warpgroup keeps its own running max m and sum l over every tile it has
folded in (its own and its partner's), and O_w relative to m. Its own tile: m' = max(m, tile max),
P = exp(S - m'), O and l scaled by exp(m - m') (skipped by a warp whose rows all kept their max). A
partner's tile arrives with the partner's max m_p and row sums s_p (relative to m_p), and m_p >= m:
wg 0's max at tile 2p was taken after it folded wg 1's max of tile 2p - 1, which is wg 1's m when it
folds tile 2p; wg 1's max at tile 2p + 1 was taken after it folded tile 2p's, which is wg 0's m when
it folds tile 2p + 1 (a PV does not change m; every max is an exact fmaxf). So
    m_p == m:  O += P_p C, l += s_p                                   (the settled case: no wait)
    m_p >  m:  O and l scaled by exp(m - m_p) (after this warp's wgmmas on O retire), m = m_p; as above
and neither softmax waits for the other's. Both warpgroups end with the same max (the last fold
takes the other's, exactly); their sums differ by rounding only, so warpgroup 1 writes its O times
l_0 / l_1 and the partial's (max, sum) are warpgroup 0's: acc / l_0 = O_1 / l_1 as each half computed.

Schedule, pair p (np = ceil(ntiles / 2) pairs; the selection chunk is split_wgmma's):
  wg 0:                                      wg 1:
    [p >= 1] wait own tile 2p landed           bar 3 (P of tile 2p published); fold it; PV_1(2p)
    S(2p); [p >= 1] copy tile 2p + 2          [2p + 1 < ntiles:] [p >= 1] wait own tile 2p + 1
    softmax(2p); publish; arrive bar 3         S(2p + 1); [p >= 1] copy tile 2p + 3
    PV_0(2p)                                   softmax(2p + 1); publish; arrive bar 4; PV_1(2p + 1)
    [2p + 1 < ntiles:] bar 4; fold P(2p + 1); PV_0(2p + 1)
so tile 2p + 1's S runs under tile 2p's softmax's successor work and the other way round: per tile
the chain is one warpgroup's S + softmax, and the other warpgroup's PVs fill the tensor cores.

Shared memory (from a 1024-aligned base placed at run time; SMEM_BYTES includes 1024 of slack):
    sQ   [64 heads][512]          65536  q[m] (both warpgroups read all of it)
    ring [4][32 slots][512]      131072  stage j & 3 holds tile j: warpgroup w's tiles in stages w, w + 2
    xp   [2 wg][2 k][128] uint4    8192  P fragments (k-step k's 4 words a thread)
    xm   [2 wg][128] float4        4096  (m row g, m row g + 8, s row g, s row g + 8) a thread
Every tile is 128-byte-swizzled as split_wgmma's (wg_swz; a 32-slot tile is 4 row groups at SBO
8192), the descriptors are split_wgmma_t32's.

Barriers, and why each reuse is safe (every condition is CTA-uniform: it follows from ntiles):
  * 1 / 2 (128 threads): warpgroup w's threads' copies of its own tile visible to its S wgmmas (each
    thread: cp.async.wait_group, fence.proxy.async, bar.sync 1 + w). The partner reads that tile only
    after the P hand-off below, which the owner arrives at after its own bar.sync.
  * 3 / 4 (256 = 128 bar.arrive + 128 bar.sync): P, m, s of tile 2p (wg 0 -> wg 1) / 2p + 1 (wg 1 ->
    wg 0). One buffer a direction suffices: wg 0 rewrites xp[0] (tile 2p + 2) only after bar 4 of
    tile 2p + 1, which wg 1 arrives at after reading tile 2p's; symmetrically for wg 1. A barrier's
    next arrive always follows the previous phase's sync by the same chain.
  * The ring: wg 0 copies tile 2p + 2 into tile 2p - 2's stage at pair p. wg 1 finished reading tile
    2p - 2 (PV_1(2p - 2)) before publishing tile 2p - 1 (its S wait retires every earlier wgmma),
    which wg 0 waited for at pair p - 1; wg 0's own reads of it retire at wgmma.wait_group 2 after
    S(2p) is committed (groups in order: PV_0(2p - 2), PV_0(2p - 1), S(2p)). wg 1 copies tile 2p + 3
    into tile 2p - 1's stage after bar 3 of tile 2p, which wg 0 arrives at after its S(2p) wait
    (retiring PV_0(2p - 1)); its own reads retire at wait_group 2 (PV_1(2p - 1), PV_1(2p), S(2p + 1)).
The cp.async groups: each thread commits q and its warpgroup's tile of pair 0 as group 0, pair 1 as
group 1 (prologue), then one group a pair from p = 1 (pair p + 1; empty past the last tile):
waiting for group 0 and the CTA barrier before the loop covers q and pair 0; at pair p >= 1
wait_group 0 (issued before this pair's copy) is pair p's tile.
Rows: lane l of every warp of warpgroup w carries slot l of its own tiles through the selection and
page-table reads, each load consumed an iteration after it was issued (split_wgmma's AHEAD chain,
one own tile ahead); the copy thread of row r takes the row from lane r by shuffle.
*/

#include "sparse_mla_wgmma.cuh"  // common, the combine (exported from this module), the wgmma helpers

#define SPARSE_MLA_SEESAW_THREADS 256
#define SPARSE_MLA_SEESAW_SMEM_BYTES 209920  // 208896 used + 1024 alignment slack
#define SS_TILE 32
#define SS_STAGE_BYTES (SS_TILE * SMLA_DIM * 2)
#define SS_Q_AT 0
#define SS_RING_AT 65536
#define SS_XP_AT (SS_RING_AT + 4 * SS_STAGE_BYTES)
#define SS_XM_AT (SS_XP_AT + 2 * 2 * 128 * 16)
static_assert(SS_XM_AT + 2 * 128 * 16 + 1024 == SPARSE_MLA_SEESAW_SMEM_BYTES, "smem layout");

#ifdef SPARSE_MLA_WGMMA_ENABLED
// The copy map of warpgroup thread tl (chunk c = tl % 64 of rows r0 + 2 i, r0 = tl / 64, i < 16: a
// warp covers 512 contiguous bytes of one row), its addresses computed once: row r0 + 2 i of a
// 32-row tile is in row group i / 4 at row 2 (i % 4) + r0 of its 8, so its chunk lands at
// (i / 4) 8192 + soff[i % 4] (wg_swz with the per-thread part hoisted), and its source is
// gbase + row x 1024. 25 SASS instructions a copy became ~5 (shuffle, clamp, size, address, copy).
struct SsCopyMap {
    unsigned soff[4];
    const unsigned char* gbase;
    int r0;
};
__device__ __forceinline__ SsCopyMap ss_copy_map(int tl, const bf16* __restrict__ arena) {
    SsCopyMap cm;
    const int c = tl & 63;
    cm.r0 = tl >> 6;
#pragma unroll
    for (int q = 0; q < 4; ++q) cm.soff[q] = wg_swz(2 * q + cm.r0, c);  // row group 0: rows 0 .. 7
    cm.gbase = reinterpret_cast<const unsigned char*>(arena) + 16 * c;
    return cm;
}
// This warpgroup's 32-slot tile into the stage at shared address `stage`; the row of slot r comes
// from lane r (-1: zero-filled, nothing read; the clamped address is never dereferenced).
__device__ __forceinline__ void ss_issue(unsigned stage, const SsCopyMap& cm, int row_of_lane) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const int row = __shfl_sync(FULL_MASK, row_of_lane, cm.r0 + 2 * i);
        const unsigned char* src = cm.gbase + (size_t)max(row, 0) * (SMLA_DIM * 2);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(stage + cm.soff[i & 3] + (i >> 2) * 8192),
                     "l"(src), "r"(row >= 0 ? 16u : 0u)
                     : "memory");
    }
}

// The partner's tile folded into this warpgroup's state (header, "Independent row maxima"): xm =
// (m_p row g, m_p row g + 8, s_p row g, s_p row g + 8). m_p >= m always: the partner's max was taken
// after it folded this warpgroup's latest published max (header), so P_p never needs scaling down,
// only O and l up to m_p where the partner saw a larger score. O may have this warp's PV wgmmas in
// flight: a warp that must rescale O waits for them first.
__device__ __forceinline__ void ss_fold(float4 xm, float (&m_run)[2], float (&l_run)[2], float (&o)[128]) {
    const float mp[2] = {xm.x, xm.y}, sp[2] = {xm.z, xm.w};
    float beta[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        beta[r] = 1.f;
        if (mp[r] > m_run[r]) {                  // m_p = -inf never is (m_run >= -inf)
            beta[r] = __expf(m_run[r] - mp[r]);  // m_run = -inf: 0 (O and l are 0 anyway)
            m_run[r] = mp[r];
        }
        l_run[r] = fmaf(l_run[r], beta[r], sp[r]);
    }
    if (__any_sync(FULL_MASK, beta[0] != 1.f || beta[1] != 1.f)) {
        wgmma_wait0();
        fence_regs(o);
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] *= beta[(i >> 1) & 1];
    }
}

// O_wg += P . C_tile[:, half wg]: 2 k-steps of 16 slots (the tile as the MN-major B).
__device__ __forceinline__ void ss_pv(float (&o)[128], unsigned (&p)[2][4], unsigned stage, int wg) {
    fence_regs(p[0]);
    fence_regs(p[1]);
    wgmma_fence();
    const unsigned long long d0 = wg_desc(stage + (unsigned)(wg * 4 * 1024), 1024, 8192);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) wgmma_m64n256k16_rs(o, p[ks], d0 + (unsigned)(ks * 2 * 8192 / 16));
    wgmma_commit();
}

// The partner's tile (published by warpgroup src, barrier BAR): wait for it, take its P fragments
// and (m, s), fold, and multiply its P into this warpgroup's O half.
template <int BAR>
__device__ __forceinline__ void ss_partner(const uint4* xp, const float4* xm, int src, int tl, float (&m_run)[2],
                                           float (&l_run)[2], float (&o)[128], unsigned stage, int wg) {
    named_sync<BAR, 256>();
    const uint4 u0 = xp[(src * 2 + 0) * 128 + tl], u1 = xp[(src * 2 + 1) * 128 + tl];
    unsigned pp[2][4] = {{u0.x, u0.y, u0.z, u0.w}, {u1.x, u1.y, u1.z, u1.w}};
    ss_fold(xm[src * 128 + tl], m_run, l_run, o);
    ss_pv(o, pp, stage, wg);
}

// S[64 x 32] = Q . C_tile^T over all 512 dims: 32 k-steps (segment k / 4, 32 B a step in it).
__device__ __forceinline__ void ss_scores(float (&sc)[16], unsigned q_addr, unsigned stage) {
#pragma unroll
    for (int i = 0; i < 16; ++i) sc[i] = 0.f;
    fence_regs(sc);
    wgmma_fence();
    const unsigned long long dq = wg_desc(q_addr, 16, 8192), dt = wg_desc(stage, 16, 8192);
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const unsigned off16 = (unsigned)((k >> 2) * 1024 + (k & 3) * 32) / 16;
        wgmma_m64n32k16_ss(sc, dq + off16, dt + off16, k > 0);
    }
    wgmma_commit();
}

// The own tile's online softmax after its S retired: mask (vm: the tile's valid slots, bit = slot),
// scale, new running max (O rescaled by a warp only if one of its rows moved), P packed as the RS A
// fragments, and the tile's row sums of the bf16-rounded P (returned for the partner, quad-reduced).
__device__ __forceinline__ void ss_softmax(float (&sc)[16], unsigned vm, float scale, int t4, float (&m_run)[2],
                                           float (&l_run)[2], float (&o)[128], unsigned (&pa)[2][4], float (&ls)[2]) {
    float mt[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int bit = 8 * j + 2 * t4 + (e & 1);
            const float v = ((vm >> bit) & 1u) ? scale * sc[4 * j + e] : neg_inf();
            sc[4 * j + e] = v;
            mt[e >> 1] = fmaxf(mt[e >> 1], v);
        }
    float alpha[2], mn[2];
    bool none[2];
    quad_row_max(mt, m_run, mn, none, alpha);
#pragma unroll
    for (int i = 0; i < 16; ++i) sc[i] = none[(i >> 1) & 1] ? 0.f : __expf(sc[i] - mn[(i >> 1) & 1]);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[ks][i] = pack_bf16x2(sc[8 * ks + 2 * i], sc[8 * ks + 2 * i + 1]);
    ls[0] = ls[1] = 0.f;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
        for (int i = 0; i < 4; ++i) ls[i & 1] += bf_lo(pa[ks][i]) + bf_hi(pa[ks][i]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        ls[r] += __shfl_xor_sync(FULL_MASK, ls[r], 1);
        ls[r] += __shfl_xor_sync(FULL_MASK, ls[r], 2);
        l_run[r] = l_run[r] * alpha[r] + ls[r];
        m_run[r] = mn[r];
    }
    if (__any_sync(FULL_MASK, alpha[0] != 1.f || alpha[1] != 1.f)) {
        fence_regs(o);
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
}
#endif  // SPARSE_MLA_WGMMA_ENABLED

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SEESAW_THREADS, 1)
sparse_mla_split_wgmma_seesaw(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                              const int* __restrict__ page_table, const int* __restrict__ selection,
                              float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                              int pages_per_stream, int page_size, int splits, float scale) {
#ifdef SPARSE_MLA_WGMMA_ENABLED
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    if (dynamic_smem_bytes() < SPARSE_MLA_SEESAW_SMEM_BYTES) __trap();
    const unsigned raw_addr = smem_addr(smem_raw);
    const unsigned pad = wg_align_pad(raw_addr);
    unsigned char* smem = smem_raw + pad;
    const unsigned base = raw_addr + pad;
    uint4* xp = reinterpret_cast<uint4*>(smem + SS_XP_AT);
    float4* xm = reinterpret_cast<float4*>(smem + SS_XM_AT);

    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, tl = tid & 127;
    const int w = tl >> 5, g = lane >> 2, t4 = lane & 3;
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + SS_TILE - 1) / SS_TILE;
    const int npairs = (ntiles + 1) / 2;
    const int* sel_m = selection + (size_t)m * (size_t)W;
    const int* pt_m = page_table + (size_t)m * (size_t)pages_per_stream;
    auto own = [&](int p) { return 2 * p + wg < ntiles; };         // this warpgroup's tile of pair p exists
    auto stage_of = [&](int j) { return (unsigned)((j & 3) * SS_STAGE_BYTES); };
    const SsCopyMap cm = ss_copy_map(tl, arena);

    // ---- prologue: q (all 256 threads) with this warpgroup's tile of pair 0 in group 0, pair 1 in
    // group 1; the token chain of pairs 0 .. 2, pages of pairs 0 and 1 ------------------------------
    wg_stage_q<SPARSE_MLA_SEESAW_THREADS>(smem + SS_Q_AT, q, m, tid);
    // t0, t1, t2: this lane's token of the own tiles of pairs p, p + 1, p + 2; g1: page of t1
    int t0 = wg_tok<SS_TILE>(sel_m, start, end, wg, 0, lane);
    int t1 = wg_tok<SS_TILE>(sel_m, start, end, 2 + wg, 0, lane);
    int t2 = wg_tok<SS_TILE>(sel_m, start, end, 4 + wg, 0, lane);
    {
        const int g0 = wg_page(pt_m, t0, page_size);
        const int g1p = wg_page(pt_m, t1, page_size);
        if (own(0)) ss_issue(base + SS_RING_AT + stage_of(wg), cm, wg_row(g0, t0, page_size));
        cp_async_commit();  // group 0: q and pair 0's tile
        if (own(1)) ss_issue(base + SS_RING_AT + stage_of(2 + wg), cm, wg_row(g1p, t1, page_size));
        cp_async_commit();  // group 1: pair 1's tile (empty if none)
    }
    int g1 = -1;  // page of t1 from pair 1 on (pair 0 copies nothing: the prologue issued pairs 0 and 1)
    cp_async_wait<1>();
    fence_proxy_async_shared();
    __syncthreads();  // q and both warpgroups' pair-0 tiles visible

    float m_run[2] = {neg_inf(), neg_inf()};  // rows h0 = 16 w + g and h0 + 8 (scaled-score units)
    float l_run[2] = {0.f, 0.f};
    float o[128];  // o[4 n + 2 v1 + v0] = (row 16 w + g + 8 v1, dim 256 wg + 8 n + 2 t4 + v0)
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    const unsigned ring = base + SS_RING_AT;
    const unsigned q_addr = base + SS_Q_AT;

#pragma unroll 1
    for (int p = 0; p < npairs; ++p) {
        const int j = 2 * p + wg;  // own tile
        if (wg == 1) {
            // the partner's tile 2p: P, m, s published (bar 3); fold it and multiply it in
            ss_partner<3>(xp, xm, 0, tl, m_run, l_run, o, ring + stage_of(2 * p), wg);
        }
        if (own(p)) {
            if (p >= 1) {  // this thread's copies of tile j (the only group in flight), then the warpgroup's
                cp_async_wait<0>();
                fence_proxy_async_shared();
                if (wg == 0) named_sync<1, 128>(); else named_sync<2, 128>();
            }
            const unsigned vm = __ballot_sync(FULL_MASK, t0 >= 0);
            float sc[16];
            ss_scores(sc, q_addr, ring + stage_of(j));
            if (p >= 1) {
                // tile j + 2 into tile j - 2's stage: the partner is done with it (header), and so is
                // this warpgroup once at most the 2 newest groups are pending (its PVs of tiles
                // j - 2 and j - 1 then S(j), or j - 1, j: its PV of j - 2 retired)
                wgmma_wait<2>();
                if (own(p + 1)) ss_issue(base + SS_RING_AT + stage_of(j + 2), cm, wg_row(g1, t1, page_size));
                cp_async_commit();
            }
            wgmma_wait0();
            fence_regs(sc);
            fence_regs(o);
            unsigned pa[2][4];
            float ls[2];
            ss_softmax(sc, vm, scale, t4, m_run, l_run, o, pa, ls);
            // publish P, m and the tile's row sums for the partner
            xp[(wg * 2 + 0) * 128 + tl] = make_uint4(pa[0][0], pa[0][1], pa[0][2], pa[0][3]);
            xp[(wg * 2 + 1) * 128 + tl] = make_uint4(pa[1][0], pa[1][1], pa[1][2], pa[1][3]);
            xm[wg * 128 + tl] = make_float4(m_run[0], m_run[1], ls[0], ls[1]);
            if (wg == 0) named_arrive<3, 256>(); else named_arrive<4, 256>();
            fence_regs(o);
            ss_pv(o, pa, ring + stage_of(j), wg);
        }
        if (wg == 0 && 2 * p + 1 < ntiles) {
            // the partner's tile 2p + 1 (bar 4)
            ss_partner<4>(xp, xm, 1, tl, m_run, l_run, o, ring + stage_of(2 * p + 1), wg);
        }
        // the chain one own tile on: t0 <- t1, t1 <- t2 (its page loaded now, used next pair), t2 <- pair p + 3
        t0 = t1;
        t1 = t2;
        g1 = wg_page(pt_m, t2, page_size);
        t2 = wg_tok<SS_TILE>(sel_m, start, end, 2 * (p + 3) + wg, 0, lane);
    }
    wgmma_wait0();
    fence_regs(o);
    cp_async_wait<0>();  // nothing in flight at exit (the groups past the last tile are empty)

    // ---- partial state out: warpgroup 0's (max, sum); warpgroup 1's O brought to l_0 (header) ------
    __syncthreads();  // every read of xm done
    if (wg == 0) xm[tl] = make_float4(m_run[0], m_run[1], l_run[0], l_run[1]);
    __syncthreads();
    if (wg == 1) {
        const float4 v = xm[tl];
        // one factor a row (rows g and g + 8 of this thread), applied here: wg_store_partials' factor is one a thread
        const float f0 = l_run[0] > 0.f ? v.z / l_run[0] : 1.f, f1 = l_run[1] > 0.f ? v.w / l_run[1] : 1.f;
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] *= ((i >> 1) & 1) ? f1 : f0;
        m_run[0] = v.x;
        m_run[1] = v.y;
        l_run[0] = v.z;
        l_run[1] = v.w;
    }
    const int h0 = 16 * w + g;
    wg_store_partials(part_acc, part_ml, (size_t)m * (size_t)splits + (size_t)s, h0, wg, t4, m_run, l_run, o, 1.f);
#else
    __trap();  // compiled without sm_90a: no wgmma (the launcher passes -arch=sm_90a)
#endif
}
