/*
Sparse MLA decode, design split_mma (split_mma.cu: BF16 latent; split_mma_fp8.cu: FP8 latent, the
same template with FP8 = true): the split-K design of split_cc.cu with both matrix products on
tensor cores (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: bf16 operands, fp32
accumulation), then the same combine kernel. The op and the index conventions:
sparse_mla_common.cuh.

split_mma_body<FP8>: grid (splits, M), block MMA_THREADS (256), MmaLayout<FP8>::SMEM bytes of
    dynamic shared memory (the launcher sets the opt-in from the .cu's #define, which equals it;
    the kernel traps when it gets less). Exactly split_cc's contract: CTA (s, m) handles slots
    [s * W / splits, (s + 1) * W / splits) of row m (any length; a ragged last tile is masked) and
    writes, every element every launch,
        part_ml [((m * splits + s) * 64 + h) * 2 + 0] = max of its scaled scores (-inf if none valid)
        part_ml [((m * splits + s) * 64 + h) * 2 + 1] = sum over its valid slots of exp(score - max)
        part_acc[((m * splits + s) * 64 + h) * 512 + d] = sum of exp(score - max) * c_j[d]
    (a chunk with no valid slot: max = -inf, sum = 0, acc = 0).
sparse_mla_combine: sparse_mla_combine.cuh (the same code split_cc.cu exports).

What changes against split_cc, and why: split_cc is FP32-FMA bound (8.6 GFLOP at M = 32, 428 us
measured at 20 TFLOP/s); on tensor cores the math is a few microseconds and the kernel should bind
on shared-memory operand traffic / the gather instead. Per tile of 32 selected rows:
    S[64 x 32]  = Q[64 x 512] . C^T          (A = q rows, B "col" = the tile's rows: ldmatrix)
    P           = exp(scale S - running max)  (online softmax in registers, per head row)
    O[64 x 512] = alpha O + P[64 x 32] . C    (A = P straight from the S accumulators, B = the tile
                                               read k = token, n = dim: ldmatrix .trans)
with no scores round trip through shared memory and no __syncthreads between the phases.

Warp roles (8 warps): warp w owns head rows 16 rg .. 16 rg + 15 (rg = w & 3) and output columns
256 hf .. 256 hf + 255 (hf = w >> 2). Both warps of a row group compute the SAME full S[16 x 32]
of their rows (the score products are done twice: +50% MMA work, but the softmax needs no
cross-warp exchange at all: every row max / sum lives in one quad of one warp, and the two warps
of a row group compute bit-identical m, l, P, so hf = 1's accumulator matches the m, l that hf = 0
writes). The accumulator O: 32 n-tiles x 4 floats = 128 floats a thread.

MMA fragment layouts (PTX ISA, m16n8k16, .bf16; g = lane >> 2, q4 = lane & 3; each .b32 register
holds two bf16, the lower column / k index in the low half):
    A (16 x 16, row): a0 = (row g,     k 2q4, 2q4+1)   a1 = (row g + 8, k 2q4, 2q4+1)
                      a2 = (row g,     k 2q4+8, +9)    a3 = (row g + 8, k 2q4+8, +9)
    B (16 x 8, col):  b0 = (k 2q4, 2q4+1; n g)         b1 = (k 2q4+8, 2q4+9; n g)
    C/D (16 x 8 f32): d0, d1 = (row g, n 2q4, 2q4+1)   d2, d3 = (row g + 8, n 2q4, 2q4+1)
ldmatrix.m8n8.x4.b16: lanes 8 i .. 8 i + 7 give the 8 row addresses (16 bytes each) of matrix i;
    register i of every lane receives matrix i. Non-transposed: lane gets (row g, cols 2q4, 2q4+1)
    of the matrix; .trans: lane gets (rows 2q4, 2q4+1; col g), i.e. the transpose's (row g, ...).
    So, with lane address row/col chosen per matrix i = lane >> 3, r8 = lane & 7:
    Q as A (k step k0):        row 16 rg + r8 + 8 (i & 1), dims k0 + 8 (i >> 1) .. +7
                               -> r0..r3 = a0..a3 (matrices: rows 0-7/8-15 x k 0-7/8-15)
    C as B for S (slots n0..n0+15, k step k0): tile row n0 + r8 + 8 (i >> 1), dims k0 + 8 (i & 1)
                               -> r0, r1 = b0, b1 of n-tile n0; r2, r3 = b0, b1 of n-tile n0 + 8
    C as B for PV, .trans (tokens k0..k0+15, dims d0..d0+15): tile row k0 + r8 + 8 (i & 1),
                               dims d0 + 8 (i >> 1) .. +7
                               -> r0, r1 = b0, b1 of dim n-tile d0; r2, r3 = b0, b1 of d0 + 8
    P as A for PV (tokens 16 kk ..): the S accumulator of slot n-tile j holds (row g, slots
                               8 j + 2q4, +1) in d0, d1 and row g + 8 in d2, d3, so
                               a0 = S[2kk].d0d1, a1 = S[2kk].d2d3, a2 = S[2kk+1].d0d1, a3 = S[2kk+1].d2d3.

Shared-memory layout (bytes), every row 1024 B = 64 chunks of 16 B, chunk c of row r stored at
chunk c ^ (r & 7) (the XOR swizzle):
    sQ [64][512] bf16            65536   q[m] (row = head)
    sC [4][32][512] bf16        131072   the tile ring (row = tile slot; invalid slots zero-filled)
Every ldmatrix above reads, per matrix, 8 rows r0 + 0..7 (r0 a multiple of 8) at one logical chunk:
physical chunks c ^ 0..7 are 8 distinct 16-byte bank groups, so each 128-byte phase is conflict-free.
The cp.async writes (a warp: 512 contiguous bytes of one row, permuted within 128-byte groups) are
conflict-free too.

Pipeline: 4 tile buffers, 3 tiles in flight while one computes (one commit group per tile, q in
the first). At iteration it: wait until tile it landed, __syncthreads (tile it visible; every warp
is done with tile it - 1), issue tile it + 3 into tile it - 1's buffer, compute tile it.

FP8 (FP8 = true; the arena is codes [rows][512] e4m3 and scale [rows] float, value = code x scale):
    A ring of 6 code tiles (32 rows x 512 B, unswizzled, with their 32 scales: cp.async, 16 B and
    4 B; invalid slots zero codes and a zero scale), 5 in flight. At iteration it: wait until code
    tile it landed, __syncthreads (A: it is visible; every warp is done with iteration it - 1),
    issue code tile it + 5 into code buffer (it - 1) % 6, widen code tile it into the one BF16
    tile sC (e4m3 -> bf16 is exact; the same swizzled layout as above), __syncthreads (B: sC
    visible), then exactly the BF16 compute on sC, with the row scale sc_j folded in:
        score_j = (softmax_scale x sc_j) x (q . code_j)          (FP32)
        O      += bf16(p_j x sc_j) . code_j,   l += bf16(p_j x sc_j) / sc_j
    so O / l is the softmax-weighted sum of the dequantized rows, with the numerator and
    denominator using the same rounded weights (as the BF16 path does); an invalid slot's 1 / sc
    is taken as 0 (its scale is 0 and its p is 0). sC is rewritten at iteration it + 1 only after
    barrier A, which every warp passes after its compute of tile it; code buffer it % 6 is
    rewritten by the issue of iteration it + 1, after barrier A too, so no buffer is written while
    another warp reads it.
    Shared memory: sQ 65536 + sC 32768 + 6 x (16384 codes + 128 scales) = 197376 bytes.
*/


