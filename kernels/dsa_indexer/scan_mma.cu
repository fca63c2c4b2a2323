/*
DSA indexer scan, design scan_mma: tensor cores (mma.sync.aligned.m16n8k16.row.col.f32, bf16 x bf16
for bf16 keys, f16 x f16 for fp8 keys), keys streamed from global memory straight into the A
fragments (no shared memory at all). The op, layouts and conventions: scan_common.cuh. key_layout
cand_dim only (the launcher refuses dim_cand: scan_variants.py says why).

Per warp, a tile of 16 keys c0 .. c0 + 15:  D[16 keys x 32 heads] = K[16 x 128] . Q^T[128 x 32]
as 4 n-tiles (8 heads each) x 8 k-steps (16 dims each) = 32 MMAs; then relu, x w[head], the sum of
the 8 heads a thread holds, two quad shuffles -> the scores of keys c0 + g and c0 + g + 8.

Fragment layouts (PTX ISA, m16n8k16; g = lane >> 2, t = lane & 3; a .b32 register holds two 16-bit
values, the lower k / column in the low half):
    A (16 x 16, row): a0 = (row g, k 2t, 2t+1)  a1 = (row g+8, k 2t, 2t+1)
                      a2 = (row g, k 2t+8, 2t+9) a3 = (row g+8, k 2t+8, 2t+9)
    B (16 x 8, col):  b0 = (k 2t, 2t+1; n g)     b1 = (k 2t+8, 2t+9; n g)
    D (16 x 8, f32):  d0, d1 = (row g, n 2t, 2t+1)   d2, d3 = (row g+8, n 2t, 2t+1)

The dim permutation. A dot product sums over dims, so any permutation of the dim axis applied to
BOTH the keys and q leaves every score unchanged. We pick the one that lets lane (g, t) fill its A
fragments with 16-byte loads of contiguous key bytes: load i of key row r reads bytes
[64 i + 16 t, +16) (bf16: i < 4, 8 dims a load; fp8: i < 2, 16 codes a load); for one row the 4
lanes of a quad read 64 contiguous bytes, so every load instruction covers whole 32-byte sectors of
8 rows. Logical k-step s, k index kk = 2t + e + 8 hi (e, hi in {0, 1}) is physical dim
    bf16: p = 32 (s >> 1) + 8 t + 4 (s & 1) + 2 hi + e      (load s >> 1, words 2 (s & 1) + hi)
    fp8:  p = 64 (s >> 2) + 16 t + 4 (s & 3) + 2 hi + e     (load s >> 2, word s & 3, half hi)
(a bijection of 0..127: the bit fields do not overlap; tests/test_indexer_scan.py checks it and
that the permuted fragments give the same dot products, in NumPy). q's B fragments use the same
map: b0 / b1 of step s, n-tile nt are q[8 nt + g][p0 .. p0 + 1] / [p0 + 2 .. p0 + 3] with p0 the
dim of (s, t, hi = 0, e = 0): one 8-byte load of q per (nt, s), built once per warp in registers
(4 n-tiles x 8 steps x 2 = 64 registers).

fp8: 16 codes a load, converted two at a time by cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value is
an f16); q converted to f16 once (exact for BF16 values with 2^-14 <= |x| <= 65504: f16 has more
mantissa bits than BF16; q ~ N(0, 1) only loses bits below 2^-14, by less than 2^-25 absolute);
the head sum is multiplied by the key's scale (s > 0: relu(s x) = s relu(x)).

scan_mma_bf16 / scan_mma_fp8: a persistent grid (as many CTAs as fit, the launcher's
    harness.cuda.persistent_grid), block SCAN_MMA_THREADS, 1-D. The M x ceil(C / 16) tiles are
    flattened stream-major and dealt in contiguous runs: warp gw = x SCAN_MMA_WARPS + w takes
    tiles [gw tiles_per_warp, (gw + 1) tiles_per_warp) (the launcher makes the runs cover them
    all), so every warp streams the same number of tiles (no tail wave) and crosses a stream
    boundary at most once or twice (it rebuilds q's fragments and w there). Every score of its
    tiles is written: rows < eligible[m] their score, the other rows < C -inf. A tile that reaches
    past eligible[m] loads only its eligible rows (zeros otherwise).
    Pipeline: the next tile's loads are issued before this tile's MMAs (2 tiles of loads in flight
    per warp: 8 KiB bf16, 4 KiB fp8); all asm is volatile so that order is kept, and the two tile
    buffers alternate (the loop is unrolled by two: copying a buffer whose loads are in flight would
    wait for them). __launch_bounds__(128, 3): <= 168 registers, 12 warps an SM, up to 96 KiB of
    key loads in flight an SM (bf16).

scan_mma_fp8x2 / scan_mma_fp8x2_w8 (FP8 keys): a warp's tile is 2 m-tiles, 32 keys (rows c0 .. c0
    + 31, c0 = 32 x tile), the loads of both issued together and the MMAs and scores of one m-tile
    after the other, so 8 KiB of keys are in flight a warp as for bf16, where scan_mma_fp8 keeps 4
    KiB (the H200 run at e9f434a: fp8 at 77% of its stream-only floor, bf16 at 91%; the test of
    whether bytes in flight, not the conversions, bind). The work is then M x ceil(C / 32) tiles.
    Issue slots a 16-key m-tile a thread: 32 MMAs, 32 cvt.rn.f16x2.e4m3x2 (8 a 16-byte load) and
    their 16-bit operand moves, 4 LDG.128 + 1 scale load, ~40 for the relu / weights / quad sums /
    store: ~150 warp instructions for 2 KiB, ~75 us of issue an SM at the model point, under the
    ~270 us floor. fp8x2: 12 warps an SM at 168 registers (ptxas spills 40 B); fp8x2_w8: 8 warps
    (launch bounds (128, 2), 246 registers, no spills), 64 KiB in flight an SM.


scan_mma_e4m3 (FP8 keys and FP8 queries: q[m][j] = q_codes[m][j] x q_scales[m][j], one FP32 scale
    per (stream, head), > 0): mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 on the codes as
    loaded. Per 16-key m-tile: 4 n-tiles x 4 k-steps (32 dims each) = 16 MMAs. The A fragment of
    m16n8k32 (scan_mma_ops.cuh) puts 4 consecutive-k codes in a register (k 4t .. 4t+3 low, 16+4t ..
    +3 high), so one 32-bit word of a 16-byte load is a whole register, with the e4m3 permutation
    (k-step s, kk = 4t + e + 16 hi, e < 4):
        p = 64 (s >> 1) + 16 t + 8 (s & 1) + 4 hi + e      (load s >> 1, word 2 (s & 1) + hi)
    (a bijection: bit 6 = s >> 1, bits 4-5 = t, bit 3 = s & 1, bit 2 = hi, bits 0-1 = e; the same
    16-byte loads as scan_mma_fp8, Tile<true, 2> and load_tile unchanged). q's B fragments use the
    same map: b0 / b1 = the 8 codes of q[8 nt + g] at p0 = 64 (s >> 1) + 16 t + 8 (s & 1), one 8-byte
    load per (nt, s), 32 registers. A and B read their 4 bytes with the same k order, so the dot is
    right whichever byte of a register the ISA calls element 0. Then per (key, head): relu(dot) x wq
    with wq = w x q_scale (folded once per stream: relu(qs dot) = qs relu(dot) since qs > 0), the
    head sum, x the key's scale (> 0). Warp tiles of 32 keys (SUB = 2) as scan_mma_fp8x2: 8 KiB in
    flight a warp, 8 warps an SM (__launch_bounds__(128, 2): at (128, 3) it spills 540 B).
    On sm_90 ptxas lowers the e4m3 mma.sync to F2FP.F16.E4M3 conversions of A and B, 2 HMMA.16816 from
    zero and an FADD into the accumulator (SCAN_NOTES: "e4m3 queries"): fewer source instructions, but
    the per-byte conversion is not gone, and q's codes are converted again every tile.
*/

