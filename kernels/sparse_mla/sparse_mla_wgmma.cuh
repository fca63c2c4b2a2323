/*
The warpgroup-MMA helpers of the sparse MLA wgmma designs (split_wgmma.cu, split_wgmma_ws.cu): the
128-byte swizzle placement of a [rows][512] 16-bit tile, the SWIZZLE_128B descriptor, the wgmma
fences and operand pins, the three wgmma shapes (m64n64k16 / m64n32k16 SS, m64n256k16 RS with the
transposed B) for BF16 and, for the FP8 latent widened to f16, the same shapes over f16, and the
selection -> page -> arena row steps. split_wgmma.cu's header documents the layouts and the
fragments; everything here is compiled only where the build targets sm_90a.
*/
#ifndef SPARSE_MLA_WGMMA_CUH
#define SPARSE_MLA_WGMMA_CUH

#include "sparse_mla_split_mma.cuh"  // common, st_v2_f32

#if defined(SPARSE_MLA_WGMMA_SM90A) || defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(SPARSE_MLA_WGMMA_UNGUARDED)
#define SPARSE_MLA_WGMMA_ENABLED 1
#endif

#ifdef SPARSE_MLA_WGMMA_ENABLED

// Byte offset of 16-byte chunk c (dims 8 c .. 8 c + 7) of row r in a [64][512] bf16 tile (header).
__device__ __forceinline__ unsigned wg_swz(int r, int c) {
    return (unsigned)((r >> 3) * 8192 + (c >> 3) * 1024 + (r & 7) * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// A SWIZZLE_128B descriptor at shared address addr with the given byte offsets (header).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

#include "../common/wgmma.cuh"  // fence_proxy_async_shared, wgmma_fence / _commit / _wait0

// CUTLASS's warpgroup_fence_operand: pins the registers at this point of the instruction order.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(unsigned (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// d (m64n64 f32) = (acc ? d : 0) + A . B^T, A (64 x 16) and B (64 x 16) bf16 K-major by descriptor.
#define WG_SS_M64N64K16(TY)                                                                                        \
    asm volatile(                                                                                                  \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                               \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                  \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                        \
        "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                                            \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),  \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])   \
        : "l"(da), "l"(db), "r"(acc)                                                                               \
        : "memory");
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], unsigned long long da, unsigned long long db,
                                                   int acc) {
    WG_SS_M64N64K16("bf16")
}
// The same over f16 operands (the FP8 latent widened to f16, q rounded to f16).
__device__ __forceinline__ void wgmma_m64n64k16_ss_f16(float (&d)[32], unsigned long long da, unsigned long long db,
                                                       int acc) {
    WG_SS_M64N64K16("f16")
}

// d (m64n32 f32) = (acc ? d : 0) + A . B^T, as m64n64k16_ss with 32 slots (the 32-slot tile).
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], unsigned long long da, unsigned long long db,
                                                   int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(acc)
        : "memory");
}

// d (m64n256 f32) += A . B, A (64 x 16 bf16) from registers (4 x bf16x2), B (16 x 256) by an
// MN-major descriptor (imm-trans-b = 1).
#define WG_RS_M64N256K16(TY)                                                                                               \
    asm volatile(                                                                                                          \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                                      \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " "                                                       \
        "{"                                                                                                                \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                           \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                                 \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                                 \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                                 \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                                 \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                                 \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                     \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"                   \
        "}, "                                                                                                              \
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                                                                 \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                  \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),            \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),          \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),          \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),          \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),          \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),          \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),          \
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),          \
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),          \
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),          \
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),          \
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),      \
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),  \
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),  \
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])   \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1)                                                      \
        : "memory");
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const unsigned (&a)[4], unsigned long long db) {
    WG_RS_M64N256K16("bf16")
}
// The same over f16 operands (the FP8 latent widened to f16, q rounded to f16).
__device__ __forceinline__ void wgmma_m64n256k16_rs_f16(float (&d)[128], const unsigned (&a)[4], unsigned long long db) {
    WG_RS_M64N256K16("f16")
}