#ifndef SPARSE_MLA_SPLIT_MMA_CUH
#define SPARSE_MLA_SPLIT_MMA_CUH

#include "sparse_mla_common.cuh"
#include "sparse_mla_combine.cuh"

#define MMA_THREADS 256
#define MMA_TILE 32   // selected rows per tile
#define MMA_SQ_BYTES (SMLA_HEADS * SMLA_DIM * 2)      // 65536
#define MMA_TILE_BYTES (MMA_TILE * SMLA_DIM * 2)      // 32768
#define MMA_ROW_BYTES (SMLA_DIM * 2)                  // 1024
#define MMA_CODE_TILE_BYTES (MMA_TILE * SMLA_CODE_ROW_BYTES)  // 16384: one FP8 tile's codes
static_assert(MMA_THREADS == 256, "8 warps: 4 row groups of 16 heads x 2 column halves");
static_assert(MMA_TILE == 32, "S: 4 n-tiles of 8 slots; PV: 2 k-steps of 16 tokens");

// Stages and shared memory of each latent dtype (bytes; the opt-in limit is 227 KiB).
//   BF16: sQ + 4 x 32768 (tile ring)                                   = 196608
//   FP8:  sQ + 32768 (the widened tile) + 6 x (16384 + 128) (code ring) = 197376
template <bool FP8>
struct MmaLayout {
    static constexpr int STAGES = FP8 ? 6 : 4;
    static constexpr int WIDE = FP8 ? MMA_TILE_BYTES : 0;  // the BF16 tile the codes are widened into
    static constexpr int CODES = MMA_SQ_BYTES + WIDE;      // offset of the FP8 code ring
    static constexpr int SCALES = CODES + STAGES * MMA_CODE_TILE_BYTES;  // offset of the scale ring
    static constexpr int SMEM = FP8 ? SCALES + STAGES * MMA_TILE * 4 : MMA_SQ_BYTES + STAGES * MMA_TILE_BYTES;
};