#include "scan_mma_ops.cuh"

#define SCAN_MMA_THREADS 128
#define SCAN_MMA_WARPS 4
static_assert(SCAN_MMA_WARPS * 32 == SCAN_MMA_THREADS, "warps per CTA");
#define SCAN_MMA_TILE 16
#define SCAN_MMA_E4M3_SUB 2   // scan_mma_e4m3's m-tiles a warp tile (the launcher reads it: scan_variants)


// The queries a kernel reads: BF16 q (Q8 false) or e4m3 codes with per-head scales (Q8 true), the
// head weights, and the B fragments' k-steps per n-tile (8 of 16 dims / 4 of 32).
template <bool Q8>
struct Query {
    const bf16* __restrict__ q;
    const float* __restrict__ w;
    static constexpr int STEPS = 8;
};
template <>
struct Query<true> {
    const unsigned char* __restrict__ q;
    const float* __restrict__ qs;
    const float* __restrict__ w;
    static constexpr int STEPS = 4;
};

template <bool FP8, bool Q8>
__device__ __forceinline__ void query_setup(unsigned (&bq)[4][Query<Q8>::STEPS][2], float (&wr)[4][2],
                                            const Query<Q8>& in, int m, int g, int t) {
    if constexpr (Q8) stream_setup_e4m3(bq, wr, in.q, in.qs, in.w, m, g, t);
    else stream_setup<FP8>(bq, wr, in.q, in.w, m, g, t);
}