// d (m64n256 f32) += A . B, A (64 x 16 bf16) by a K-major SWIZZLE_128B descriptor (the partner
// warpgroup's P in shared memory, split_wgmma_ws.cu's alternate-tile form), B as the RS form's.
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, "
        "%128, %129, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "n"(1)
        : "memory");
}

// Lane `lane`'s token of slot 32 half + lane of tile `tile` (TILE slots) of the chunk [start, end):
// -1 for an empty slot or one at or past the chunk's end (never loaded).
template <int TILE>
__device__ __forceinline__ int wg_tok(const int* __restrict__ sel_m, int start, int end, int tile, int half, int lane) {
    const int j = start + tile * TILE + 32 * half + lane;
    int t = -1;
    if (j < end) t = ld_nc_s32(sel_m + j);
    return t;
}

// The page of token t (-1 for t < 0, not loaded).
__device__ __forceinline__ int wg_page(const int* __restrict__ pt_m, int t, int page_size) {
    int pg = -1;
    if (t >= 0) pg = ld_nc_s32(pt_m + t / page_size);
    return pg;
}

// The arena row of a slot from its page and token; -1: invalid. An int: rows_total < 2^31 (the
// arena's bytes, not its rows, pass 2^31; the byte offset below is size_t).
__device__ __forceinline__ int wg_row(int page, int t, int page_size) {
    return page >= 0 ? page * page_size + t % page_size : -1;
}

// q[m] [64 heads][512] bf16 into sQ by cp.async in the tile layout (wg_swz), THREADS threads: thread
// tid copies chunk tid % 64 of rows tid / 64 + (THREADS / 64) i (a warp: 512 contiguous bytes of a row).
template <int THREADS>
__device__ __forceinline__ void wg_stage_q(unsigned char* sq, const bf16* __restrict__ q, int m, int tid) {
    const bf16* qm = q + (size_t)m * SMLA_HEADS * SMLA_DIM;
    const int c = tid & 63;
#pragma unroll
    for (int i = 0; i < (SMLA_HEADS * SMLA_ROW_CHUNKS) / THREADS; ++i) {
        const int r = (tid >> 6) + (THREADS / 64) * i;
        cp_async16_zfill(sq + wg_swz(r, c), qm + r * SMLA_DIM + c * 8, 16u);
    }
}

// Bytes from the dynamic shared window's start to its first 1024-aligned address: the swizzle atoms
// need 1024-aligned addresses, so each design places its layout there at run time (nothing relies
// on where the window starts; the launchers give 1024 bytes of slack).
__device__ __forceinline__ unsigned wg_align_pad(unsigned raw_addr) { return (1024u - (raw_addr & 1023u)) & 1023u; }

// The split-K contract's partial state of CTA row ms = m splits + s (split_wgmma.cu header): the
// thread's rows h0 and h0 + 8 (h0 = 16 w + g) of warpgroup wg's O half (o as the m64n256 accumulator,
// times f), and (max, sum) once (both warpgroups hold the same m and l: warpgroup 0's quad leaders).
__device__ __forceinline__ void wg_store_partials(float* __restrict__ part_acc, float* __restrict__ part_ml, size_t ms,
                                                  int h0, int wg, int t4, const float (&m_run)[2],
                                                  const float (&l_run)[2], const float (&o)[128], float f) {
    if (wg == 0 && t4 == 0) st_part_ml(part_ml, ms, h0, m_run, l_run);
    float* row0 = part_acc + (ms * SMLA_HEADS + (size_t)h0) * SMLA_DIM + 256 * wg + 2 * t4;
    float* row1 = row0 + 8 * SMLA_DIM;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
        st_v2_f32(row0 + 8 * n, f * o[4 * n], f * o[4 * n + 1]);
        st_v2_f32(row1 + 8 * n, f * o[4 * n + 2], f * o[4 * n + 3]);
    }
}