// Element offset of chunk `chunk` (8 bf16) of row `row` in a swizzled [rows][512] bf16 buffer.
__device__ __forceinline__ int swz(int row, int chunk) { return row * SMLA_DIM + ((chunk ^ (row & 7)) << 3); }

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

__device__ __forceinline__ void ldsm_x4_t(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// d += A . B (m16n8k16, bf16 in, fp32 accumulate), fragments as in the header.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void st_v2_f32(float* p, float a, float b) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b));
}

// The split-K contract's (max, sum) of head rows h0 and h0 + 8 for partial ms (= m splits + s),
// from the thread that holds them (every design keeps a thread's two rows 8 apart).
__device__ __forceinline__ void st_part_ml(float* __restrict__ part_ml, size_t ms, int h0, const float (&m_run)[2],
                                           const float (&l_run)[2]) {
    part_ml[(ms * SMLA_HEADS + h0) * 2 + 0] = m_run[0];
    part_ml[(ms * SMLA_HEADS + h0) * 2 + 1] = l_run[0];
    part_ml[(ms * SMLA_HEADS + h0 + 8) * 2 + 0] = m_run[1];
    part_ml[(ms * SMLA_HEADS + h0 + 8) * 2 + 1] = l_run[1];
}

// The codes of one FP8 tile (unswizzled [32][512] B) widened to bf16 into the swizzled tile layout.
// Thread tid widens chunks k = tid + 256 i (i < 8): row r = k >> 6, logical bf16 chunk lc = k & 63,
// i.e. codes bytes 8 lc .. 8 lc + 7 of row r. A warp's 8-byte reads are 256 contiguous bytes and
// each 8 lanes' 16-byte writes fill one 128-byte group (chunks lc ^ (r & 7) of one 8-chunk
// group): both conflict-free.
__device__ __forceinline__ void widen_tile(const unsigned char* codes, bf16* tile) {
#pragma unroll
    for (int i = 0; i < (MMA_TILE * SMLA_ROW_CHUNKS) / MMA_THREADS; ++i) {
        const int k = threadIdx.x + MMA_THREADS * i;
        const int r = k >> 6, lc = k & 63;
        const uint2 w = *reinterpret_cast<const uint2*>(codes + r * SMLA_CODE_ROW_BYTES + lc * 8);
        uint4 o;
        o.x = e4m3x2_to_bf16x2(w.x);
        o.y = e4m3x2_to_bf16x2(w.x >> 16);
        o.z = e4m3x2_to_bf16x2(w.y);
        o.w = e4m3x2_to_bf16x2(w.y >> 16);
        *reinterpret_cast<uint4*>(tile + swz(r, lc)) = o;
    }
}