// A warp's tile: SUB m-tiles of 16 keys (rows c0 + 16 sub + 0 .. 15). SUB = 1: scan_mma_bf16 /
// scan_mma_fp8; SUB = 2: scan_mma_fp8x2 (header).
template <bool FP8, int SUB = 1>
struct Tile {
    static constexpr int KEY_BYTES = FP8 ? 128 : 256;
    static constexpr int LOADS = FP8 ? 2 : 4;     // 16-byte loads per key row per lane
    uint4 v[SUB][2][LOADS];                        // [m-tile][row g, row g + 8][load i]
    float scale[SUB];                              // fp8: the scale of row g + 8 (t & 1) of each m-tile
};

template <bool FP8, int SUB>
__device__ __forceinline__ void load_tile(Tile<FP8, SUB>& tile, const unsigned char* __restrict__ keys,
                                          const float* __restrict__ scales, size_t stream, int c0, int elig,
                                          int g, int t) {
    constexpr int KB = Tile<FP8, SUB>::KEY_BYTES, L = Tile<FP8, SUB>::LOADS;
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) {
        const int cs = c0 + SCAN_MMA_TILE * sub;  // this m-tile's first key
        const unsigned char* base = keys + (stream + (size_t)cs) * KB + 16 * t;
        if (cs + SCAN_MMA_TILE <= elig) {  // warp-uniform: every row eligible
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int i = 0; i < L; ++i) tile.v[sub][r][i] = ld_nc_v4(base + (size_t)(g + 8 * r) * KB + 64 * i);
        } else {  // rows at or past elig (<= C) are never read: zeros, and their scores -inf or unwritten
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
                for (int i = 0; i < L; ++i) {
                    tile.v[sub][r][i] = make_uint4(0u, 0u, 0u, 0u);
                    if (cs + g + 8 * r < elig) tile.v[sub][r][i] = ld_nc_v4(base + (size_t)(g + 8 * r) * KB + 64 * i);
                }
        }
        if constexpr (FP8) {
            const int row = cs + g + 8 * (t & 1);
            tile.scale[sub] = row < elig ? ld_nc_f32(scales + stream + row) : 0.0f;
        }
    }
}