// wg_store_partials with part_acc in BF16 (round to nearest even; m and l stay FP32 in part_ml):
// half the bytes of the FP32 partials, which a one-wave launch writes from every CTA at once and its
// combine reads back (NOTES.md, 2026-12-07 evening: 4.8 us of stores and ~7 us of combine at M = 32).
// A quad's four 4-byte stores fill 16 contiguous bytes of a row, the next n the other half of its sector.
__device__ __forceinline__ void wg_store_partials_bf16(bf16* __restrict__ part_acc, float* __restrict__ part_ml,
                                                       size_t ms, int h0, int wg, int t4, const float (&m_run)[2],
                                                       const float (&l_run)[2], const float (&o)[128]) {
    if (wg == 0 && t4 == 0) st_part_ml(part_ml, ms, h0, m_run, l_run);
    bf16* row0 = part_acc + (ms * SMLA_HEADS + (size_t)h0) * SMLA_DIM + 256 * wg + 2 * t4;
    bf16* row1 = row0 + 8 * SMLA_DIM;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
        *reinterpret_cast<unsigned*>(row0 + 8 * n) = pack_bf16x2(o[4 * n], o[4 * n + 1]);
        *reinterpret_cast<unsigned*>(row1 + 8 * n) = pack_bf16x2(o[4 * n + 2], o[4 * n + 3]);
    }
}