// The tile of resolved rows (AHEAD): lane l of every warp holds slot l's page (-1: an invalid slot)
// and offset in the page; the row a thread copies is broadcast from its lane by shuffle (every lane
// of the warp takes part; rows are warp-uniform in both copy maps). Otherwise the copy maps of
// issue_tile_rows / issue_tile_codes exactly.
__device__ __forceinline__ bool lane_row(int r_page, int r_off, int r, int page_size, size_t& row) {
    const int page = __shfl_sync(FULL_MASK, r_page, r);
    const int off = __shfl_sync(FULL_MASK, r_off, r);
    row = (size_t)page * (size_t)page_size + (size_t)off;
    return page >= 0;
}

__device__ __forceinline__ void issue_resolved_rows(bf16* buf, const bf16* __restrict__ arena, int r_page, int r_off,
                                                    int page_size) {
    const int c = threadIdx.x & 63;
#pragma unroll
    for (int i = 0; i < (MMA_TILE * SMLA_ROW_CHUNKS) / MMA_THREADS; ++i) {
        const int r = (threadIdx.x >> 6) + 4 * i;
        size_t row;
        const bool ok = lane_row(r_page, r_off, r, page_size, row);
        cp_async16_zfill(buf + r * SMLA_DIM + ((c ^ (r & 7)) << 3), ok ? arena + row * SMLA_DIM + c * 8 : arena,
                         ok ? 16u : 0u);
    }
}

__device__ __forceinline__ void issue_resolved_codes(unsigned char* codes_buf, float* scale_buf,
                                                     const unsigned char* __restrict__ codes,
                                                     const float* __restrict__ row_scale, int r_page, int r_off,
                                                     int page_size) {
    const int c = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < (MMA_TILE * SMLA_CODE_ROW_CHUNKS) / MMA_THREADS; ++i) {
        const int r = (threadIdx.x >> 5) + 8 * i;
        size_t row;
        const bool ok = lane_row(r_page, r_off, r, page_size, row);
        cp_async16_zfill(codes_buf + r * SMLA_CODE_ROW_BYTES + c * 16,
                         ok ? codes + row * SMLA_CODE_ROW_BYTES + c * 16 : codes, ok ? 16u : 0u);
        if (c == 0) cp_async4_zfill(scale_buf + r, ok ? row_scale + row : row_scale, ok ? 4u : 0u);
    }
}

// The online-softmax steps of a thread's two head rows (index 0: row g, 1: row g + 8 of its 16),
// whose slots are spread over one quad (lanes 4 g .. 4 g + 3), shared by split_mma and split_wgmma.
// quad_row_max: mt = this tile's row max over the thread's slots -> the quad's; mn = the new running
// max; none = nothing valid so far (mn = -inf: exp(-inf - -inf) would be NaN; o and l are 0, so any
// finite factor is right, and every p is 0); alpha = exp(m_run - mn), the factor on o and l.
__device__ __forceinline__ void quad_row_max(float (&mt)[2], const float (&m_run)[2], float (&mn)[2], bool (&none)[2],
                                             float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        // The 4 lanes of a quad (lanes 4 g .. 4 g + 3) hold one row: xor 1 and 2 stay inside.
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(FULL_MASK, mt[r], 1));
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(FULL_MASK, mt[r], 2));
        mn[r] = fmaxf(m_run[r], mt[r]);
        none[r] = mn[r] == neg_inf();
        alpha[r] = none[r] ? 1.f : __expf(m_run[r] - mn[r]);  // m_run = -inf -> 0
    }
}

// quad_row_sum: ls = this tile's row sum over the thread's slots -> the quad's, folded into the
// running sum (l = alpha l + ls); the running max becomes mn.
__device__ __forceinline__ void quad_row_sum(float (&ls)[2], const float (&alpha)[2], const float (&mn)[2],
                                             float (&l_run)[2], float (&m_run)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        ls[r] += __shfl_xor_sync(FULL_MASK, ls[r], 1);
        ls[r] += __shfl_xor_sync(FULL_MASK, ls[r], 2);
        l_run[r] = l_run[r] * alpha[r] + ls[r];
        m_run[r] = mn[r];
    }
}

