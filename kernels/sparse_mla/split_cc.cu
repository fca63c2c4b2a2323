/*
Sparse MLA decode, design split_cc: CUDA cores (FP32 FMA), split-K over the selection, then a
combine kernel. The op and the index conventions: sparse_mla_common.cuh.

sparse_mla_split_cc: grid (splits, M), block 256, SPARSE_MLA_SPLIT_SMEM_BYTES of dynamic shared
    memory (the launcher sets the opt-in). CTA (s, m) handles slots [s * W / splits,
    (s + 1) * W / splits) of row m (a multiple of 32 slots; a ragged last tile would be masked
    anyway). Split-K because M = 32 streams alone fill only 32 of 132 SMs: every CTA owns the 64
    heads of one stream (q[m] staged once, 64 KiB) over a slice of the selection, and writes its
    unnormalised partial state (running max, sum of exp, exp-weighted sum of rows) per head:
        part_ml [((m * splits + s) * 64 + h) * 2 + 0] = max of its scaled scores (-inf if none valid)
        part_ml [((m * splits + s) * 64 + h) * 2 + 1] = sum over its valid slots of exp(score - max)
        part_acc[((m * splits + s) * 64 + h) * 512 + d] = sum of exp(score - max) * c_j[d]
    every element every launch (zeros / -inf when the chunk has no valid slot).
    Per tile of 32 slots (32 KiB bf16, cp.async, double-buffered, invalid slots zero-filled):
    scores[32][64] into shared memory (each thread 2 heads x 4 slots of 512-long dot products),
    online softmax per head (4 threads a head), then acc[64][512] += p[h][t] c[t][:] with the
    accumulator in registers (each thread 8 heads x 16 columns = 128 floats).
sparse_mla_combine: grid M * 64 (one block per (m, h)), block 128 (4 columns a thread). Merges the
    splits' partial states: gmax = max_s max_s, L = sum_s sum_s exp(max_s - gmax),
    out = sum_s part_acc_s exp(max_s - gmax) / L (bf16, round to nearest even), lse = gmax + log L;
    no valid slot at all: out = 0, lse = -inf. A plain launch after the split kernel on one stream.

Shared-memory layout of the split kernel (bytes):
    sQ  [64][512] bf16   65536   q[m]; 16-byte chunk c of head h stored at chunk c ^ ((h >> 1) & 7)
    sC  [2][32][512] bf16 65536  the two tile buffers; chunk c of tile row t at chunk c ^ (t & 7)
    sS  [32][68] float    8704   scores, then p, slot-major (row t: the 64 heads, 4 floats padding)
    sA  [64] float         256   the per-head rescale factor of the current tile
The XOR swizzles make every 16-byte shared read of both phases conflict-free (see the phases).
*/

#include "sparse_mla_common.cuh"

#define SPLIT_THREADS 256
#define TILE_SLOTS 32  // selected rows per tile
#define S_STRIDE 68    // floats per row of sS: multiple of 4 (float4 reads), not of 32 (banks)

#define SQ_BYTES (SMLA_HEADS * SMLA_DIM * 2)                // 65536
#define SC_BYTES (2 * TILE_SLOTS * SMLA_DIM * 2)            // 65536
#define SS_BYTES (TILE_SLOTS * S_STRIDE * 4)                // 8704
#define SA_BYTES (SMLA_HEADS * 4)                           // 256
// Dynamic shared memory the launcher must give sparse_mla_split_cc (a literal for the Python side):
// 65536 + 65536 + 8704 + 256 = 140032 bytes (137 KiB; the opt-in limit is 227 KiB).
#define SPARSE_MLA_SPLIT_SMEM_BYTES 140032
static_assert(SQ_BYTES + SC_BYTES + SS_BYTES + SA_BYTES == SPARSE_MLA_SPLIT_SMEM_BYTES, "smem layout");
static_assert(SPLIT_THREADS == SMLA_HEADS * 4, "softmax: 4 threads a head");
static_assert(SPLIT_THREADS == 32 * 8 && SMLA_HEADS == 8 * 8, "PV: warp w owns heads 8w .. 8w+7");

__device__ __forceinline__ uint4 lds128(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }

extern "C" __global__ void __launch_bounds__(SPLIT_THREADS, 1)
sparse_mla_split_cc(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                    const int* __restrict__ page_table, const int* __restrict__ selection,
                    float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                    int pages_per_stream, int page_size, int splits, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    if (dynamic_smem_bytes() < SPARSE_MLA_SPLIT_SMEM_BYTES) __trap();
    bf16* sQ = reinterpret_cast<bf16*>(smem);
    bf16* sC = reinterpret_cast<bf16*>(smem + SQ_BYTES);
    float* sS = reinterpret_cast<float*>(smem + SQ_BYTES + SC_BYTES);
    float* sA = reinterpret_cast<float*>(smem + SQ_BYTES + SC_BYTES + SS_BYTES);

    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block
    const int tid = threadIdx.x;
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int ntiles = (end - start + TILE_SLOTS - 1) / TILE_SLOTS;
    const int* sel_m = selection + (size_t)m * (size_t)W;

    // q[m] -> sQ (16 chunks a thread), in the first commit group with tile 0.
    {
        const bf16* qm = q + (size_t)m * SMLA_HEADS * SMLA_DIM;
#pragma unroll
        for (int i = 0; i < (SMLA_HEADS * SMLA_ROW_CHUNKS) / SPLIT_THREADS; ++i) {
            const int idx = tid + SPLIT_THREADS * i;
            const int h = idx >> 6, c = idx & 63;
            cp_async16_zfill(sQ + h * SMLA_DIM + ((c ^ ((h >> 1) & 7)) * 8), qm + h * SMLA_DIM + c * 8, 16u);
        }
    }
    if (ntiles > 0) issue_tile_rows<TILE_SLOTS, SPLIT_THREADS>(sC, arena, page_table, sel_m, m, start, end, pages_per_stream, page_size);
    cp_async_commit();
    if (ntiles > 1)
        issue_tile_rows<TILE_SLOTS, SPLIT_THREADS>(sC + TILE_SLOTS * SMLA_DIM, arena, page_table, sel_m, m, start + TILE_SLOTS, end,
                   pages_per_stream, page_size);
    cp_async_commit();

    // Scores phase ownership: heads 2 hg, 2 hg + 1; slots tg + 8 i (i < 4).
    const int hg = tid >> 3, tg = tid & 7;
    const int qkey = hg & 7;  // the sQ swizzle key of both heads ((2 hg) >> 1 = (2 hg + 1) >> 1 = hg)
    // Softmax ownership: head sh, slots 8 sp .. 8 sp + 7.
    const int sh = tid >> 2, sp = tid & 3;
    // PV ownership: heads 8 pw .. 8 pw + 7, columns 8 pl .. 8 pl + 7 and 256 + 8 pl .. 256 + 8 pl + 7.
    const int pw = tid >> 5, pl = tid & 31;

    float m_run = neg_inf(), l_run = 0.f;  // head sh's running max and sum (identical in its 4 threads)
    float acc[8][16];
#pragma unroll
    for (int a = 0; a < 8; ++a)
#pragma unroll
        for (int e = 0; e < 16; ++e) acc[a][e] = 0.f;

    for (int it = 0; it < ntiles; ++it) {
        bf16* buf = sC + (it & 1) * (TILE_SLOTS * SMLA_DIM);
        const int j0 = start + it * TILE_SLOTS;
        // Groups committed so far: 2 + it; all but the newest one are complete => tile it landed.
        cp_async_wait<1>();
        __syncthreads();

        // ---- scores: s[h][t] = scale * q[h] . c[t] ----------------------------------------------
        // Bank check (16-byte reads, a quarter-warp = 8 lanes): the 8 lanes of a quarter-warp
        // share hg (q: one broadcast address; the 4 quarter-warps' heads differ in qkey, so their
        // 4 addresses sit in 4 different bank groups) and read rows tg + 8 i for tg = 0..7 at
        // physical chunk (k ^ tg): 8 distinct bank groups. One wavefront per read.
        {
            bool valid[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int j = j0 + tg + 8 * i;
                valid[i] = j < end && ld_nc_s32(sel_m + j) >= 0;
            }
            float sc[2][4];
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int i = 0; i < 4; ++i) sc[a][i] = 0.f;
            const bf16* q0 = sQ + (2 * hg) * SMLA_DIM;
            const bf16* q1 = q0 + SMLA_DIM;
            const bf16* cr = buf + tg * SMLA_DIM;  // row tg; row tg + 8 i at + 8 i rows
#pragma unroll 1
            for (int kb = 0; kb < SMLA_ROW_CHUNKS; kb += 8) {
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    // logical chunk kb + u; kb is a multiple of 8, so (kb + u) ^ key = kb + (u ^ key)
                    const int qc = (kb + (u ^ qkey)) * 8;
                    const int cc = (kb + (u ^ tg)) * 8;
                    float qf0[8], qf1[8];
                    unpack8(lds128(q0 + qc), qf0);
                    unpack8(lds128(q1 + qc), qf1);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        float cf[8];
                        unpack8(lds128(cr + 8 * i * SMLA_DIM + cc), cf);
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            sc[0][i] = fmaf(qf0[e], cf[e], sc[0][i]);
                            sc[1][i] = fmaf(qf1[e], cf[e], sc[1][i]);
                        }
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int t = tg + 8 * i;
                sS[t * S_STRIDE + 2 * hg] = valid[i] ? scale * sc[0][i] : neg_inf();
                sS[t * S_STRIDE + 2 * hg + 1] = valid[i] ? scale * sc[1][i] : neg_inf();
            }
        }
        __syncthreads();

        // ---- online softmax, head sh, slots 8 sp .. 8 sp + 7 (4 threads a head) ----------------
        {
            float sv[8];
            float mt = neg_inf();
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                sv[k] = sS[(8 * sp + k) * S_STRIDE + sh];
                mt = fmaxf(mt, sv[k]);
            }
            // The 4 threads of a head are lanes 4 x .. 4 x + 3 of one warp: xor 1 and 2 stay inside.
            mt = fmaxf(mt, __shfl_xor_sync(FULL_MASK, mt, 1));
            mt = fmaxf(mt, __shfl_xor_sync(FULL_MASK, mt, 2));
            const float m_new = fmaxf(m_run, mt);
            // Nothing valid so far (m_new = -inf): exp(-inf - -inf) would be NaN; acc and l are 0,
            // so any finite factor is right, and every p is 0.
            const bool none = m_new == neg_inf();
            const float alpha = none ? 1.f : __expf(m_run - m_new);  // m_run = -inf -> 0
            float ls = 0.f;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const float p = none ? 0.f : __expf(sv[k] - m_new);  // invalid slot: exp(-inf) = 0
                sS[(8 * sp + k) * S_STRIDE + sh] = p;
                ls += p;
            }
            ls += __shfl_xor_sync(FULL_MASK, ls, 1);
            ls += __shfl_xor_sync(FULL_MASK, ls, 2);
            l_run = l_run * alpha + ls;
            m_run = m_new;
            if (sp == 0) sA[sh] = alpha;
        }
        __syncthreads();

        // ---- acc[h][d] = alpha[h] acc[h][d] + sum_t p[h][t] c[t][d] --------------------------------
        // Bank check: all lanes read the same p (broadcast float4s); row t's chunks pl ^ (t & 7) and
        // (pl ^ (t & 7)) + 32 over the 32 lanes are 32 distinct chunks: 512 B in 4 wavefronts.
        {
            const float4 a0 = *reinterpret_cast<const float4*>(sA + 8 * pw);
            const float4 a1 = *reinterpret_cast<const float4*>(sA + 8 * pw + 4);
            const float al[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
            for (int a = 0; a < 8; ++a)
#pragma unroll
                for (int e = 0; e < 16; ++e) acc[a][e] *= al[a];
#pragma unroll 1
            for (int tb = 0; tb < TILE_SLOTS; tb += 8) {
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int t = tb + u;  // t & 7 == u
                    const float4 p0 = *reinterpret_cast<const float4*>(sS + t * S_STRIDE + 8 * pw);
                    const float4 p1 = *reinterpret_cast<const float4*>(sS + t * S_STRIDE + 8 * pw + 4);
                    const float p[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
                    const int ch = pl ^ u;  // < 32, so chunk pl + 32 sits at ch + 32
                    float c0[8], c1[8];  // columns 8 pl + e and 256 + 8 pl + e
                    unpack8(lds128(buf + t * SMLA_DIM + ch * 8), c0);
                    unpack8(lds128(buf + t * SMLA_DIM + (ch + 32) * 8), c1);
#pragma unroll
                    for (int a = 0; a < 8; ++a)
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            acc[a][e] = fmaf(p[a], c0[e], acc[a][e]);
                            acc[a][8 + e] = fmaf(p[a], c1[e], acc[a][8 + e]);
                        }
                }
            }
        }
        // Everyone is done with buf and sS before the copy below overwrites buf (and before the
        // next tile's scores overwrite sS).
        __syncthreads();
        if (it + 2 < ntiles)
            issue_tile_rows<TILE_SLOTS, SPLIT_THREADS>(buf, arena, page_table, sel_m, m, j0 + 2 * TILE_SLOTS, end, pages_per_stream, page_size);
        cp_async_commit();  // always, possibly empty: keeps the group count = 2 + it + 1
    }
    cp_async_wait<0>();  // nothing in flight at exit (ntiles = 0: the q copies)

    // ---- partial state out -------------------------------------------------------------------------
    const size_t ms = (size_t)m * (size_t)splits + (size_t)s;
    if (sp == 0) {
        part_ml[(ms * SMLA_HEADS + sh) * 2 + 0] = m_run;
        part_ml[(ms * SMLA_HEADS + sh) * 2 + 1] = l_run;
    }
#pragma unroll
    for (int a = 0; a < 8; ++a) {
        float* row = part_acc + (ms * SMLA_HEADS + (size_t)(8 * pw + a)) * SMLA_DIM;
        st_v4_f32(row + 8 * pl, acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        st_v4_f32(row + 8 * pl + 4, acc[a][4], acc[a][5], acc[a][6], acc[a][7]);
        st_v4_f32(row + 256 + 8 * pl, acc[a][8], acc[a][9], acc[a][10], acc[a][11]);
        st_v4_f32(row + 256 + 8 * pl + 4, acc[a][12], acc[a][13], acc[a][14], acc[a][15]);
    }
}

// sparse_mla_combine (exported by this module): sparse_mla_combine.cuh.
#include "sparse_mla_combine.cuh"