// One tile of the stream-major walk: issue the next tile's loads (into nxt), then this tile's
// MMAs and scores (from cur); advance (m, tile, elig) and rebuild q's fragments at a stream change.
// The caller alternates the two buffers (no register copy of a tile whose loads are in flight: a
// move would wait for the data and leave a single tile in flight).
template <bool FP8, int SUB, bool Q8>
__device__ __forceinline__ void mma_step(Tile<FP8, SUB>& cur, Tile<FP8, SUB>& nxt, int idx, int last, int& m,
                                         int& tile, int& elig, unsigned (&bq)[4][Query<Q8>::STEPS][2],
                                         float (&wr)[4][2], const Query<Q8>& in,
                                         const unsigned char* __restrict__ keys, const float* __restrict__ scales,
                                         const int* __restrict__ eligible, float* __restrict__ scores, int C,
                                         int ntiles, int g, int t) {
    // the next tile (maybe of the next stream): its loads go out before this tile's MMAs
    int nm = m, ntile = tile + 1, nelig = elig;
    const bool more = idx + 1 < last;
    if (ntile == ntiles) {
        nm = m + 1;
        ntile = 0;
        if (more) nelig = ld_nc_s32(eligible + nm);
    }
    if (more)
        load_tile<FP8, SUB>(nxt, keys, scales, (size_t)nm * (size_t)C, ntile * SCAN_MMA_TILE * SUB, nelig, g, t);

#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) {
        const int c0 = (tile * SUB + sub) * SCAN_MMA_TILE;  // this m-tile's first key
        float acc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[nt][j] = 0.0f;
        if constexpr (Q8) {
            // e4m3 codes straight from the loads: k-step s = load s >> 1, words 2 (s & 1) (low k) and + 1
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int lo = 2 * (s & 1);
                const unsigned a0 = word_of(cur.v[sub][0][s >> 1], lo), a2 = word_of(cur.v[sub][0][s >> 1], lo + 1);
                const unsigned a1 = word_of(cur.v[sub][1][s >> 1], lo), a3 = word_of(cur.v[sub][1][s >> 1], lo + 1);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) mma_e4m3(acc[nt], a0, a1, a2, a3, bq[nt][s][0], bq[nt][s][1]);
            }
        } else {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            unsigned a0, a1, a2, a3;  // row g low k, row g + 8 low k, row g high k, row g + 8 high k
            if constexpr (FP8) {
                const unsigned w0 = word_of(cur.v[sub][0][s >> 2], s & 3), w1 = word_of(cur.v[sub][1][s >> 2], s & 3);
                a0 = e4m3x2_to_f16x2((unsigned short)(w0 & 0xFFFFu));
                a2 = e4m3x2_to_f16x2((unsigned short)(w0 >> 16));
                a1 = e4m3x2_to_f16x2((unsigned short)(w1 & 0xFFFFu));
                a3 = e4m3x2_to_f16x2((unsigned short)(w1 >> 16));
            } else {
                const int lo = 2 * (s & 1);
                a0 = word_of(cur.v[sub][0][s >> 1], lo);
                a2 = word_of(cur.v[sub][0][s >> 1], lo + 1);
                a1 = word_of(cur.v[sub][1][s >> 1], lo);
                a3 = word_of(cur.v[sub][1][s >> 1], lo + 1);
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                if constexpr (FP8) mma_f16(acc[nt], a0, a1, a2, a3, bq[nt][s][0], bq[nt][s][1]);
                else mma_bf16(acc[nt], a0, a1, a2, a3, bq[nt][s][0], bq[nt][s][1]);
            }
        }
        }
        const float2 sums = quad_head_sums(acc, wr);  // Q8: wr = w x q_scale
        // t = 0 writes row g, t = 1 row g + 8 (fp8: each loaded the scale of that row)
        const int row = c0 + g + 8 * (t & 1);
        float value = (t & 1) ? sums.y : sums.x;
        if constexpr (FP8) value *= cur.scale[sub];
        if (t < 2 && row < C) scores[(size_t)m * (size_t)C + row] = row < elig ? value : neg_inf();
    }

    if (more && nm != m) query_setup<FP8, Q8>(bq, wr, in, nm, g, t);  // after the last MMA of stream m
    m = nm;
    tile = ntile;
    elig = nelig;
}

template <bool FP8, int SUB = 1, bool Q8 = false>
__device__ __forceinline__ void scan_mma(const Query<Q8> in, const unsigned char* __restrict__ keys,
                                         const float* __restrict__ scales, const int* __restrict__ eligible,
                                         float* __restrict__ scores, int M, int C, int tiles_per_warp) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    // Work: the M x ntiles tiles flattened stream-major; warp gw takes [gw tpw, (gw + 1) tpw).
    const int ntiles = (C + SCAN_MMA_TILE * SUB - 1) / (SCAN_MMA_TILE * SUB);  // warp tiles a stream
    // ints: M x C < 2^31 (scan_spec.check_point), so the tile count and every index below fit
    const int total = M * ntiles;
    const int first = (blockIdx.x * SCAN_MMA_WARPS + warp) * tiles_per_warp;
    const int last = min(first + tiles_per_warp, total);
    if (first >= last) return;  // no barrier in this kernel: a warp may leave on its own
    int m = first / ntiles, tile = first % ntiles;
    int elig = ld_nc_s32(eligible + m);

    unsigned bq[4][Query<Q8>::STEPS][2];
    float wr[4][2];
    query_setup<FP8, Q8>(bq, wr, in, m, g, t);

    Tile<FP8, SUB> a, b;
    load_tile<FP8, SUB>(a, keys, scales, (size_t)m * (size_t)C, tile * SCAN_MMA_TILE * SUB, elig, g, t);