// The kernel body of both latent dtypes. arena: BF16 rows [rows][512] (FP8 = false) or e4m3 codes
// [rows][512] (FP8 = true, with row_scale [rows]; nullptr otherwise). AHEAD: the selection and
// page-table reads of a tile are made two and one iterations before its copy is issued (header).
template <bool FP8, bool AHEAD = false>
__device__ __forceinline__ void split_mma_body(const bf16* __restrict__ q, const void* __restrict__ arena,
                                               const float* __restrict__ row_scale,
                                               const int* __restrict__ page_table, const int* __restrict__ selection,
                                               float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                                               int pages_per_stream, int page_size, int splits, float scale) {
    using L = MmaLayout<FP8>;
    constexpr int STAGES = L::STAGES;
    extern __shared__ __align__(128) unsigned char smem[];
    if (dynamic_smem_bytes() < L::SMEM) __trap();
    bf16* sQ = reinterpret_cast<bf16*>(smem);
    bf16* sC = reinterpret_cast<bf16*>(smem + MMA_SQ_BYTES);  // BF16: the tile ring; FP8: the widened tile
    unsigned char* sCodes = smem + L::CODES;                   // FP8 only: the code ring
    float* sScale = reinterpret_cast<float*>(smem + L::SCALES);  // FP8 only: the scale ring
    const unsigned sQ_addr = smem_addr(sQ);
    const unsigned sC_addr = smem_addr(sC);

    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int tid = threadIdx.x;
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + MMA_TILE - 1) / MMA_TILE;
    const int* sel_m = selection + (size_t)m * (size_t)W;

    // The tile of slots j .. j + 31 into ring buffer `b` (its commit is the caller's).
    auto issue = [&](int b, int j) {
        if constexpr (FP8)
            issue_tile_codes<MMA_TILE, MMA_THREADS>(sCodes + b * MMA_CODE_TILE_BYTES, sScale + b * MMA_TILE,
                                                    static_cast<const unsigned char*>(arena), row_scale, page_table,
                                                    sel_m, m, j, end, pages_per_stream, page_size);
        else
            issue_tile_rows<MMA_TILE, MMA_THREADS>(sC + b * (MMA_TILE * SMLA_DIM), static_cast<const bf16*>(arena),
                                                   page_table, sel_m, m, j, end, pages_per_stream, page_size);
    };

    // ---- prologue: q[m] (16 chunks a thread) with tile 0 in group 0; tiles 1 .. STAGES - 2 in groups 1 .. --
    {
        const bf16* qm = q + (size_t)m * SMLA_HEADS * SMLA_DIM;
#pragma unroll
        for (int i = 0; i < (SMLA_HEADS * SMLA_ROW_CHUNKS) / MMA_THREADS; ++i) {
            const int idx = tid + MMA_THREADS * i;
            const int h = idx >> 6, c = idx & 63;
            cp_async16_zfill(sQ + swz(h, c), qm + h * SMLA_DIM + c * 8, 16u);
        }
    }
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < ntiles) issue(st, start + st * MMA_TILE);
        cp_async_commit();  // always (possibly empty): group st holds tile st
    }
    // AHEAD: lane l's slot l of three tiles in flight through the global reads. v_tok: the token of
    // tile it (its validity mask); r_page / r_off: the page and offset of tile it + STAGES - 1 (the
    // one issued at iteration it); n_tok: the token of tile it + STAGES. -1: an empty slot or one
    // past the chunk. Each load is predicated (nothing consumes it until the next iteration, so its
    // latency passes behind a tile's compute instead of in front of it).
    const int lane_ = tid & 31;
    auto tok_of = [&](int tile) -> int {
        const int j = start + tile * MMA_TILE + lane_;
        int t = -1;
        if (j < end) t = ld_nc_s32(sel_m + j);
        return t;
    };
    auto page_of = [&](int t) -> int {
        int pg = -1;
        if (t >= 0) pg = ld_nc_s32(page_table + (size_t)m * (size_t)pages_per_stream + (size_t)(t / page_size));
        return pg;
    };
    int v_tok = -1, r_page = -1, r_off = 0, n_tok = -1;
    if constexpr (AHEAD) {
        v_tok = tok_of(0);
        const int t = tok_of(STAGES - 1);
        r_page = page_of(t);
        r_off = t >= 0 ? t % page_size : 0;
        n_tok = tok_of(STAGES);
    }

    const int warp = tid >> 5, lane = tid & 31;
    const int rg = warp & 3;   // head rows 16 rg .. 16 rg + 15
    const int hf = warp >> 2;  // output columns 256 hf .. 256 hf + 255
    const int g = lane >> 2, q4 = lane & 3;
    const int li = lane >> 3, r8 = lane & 7;  // ldmatrix: matrix index, row within the matrix

    // Lane-constant parts of the ldmatrix addresses (bytes). Every matrix's 8 rows start at a
    // multiple of 8, so the swizzle key of the lane's row is r8, and for a logical chunk
    // 8 kb + x (x < 8) the physical chunk is 8 kb + (x ^ r8).
    //   Q as A:      row 16 rg + r8 + 8 (li & 1), logical chunk 2 kk + (li >> 1)
    //   C as B (S):  slot r8 + 8 (li >> 1) (+ 16 for slots 16..31), logical chunk 2 kk + (li & 1)
    //   C as B (PV): token r8 + 8 (li & 1) (+ 16 for k-step 1), logical chunk 32 hf + 2 np + (li >> 1)
    const unsigned q_row = sQ_addr + (unsigned)((16 * rg + r8 + 8 * (li & 1)) * MMA_ROW_BYTES);
    const unsigned s_row = (unsigned)((r8 + 8 * (li >> 1)) * MMA_ROW_BYTES);  // + buffer address
    const unsigned v_row = (unsigned)((r8 + 8 * (li & 1)) * MMA_ROW_BYTES + hf * 32 * 16);
    unsigned xa[4], xb[4];  // byte offset within an 8-chunk group for u = kk & 3 (resp. np & 3)
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        xa[u] = (unsigned)((((2 * u) + (li >> 1)) ^ r8) << 4);  // Q (A) and C for PV (B, .trans)
        xb[u] = (unsigned)((((2 * u) + (li & 1)) ^ r8) << 4);   // C for S (B)
    }

    // Rows of this thread in every accumulator: head 16 rg + g (index 0) and 16 rg + g + 8 (index 1).
    float m_run[2] = {neg_inf(), neg_inf()};  // running max of the scaled scores
    float l_run[2] = {0.f, 0.f};              // running sum of exp(score - m_run)
    float o[32][4];  // n-tile n: columns 256 hf + 8 n + 2 q4 + (e & 1), row index e >> 1