// wg_store_partials through shared memory (the bulk-store epilogue): each consumer thread writes its
// part of O into a row-major copy of the CTA's [64][512] partial at `stage` (a shared address), FP32
// (rows PART_PITCH bytes apart) or, with BF16, packed pairs (PART16_PITCH; sparse_mla_combine_bf16p's
// input), and later wg_bulk_store_row copies each row to part_acc with one bulk copy. Why: the
// timeline put the direct epilogue at 4.8 us for 64 scattered 8-byte stores a thread, and BF16
// partials (half the bytes in as many stores) made it 7.1 us, so the stores' count and sectors bound
// there (NOTES.md, 2026-12-07 evening); with the FP32 rows bulk-stored the H200's epilogue went only
// from 4.25 to 4.03 us (ec9fb09), so the 16 MiB binds once the requests are few and linear, and BF16
// halves it. The pads put a warp's 8 rows on distinct banks: FP32 v2 stores on banks 8 g mod 32 (two
// wavefronts for 256 bytes, the least there can be), BF16 4-byte stores on 4 g + t4 (one).
#define PART_PITCH 2080     // 512 x 4 bytes + 32
#define PART16_PITCH 1040   // 512 x 2 bytes + 16
template <bool BF16>
__device__ __forceinline__ void wg_stage_partials(unsigned stage, int h0, int wg, int t4, const float (&o)[128]) {
    constexpr unsigned PITCH = BF16 ? PART16_PITCH : PART_PITCH, EB = BF16 ? 2u : 4u;
    const unsigned row0 = stage + (unsigned)h0 * PITCH + EB * (unsigned)(256 * wg + 2 * t4);
    const unsigned row1 = row0 + 8u * PITCH;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
        if constexpr (BF16) {
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(row0 + 16u * n), "r"(pack_bf16x2(o[4 * n], o[4 * n + 1])) : "memory");
            asm volatile("st.shared.b32 [%0], %1;" ::"r"(row1 + 16u * n), "r"(pack_bf16x2(o[4 * n + 2], o[4 * n + 3])) : "memory");
        } else {
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(row0 + 32u * n), "f"(o[4 * n]), "f"(o[4 * n + 1]) : "memory");
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(row1 + 32u * n), "f"(o[4 * n + 2]), "f"(o[4 * n + 3]) : "memory");
        }
    }
}
// Row r < 64 of the staged partial (wg_stage_partials<BF16>, made visible to the async proxy and
// barriered by the caller) to part_acc row (ms, r) (FP32, or BF16 bits): one bulk copy of 2 or 1 KiB,
// then the wait until its shared-memory source has been read (the CTA may exit then: the global
// writes complete on their own, as CUTLASS's TMA-store epilogues leave them).
template <bool BF16>
__device__ __forceinline__ void wg_bulk_store_row(void* __restrict__ part_acc, size_t ms, unsigned stage, int r) {
    constexpr unsigned PITCH = BF16 ? PART16_PITCH : PART_PITCH, ROW = SMLA_DIM * (BF16 ? 2u : 4u);
    char* dst = reinterpret_cast<char*>(part_acc) + (ms * SMLA_HEADS + (size_t)r) * ROW;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
                 "r"(stage + (unsigned)r * PITCH), "n"(ROW) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// The cooperative forms' combine (split_wgmma.cu's wg_split with CS = WG_COOP, sparse_mla_split_wgmma_coop;
// split_wgmma_ws.cu's async form), run by NT threads of the CTA (tid 0 .. NT - 1, synced by BAR: 0 =
// __syncthreads, else named barrier BAR over the NT): every CTA of row m runs at once (a cooperative launch refuses a grid that cannot), so after writing its
// partials each waits for the row's other splits and merges a 1 / splits share of the row's 64 x 512
// outputs from them in L2: sparse_mla_combine's work spread over the row's CTAs, with no second
// launch. The wait: thread 0 fences the CTA's partial stores and takes a ticket on row_count[m]
// (never reset: launch n's tickets are [n splits, (n + 1) splits), so the row is complete when the
// count reaches the next multiple of splits; 64 bits, because a 32-bit count loses that alignment
// where it wraps unless splits divides 2^32, ~1.3e8 launches of a row at 33 splits: see
// tests/test_sparse_mla_wgmma.py's coop_model), then spins on an acquire load of it (a bounded spin:
// a trap, not a hang, if a CTA never came). The merge is sparse_mla_combine's arithmetic, per float4
// of outputs (gmax a max, L and the sums fmaf chains in split order, an empty split skipped); the
// partials are read by ld.global.cg (L2: other CTAs wrote them in this launch).
__device__ __forceinline__ unsigned long long ld_acquire_u64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
// The spin's way out when a CTA of the row never arrives (a trap, not a hang). Out of line: a trap
// inlined into split_wgmma_ws's consumer region made ptxas serialise every wgmma of the kernel
// (C7512) and spill.
__device__ __noinline__ void wg_coop_timeout() { __trap(); }
// The barrier of the NT threads that merge: __syncthreads (BAR = 0) or named barrier BAR over NT.
template <int NT, int BAR>
__device__ __forceinline__ void wg_coop_sync() {
    if constexpr (BAR == 0)
        __syncthreads();
    else
        named_sync<BAR, NT>();
}
template <int NT, int BAR>
__device__ __forceinline__ void wg_coop_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                                bf16* __restrict__ out, float* __restrict__ lse,
                                                unsigned long long* __restrict__ row_count, int m, int s, int splits, int tid,
                                                float* __restrict__ scratch) {
    wg_coop_sync<NT, BAR>();  // every thread's partial stores issued before thread 0's fence
    if (tid == 0) {
        __threadfence();
        const unsigned long long ticket = atomicAdd(row_count + m, 1ull);
        const unsigned long long want = (ticket / (unsigned long long)splits + 1ull) * (unsigned long long)splits;
        for (unsigned spins = 0; (long long)(ld_acquire_u64(row_count + m) - want) < 0; ++spins) {
            if (spins > (1u << 24)) {  // ~1 s: a CTA of the row never arrived
                if constexpr (BAR == 0)
                    __trap();
                else
                    wg_coop_timeout();  // a named-barrier caller is a warp-specialised kernel (above)
            }
            __nanosleep(64);
        }
        __threadfence();
    }
    wg_coop_sync<NT, BAR>();
    constexpr int Q4 = SMLA_DIM / 4, N4 = SMLA_HEADS * Q4;   // float4s of a row's outputs
    const int e0 = (int)((long long)s * N4 / splits), e1 = (int)((long long)(s + 1) * N4 / splits);
    if (e0 >= e1) return;
    const size_t ms0 = (size_t)m * (size_t)splits;
    // Once a head of this CTA's range (scratch: the ring, free now): gmax, L and each split's weight
    // exp(max - gmax), 0 for an empty split, as sparse_mla_combine computes them; lse by the CTA
    // holding the head's column 0.
    const int h_lo = e0 / Q4, nh = (e1 - 1) / Q4 - h_lo + 1;
    float* wt = scratch;                       // [nh][splits]
    float* hl = scratch + (size_t)nh * splits; // [nh][2]: gmax, L
    for (int i = tid; i < nh; i += NT) {
        const int h = h_lo + i;
        float gmax = neg_inf(), L = 0.f;
        for (int r = 0; r < splits; ++r) gmax = fmaxf(gmax, __ldcg(part_ml + ((ms0 + r) * SMLA_HEADS + h) * 2));
        for (int r = 0; r < splits; ++r) {
            const size_t row = (ms0 + r) * SMLA_HEADS + h;
            const float mx = __ldcg(part_ml + row * 2);
            float f = 0.f;
            if (mx != neg_inf()) {
                f = __expf(mx - gmax);
                L = fmaf(__ldcg(part_ml + row * 2 + 1), f, L);
            }
            wt[(size_t)i * splits + r] = f;
        }
        hl[2 * i] = gmax;
        hl[2 * i + 1] = L;
        if (h * Q4 >= e0) lse[(size_t)m * SMLA_HEADS + h] = gmax == neg_inf() ? neg_inf() : gmax + __logf(L);
    }
    wg_coop_sync<NT, BAR>();
    // Then COOP_BATCH float4s a thread at a time, every split's accumulators of them loaded before
    // they are summed (the merge needs many loads in flight: 8x fewer threads than the combine kernel
    // had); the sums fmaf chains in split order, an empty split (weight 0) skipped.
    constexpr int B = 8;
    for (int e_b = e0 + (int)tid; e_b < e1; e_b += B * NT) {
        float4 a[B];
#pragma unroll
        for (int u = 0; u < B; ++u) a[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r = 0; r < splits; ++r) {
            float4 v[B];
#pragma unroll
            for (int u = 0; u < B; ++u) {
                const int e = e_b + u * NT;
                const int h = e / Q4, d = 4 * (e % Q4);
                v[u] = e < e1 ? __ldcg(reinterpret_cast<const float4*>(part_acc + ((ms0 + r) * SMLA_HEADS + h) * SMLA_DIM + d))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < B; ++u) {
                const int e = e_b + u * NT;
                const float f = e < e1 ? wt[(size_t)(e / Q4 - h_lo) * splits + r] : 0.f;
                if (f == 0.f) continue;   // an empty split (or none at all): its acc is 0
                a[u].x = fmaf(v[u].x, f, a[u].x);
                a[u].y = fmaf(v[u].y, f, a[u].y);
                a[u].z = fmaf(v[u].z, f, a[u].z);
                a[u].w = fmaf(v[u].w, f, a[u].w);
            }
        }
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const int e = e_b + u * NT;
            if (e >= e1) continue;
            const int h = e / Q4, d = 4 * (e % Q4);
            bf16* op = out + ((size_t)m * SMLA_HEADS + h) * SMLA_DIM + d;
            const float gmax = hl[2 * (h - h_lo)], L = hl[2 * (h - h_lo) + 1];
            if (gmax == neg_inf()) {  // no valid slot in the whole row
                st_v2_b32(op, 0u, 0u);
                continue;
            }
            st_v2_b32(op, pack_bf16x2(a[u].x / L, a[u].y / L), pack_bf16x2(a[u].z / L, a[u].w / L));
        }
    }
}

#endif  // SPARSE_MLA_WGMMA_ENABLED
#endif  // SPARSE_MLA_WGMMA_CUH