#pragma unroll 1
    for (int idx = first; idx < last; idx += 2) {
        mma_step<FP8, SUB, Q8>(a, b, idx, last, m, tile, elig, bq, wr, in, keys, scales, eligible, scores, C,
                               ntiles, g, t);
        if (idx + 1 >= last) break;
        mma_step<FP8, SUB, Q8>(b, a, idx + 1, last, m, tile, elig, bq, wr, in, keys, scales, eligible, scores,
                               C, ntiles, g, t);
    }
}


extern "C" __global__ void __launch_bounds__(SCAN_MMA_THREADS, 3)
scan_mma_bf16(const bf16* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ keys,
              const int* __restrict__ eligible, float* __restrict__ scores, int M, int C, int tiles_per_warp) {
    scan_mma<false>(Query<false>{q, w}, keys, nullptr, eligible, scores, M, C, tiles_per_warp);
}

extern "C" __global__ void __launch_bounds__(SCAN_MMA_THREADS, 3)
scan_mma_fp8(const bf16* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ keys,
             const float* __restrict__ scales, const int* __restrict__ eligible, float* __restrict__ scores, int M,
             int C, int tiles_per_warp) {
    scan_mma<true>(Query<false>{q, w}, keys, scales, eligible, scores, M, C, tiles_per_warp);
}

// FP8 keys, warp tiles of 32 keys (2 m-tiles): 4 KiB of keys a tile, 8 KiB in flight a warp (as
// scan_mma_bf16), 96 KiB an SM at 12 warps, where scan_mma_fp8 keeps 48 KiB.
extern "C" __global__ void __launch_bounds__(SCAN_MMA_THREADS, 3)
scan_mma_fp8x2(const bf16* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ keys,
               const float* __restrict__ scales, const int* __restrict__ eligible, float* __restrict__ scores, int M,
               int C, int tiles_per_warp) {
    scan_mma<true, 2>(Query<false>{q, w}, keys, scales, eligible, scores, M, C, tiles_per_warp);
}

// The same at __launch_bounds__(128, 2): the registers it wants without spills (246 at nvcc 13.0),
// 8 warps an SM, 64 KiB in flight an SM; scan_mma_fp8x2 keeps 12 warps at 168 registers with a
// few bytes spilled.
extern "C" __global__ void __launch_bounds__(SCAN_MMA_THREADS, 2)
scan_mma_fp8x2_w8(const bf16* __restrict__ q, const float* __restrict__ w, const unsigned char* __restrict__ keys,
                  const float* __restrict__ scales, const int* __restrict__ eligible, float* __restrict__ scores,
                  int M, int C, int tiles_per_warp) {
    scan_mma<true, 2>(Query<false>{q, w}, keys, scales, eligible, scores, M, C, tiles_per_warp);
}

// FP8 keys x FP8 queries on the e4m3 MMA (header: scan_mma_e4m3): q_codes [M][32][128] e4m3,
// q_scales [M][32] FP32 (> 0); warp tiles of SCAN_MMA_E4M3_SUB x 16 = 32 keys. Launch bounds (128, 2),
// 8 warps an SM, as scan_mma_fp8x2_w8 (the best FP8-key row): at (128, 3) ptxas spills 540 B (it
// keeps the f16 copies of q's B codes that its emulation converts, 64 registers, beside the tiles).
extern "C" __global__ void __launch_bounds__(SCAN_MMA_THREADS, 2)
scan_mma_e4m3(const unsigned char* __restrict__ q, const float* __restrict__ q_scales, const float* __restrict__ w,
              const unsigned char* __restrict__ keys, const float* __restrict__ scales,
              const int* __restrict__ eligible, float* __restrict__ scores, int M, int C, int tiles_per_warp) {
    scan_mma<true, SCAN_MMA_E4M3_SUB, true>(Query<true>{q, q_scales, w}, keys, scales, eligible, scores, M, C,
                                            tiles_per_warp);
}
