/*
Sparse MLA decode (GLM-5.3-Flash, absorbed NoPE MLA over a token selection): the op, its index
conventions and the helpers every design in this folder shares. Each design is one .cu beside this
header; NOTES.md has the model point's bytes and FLOPs and what each design reaches.

The op, per stream m (one query token), float32 arithmetic inside every kernel:
    q[m]        : [64 heads][512] bf16 (the absorbed query, NoPE only)
    sel[m]      : W int32 slots (W = 2112 in the model: 2048 + tail), padded with -1; W % 64 == 0.
                  A slot < 0 is never read and contributes nothing.
    c_j         : the latent row of slot j's token t = sel[m][j]:
                  arena[row_of(page_table, m, t, pages_per_stream, page_size)][0..511]
    score_{h,j} = scale * sum_d q[m,h,d] c_j[d]
    p           = softmax over the valid slots of row m (per head)
    out[m,h,:]  = sum_j p_{h,j} c_j                 (bf16, round to nearest even)
    lse[m,h]    = log(sum_j exp(score_{h,j}))       (natural log of the scaled scores)
    A row with no valid slot: out = 0, lse = -inf.

Layouts (row-major, contiguous, no padding):
    q          [M][64][512] bf16        arena      [rows_total][512] bf16 (1024 bytes a row)
    selection  [M][W] int32             page_table [M][pages_per_stream] int32
    out        [M][64][512] bf16        lse        [M][64] float32
Token t of stream m lives at arena row page_table[m * pages_per_stream + t / page_size] * page_size
+ t % page_size (row_of below). Row offsets are size_t: rows_total * 1024 can pass 2^31.

bf16 is handled by bit manipulation (no <cuda_bf16.h>, no header at all) so NVRTC, which gets no
include path, compiles every file of this folder as is.
*/
#ifndef SPARSE_MLA_COMMON_CUH
#define SPARSE_MLA_COMMON_CUH
#include "../common/device.cuh"  // neg_inf, bf_lo / bf_hi, pack_bf16x2, smem_addr, dynamic_smem_bytes, cp_async_commit / _wait

typedef unsigned short bf16;  // raw bf16 bits
// Same type as the builtin size_t (redeclaring a typedef to the same type is legal), so the file
// does not depend on whether NVRTC predeclares it.
typedef decltype(sizeof(0)) size_t;

#define SMLA_HEADS 64      // query heads per stream
#define SMLA_DIM 512       // latent width (bf16 elements per arena row)
#define SMLA_ROW_CHUNKS 64 // 16-byte chunks per arena / q row (512 * 2 / 16)
#define FULL_MASK 0xffffffffu

// ------------------------------------------------------------------------------------------------
// bf16 <-> float by bit manipulation (bf_lo / bf_hi: ../common/device.cuh).

__device__ __forceinline__ float bf2f(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }

// 8 bf16 of one 16-byte word -> 8 floats, in element order.
__device__ __forceinline__ void unpack8(const uint4& r, float (&f)[8]) {
    f[0] = bf_lo(r.x); f[1] = bf_hi(r.x);
    f[2] = bf_lo(r.y); f[3] = bf_hi(r.y);
    f[4] = bf_lo(r.z); f[5] = bf_hi(r.z);
    f[6] = bf_lo(r.w); f[7] = bf_hi(r.w);
}

// ------------------------------------------------------------------------------------------------
// Read-only global loads (ld.global.nc: the non-coherent read-only path; nothing in a launch
// writes q, the arena, the selection or the page table). Not volatile: the compiler may schedule
// them freely (several rows' loads in flight before the first use).

__device__ __forceinline__ int ld_nc_s32(const int* p) {
    int r;
    asm("ld.global.nc.s32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ float ld_nc_f32(const float* p) {
    float r;
    asm("ld.global.nc.f32 %0, [%1];" : "=f"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

// 16-byte global stores as one instruction (NVVM may split a struct store into 32-bit ones).
__device__ __forceinline__ void st_v4_f32(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d));
}

__device__ __forceinline__ void st_v2_b32(void* p, unsigned a, unsigned b) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b));
}

// ------------------------------------------------------------------------------------------------
// Paged arena: the arena row of token position t of stream m (t >= 0; the caller filters -1).

__device__ __forceinline__ size_t row_of(const int* page_table, int m, int t, int pages_per_stream,
                                         int page_size) {
    const int page = ld_nc_s32(page_table + (size_t)m * (size_t)pages_per_stream + (size_t)(t / page_size));
    return (size_t)page * (size_t)page_size + (size_t)(t % page_size);
}

// Slot j of a stream's chunk [.., end): true and its arena row when j < end and the slot holds a
// token (>= 0); false for a slot past the chunk or an empty one (-1), which is never read.
__device__ __forceinline__ bool slot_row(const int* __restrict__ sel_m, const int* __restrict__ page_table, int m,
                                         int j, int end, int pages_per_stream, int page_size, size_t& row) {
    if (j >= end) return false;
    const int t = ld_nc_s32(sel_m + j);
    if (t < 0) return false;
    row = row_of(page_table, m, t, pages_per_stream, page_size);
    return true;
}

// ------------------------------------------------------------------------------------------------
// cp.async: 16-byte global -> shared copies that complete per commit group.

// Copies src_bytes (16 or 0) bytes and zero-fills the rest of the 16: an invalid slot becomes a
// zero row without a separate shared store. .cg: bypass L1 (each row is read once per CTA).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, unsigned src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