#pragma unroll
    for (int n = 0; n < 32; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.f;

    for (int it = 0; it < ntiles; ++it) {
        const int j0 = start + it * MMA_TILE;
        // Slot validity of this tile (lane l: slot j0 + l), warp-uniform bit mask.
        unsigned vmask;
        if constexpr (AHEAD) {
            vmask = __ballot_sync(FULL_MASK, v_tok >= 0);
            v_tok = tok_of(it + 1);
        } else {
            const int jl = j0 + lane;
            const bool vl = jl < end && ld_nc_s32(sel_m + jl) >= 0;
            vmask = __ballot_sync(FULL_MASK, vl);
        }

        // Groups committed so far: (STAGES - 1) + it; at most STAGES - 2 pending => tile it landed.
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile it visible to all; every warp is done with tile it - 1's buffer
        if constexpr (AHEAD) {
            const int b = (it + STAGES - 1) % STAGES;
            if (it + STAGES - 1 < ntiles) {  // block-uniform: every lane takes part in the shuffles
                if constexpr (FP8)
                    issue_resolved_codes(sCodes + b * MMA_CODE_TILE_BYTES, sScale + b * MMA_TILE,
                                         static_cast<const unsigned char*>(arena), row_scale, r_page, r_off,
                                         page_size);
                else
                    issue_resolved_rows(sC + b * (MMA_TILE * SMLA_DIM), static_cast<const bf16*>(arena), r_page,
                                        r_off, page_size);
            }
            // one tile further: the token of tile it + STAGES + 1, and the page of tile it + STAGES
            // (its token came during the last compute)
            const int t_next = tok_of(it + STAGES + 1);
            r_page = page_of(n_tok);
            r_off = n_tok >= 0 ? n_tok % page_size : 0;
            n_tok = t_next;
        } else if (it + STAGES - 1 < ntiles) {
            issue((it + STAGES - 1) % STAGES, j0 + (STAGES - 1) * MMA_TILE);
        }
        cp_async_commit();  // always: keeps the group count = STAGES - 1 + it + 1

        // The row scale of each of this thread's slots 8 j + 2 q4 + b (FP8; 1 for BF16), and its
        // inverse for the row sum (0 for an invalid slot, whose scale is 0 and p is 0).
        float sc[4][2], inv_sc[4][2];
        unsigned buf;
        if constexpr (FP8) {
            widen_tile(sCodes + (it % STAGES) * MMA_CODE_TILE_BYTES, sC);
            const float* tile_scale = sScale + (it % STAGES) * MMA_TILE;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 v = *reinterpret_cast<const float2*>(tile_scale + 8 * j + 2 * q4);
                sc[j][0] = v.x;
                sc[j][1] = v.y;
#pragma unroll
                for (int b = 0; b < 2; ++b)
                    inv_sc[j][b] = ((vmask >> (8 * j + 2 * q4 + b)) & 1u) ? 1.f / sc[j][b] : 0.f;
            }
            __syncthreads();  // the widened tile visible to all
            buf = sC_addr;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int b = 0; b < 2; ++b) sc[j][b] = inv_sc[j][b] = 1.f;
            buf = sC_addr + (unsigned)((it % STAGES) * MMA_TILE_BYTES);
        }

        // ---- S[16 x 32] = Q[rows] . C^T over k = 512 (32 k-steps) --------------------------------
        float sacc[4][4];  // n-tile j: slots 8 j + 2 q4 + (e & 1), row index e >> 1
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sacc[j][e] = 0.f;
        {
            const unsigned c_lo = buf + s_row;                        // slots 0..15
            const unsigned c_hi = c_lo + 16 * MMA_ROW_BYTES;          // slots 16..31
#pragma unroll 2
            for (int kb = 0; kb < 8; ++kb) {  // logical chunks 8 kb .. 8 kb + 7 (k = 64 kb ..)
#pragma unroll
                for (int u = 0; u < 4; ++u) {  // k-step kk = 4 kb + u: chunks 8 kb + 2 u, + 1
                    unsigned a[4], b[4];
                    ldsm_x4(q_row + kb * 128 + xa[u], a);
                    ldsm_x4(c_lo + kb * 128 + xb[u], b);
                    mma_bf16(sacc[0], a, b[0], b[1]);
                    mma_bf16(sacc[1], a, b[2], b[3]);
                    ldsm_x4(c_hi + kb * 128 + xb[u], b);
                    mma_bf16(sacc[2], a, b[0], b[1]);
                    mma_bf16(sacc[3], a, b[2], b[3]);
                }
            }
        }

        // ---- online softmax (rows g, g + 8 of the row group; a row lives in one quad) ------------
        unsigned pa[2][4];  // P as the A operand of the two PV k-steps (layout in the header)
        {
            float mt[2] = {neg_inf(), neg_inf()};
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int slot = 8 * j + 2 * q4 + (e & 1);
                    // FP8: (softmax scale x row scale) x (q . code); BF16: scale x (q . c)
                    const float f = FP8 ? scale * sc[j][e & 1] : scale;
                    const float v = ((vmask >> slot) & 1u) ? f * sacc[j][e] : neg_inf();
                    sacc[j][e] = v;
                    mt[e >> 1] = fmaxf(mt[e >> 1], v);
                }
            float alpha[2], mn[2];
            bool none[2];
            quad_row_max(mt, m_run, mn, none, alpha);
            float p[4][4];  // FP8: the weight p x row scale that multiplies the codes
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {  // invalid slot: exp(-inf) = 0
                    const float pe = none[e >> 1] ? 0.f : __expf(sacc[j][e] - mn[e >> 1]);
                    p[j][e] = FP8 ? pe * sc[j][e & 1] : pe;
                }
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                pa[kk][0] = pack_bf16x2(p[2 * kk][0], p[2 * kk][1]);          // row g,     slots 16kk + 2q4
                pa[kk][1] = pack_bf16x2(p[2 * kk][2], p[2 * kk][3]);          // row g + 8, slots 16kk + 2q4
                pa[kk][2] = pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);  // row g,     slots 16kk + 8 + 2q4
                pa[kk][3] = pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);  // row g + 8, slots 16kk + 8 + 2q4
            }
            // The row sums add the bf16-rounded weights the PV product uses (numerator and
            // denominator with the same weights; FP8: each divided by its row scale again).
            float ls[2];
            if constexpr (FP8) {
                ls[0] = ls[1] = 0.f;
#pragma unroll
                for (int kk = 0; kk < 2; ++kk)
#pragma unroll
                    for (int r = 0; r < 2; ++r) {  // pa[kk][r]: n-tile 2 kk; pa[kk][r + 2]: n-tile 2 kk + 1
                        ls[r] += bf_lo(pa[kk][r]) * inv_sc[2 * kk][0] + bf_hi(pa[kk][r]) * inv_sc[2 * kk][1] +
                                 bf_lo(pa[kk][r + 2]) * inv_sc[2 * kk + 1][0] +
                                 bf_hi(pa[kk][r + 2]) * inv_sc[2 * kk + 1][1];
                    }
            } else {
                ls[0] = bf_lo(pa[0][0]) + bf_hi(pa[0][0]) + bf_lo(pa[0][2]) + bf_hi(pa[0][2]) +
                        bf_lo(pa[1][0]) + bf_hi(pa[1][0]) + bf_lo(pa[1][2]) + bf_hi(pa[1][2]);
                ls[1] = bf_lo(pa[0][1]) + bf_hi(pa[0][1]) + bf_lo(pa[0][3]) + bf_hi(pa[0][3]) +
                        bf_lo(pa[1][1]) + bf_hi(pa[1][1]) + bf_lo(pa[1][3]) + bf_hi(pa[1][3]);
            }
            quad_row_sum(ls, alpha, mn, l_run, m_run);