// ROWS selected rows of one stream's chunk [j0, end) into a tile buffer by cp.async (split_cc and
// split_mma share it). Thread tid copies 16-byte chunk c = tid & 63 of rows r = (tid >> 6) + 4 i:
// a warp covers 512 contiguous bytes of one row. Chunk c of row r lands at (c ^ (r & 7)) so the
// 16-byte reads of either product are bank-conflict-free. Slots past the chunk end or holding -1
// are zero-filled (never read from global memory).
template <int ROWS, int THREADS>
__device__ __forceinline__ void issue_tile_rows(bf16* buf, const bf16* __restrict__ arena,
                                                const int* __restrict__ page_table,
                                                const int* __restrict__ sel_m, int m, int j0, int end,
                                                int pages_per_stream, int page_size) {
    static_assert(THREADS == 256, "the chunk / row split assumes 4 rows of 64 chunks per pass");
    const int c = threadIdx.x & 63;
#pragma unroll
    for (int i = 0; i < (ROWS * SMLA_ROW_CHUNKS) / THREADS; ++i) {
        const int r = (threadIdx.x >> 6) + 4 * i;
        const bf16* src = arena;  // a valid address; with 0 source bytes nothing is read
        unsigned bytes = 0u;
        size_t row;
        if (slot_row(sel_m, page_table, m, j0 + r, end, pages_per_stream, page_size, row)) {
            src = arena + row * SMLA_DIM + c * 8;
            bytes = 16u;
        }
        cp_async16_zfill(buf + r * SMLA_DIM + ((c ^ (r & 7)) << 3), src, bytes);
    }
}

// ------------------------------------------------------------------------------------------------
// FP8 latent (latent_dtype fp8): codes [rows_total][512] e4m3 (one byte a channel) and one FP32
// scale a row, [rows_total] float (kernels/fp8.py: value = e4m3(code) x scale).

#define SMLA_CODE_ROW_BYTES 512   // e4m3 codes of one row
#define SMLA_CODE_ROW_CHUNKS 32   // 16-byte chunks of codes a row

// 4-byte cp.async (the .ca form: .cg takes 16 bytes only); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, unsigned src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
}

// ROWS selected rows' codes and scales of one stream's chunk [j0, end) by cp.async. Thread tid
// copies 16-byte chunk c = tid & 31 of rows r = (tid >> 5) + 8 i (a warp: one row's 512
// contiguous bytes), unswizzled: codes_buf + r * 512; the lane with c == 0 also copies the row's
// scale into scale_buf[r]. Slots past the chunk end or holding -1: zero codes and a zero scale
// (never read from global memory).
template <int ROWS, int THREADS>
__device__ __forceinline__ void issue_tile_codes(unsigned char* codes_buf, float* scale_buf,
                                                 const unsigned char* __restrict__ codes,
                                                 const float* __restrict__ row_scale,
                                                 const int* __restrict__ page_table,
                                                 const int* __restrict__ sel_m, int m, int j0, int end,
                                                 int pages_per_stream, int page_size) {
    static_assert(THREADS == 256, "the chunk / row split assumes 8 rows of 32 chunks per pass");
    const int c = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < (ROWS * SMLA_CODE_ROW_CHUNKS) / THREADS; ++i) {
        const int r = (threadIdx.x >> 5) + 8 * i;
        const unsigned char* src = codes;  // valid addresses; with 0 source bytes nothing is read
        const float* scale_src = row_scale;
        unsigned bytes = 0u;
        size_t row;
        if (slot_row(sel_m, page_table, m, j0 + r, end, pages_per_stream, page_size, row)) {
            src = codes + row * SMLA_CODE_ROW_BYTES + c * 16;
            scale_src = row_scale + row;
            bytes = 16u;
        }
        cp_async16_zfill(codes_buf + r * SMLA_CODE_ROW_BYTES + c * 16, src, bytes);
        if (c == 0) cp_async4_zfill(scale_buf + r, scale_src, bytes ? 4u : 0u);
    }
}

// Two e4m3 codes (the lower-addressed one in the low byte) -> two bf16 (the first in the low half),
// exactly: cvt.rn.f16x2.e4m3x2 (sm_89+) widens the lower byte into the lower half; every e4m3 value
// is a normal f16 (or zero), so cvt.f32.f16 is exact and no flush-to-zero applies; an f32 with at
// most 3 mantissa bits is its own bf16 (the upper 16 bits). NaN codes are never stored.
__device__ __forceinline__ unsigned e4m3x2_to_bf16x2(unsigned two) {
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)(two & 0xFFFFu)));
    float lo, hi;
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((unsigned short)(h & 0xFFFFu)));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((unsigned short)(h >> 16)));
    return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// ------------------------------------------------------------------------------------------------
// mbarriers (CUTLASS include/cutlass/arch/barrier.h ClusterBarrier, CTA scope; sm_90 PTX) and the
// bulk tensor copy that completes on one (split_wgmma_ws.cu's ring, gather.cu's sparse_gather_tma).
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Release (the default .release.cta): this thread's prior memory accesses happen before the phase
// completes for every waiter.
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` has completed (acquire).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
// Arrive (as mbar_arrive) and add `bytes` to the phase's expected transaction count: the phase
// completes when every arrival is in and that many bytes have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// One box of a 2-D tensor map (CUtensorMap, kernels/tma.py; tmap: its generic address in global
// memory) at coordinates (c0 innermost, c1) into shared memory at dst, its bytes counted on bar.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* tmap, int c0, int c1, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

#endif  // SPARSE_MLA_COMMON_CUH