#pragma unroll
            for (int n = 0; n < 32; ++n) {
                o[n][0] *= alpha[0];
                o[n][1] *= alpha[0];
                o[n][2] *= alpha[1];
                o[n][3] *= alpha[1];
            }
        }

        // ---- O[16 x 256] += P[16 x 32] . C[32 x 256] (2 k-steps x 16 pairs of dim n-tiles) --------
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            const unsigned v_base = buf + v_row + kk * 16 * MMA_ROW_BYTES;  // tokens 16 kk ..
#pragma unroll
            for (int np = 0; np < 16; ++np) {  // dims 256 hf + 16 np .. + 15: logical chunks 32 hf + 2 np, + 1
                unsigned b[4];
                ldsm_x4_t(v_base + (np >> 2) * 128 + xa[np & 3], b);
                mma_bf16(o[2 * np], pa[kk], b[0], b[1]);
                mma_bf16(o[2 * np + 1], pa[kk], b[2], b[3]);
            }
        }
    }
    cp_async_wait<0>();  // nothing in flight at exit (ntiles = 0: the q copies)

    // ---- partial state out ---------------------------------------------------------------------------
    const size_t ms = (size_t)m * (size_t)splits + (size_t)s;
    const int h0 = 16 * rg + g;  // and h0 + 8
    if (hf == 0 && q4 == 0) st_part_ml(part_ml, ms, h0, m_run, l_run);
    float* row0 = part_acc + (ms * SMLA_HEADS + (size_t)h0) * SMLA_DIM + 256 * hf + 2 * q4;
    float* row1 = row0 + 8 * SMLA_DIM;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
        st_v2_f32(row0 + 8 * n, o[n][0], o[n][1]);
        st_v2_f32(row1 + 8 * n, o[n][2], o[n][3]);
    }
}

#endif  // SPARSE_MLA_SPLIT_MMA_CUH
