/*
Sparse MLA decode, designs split_mma_ahead (BF16 latent) and split_mma_fp8_ahead (FP8 latent):
split_mma / split_mma_fp8 with each tile's selection and page-table reads taken off the tile's
critical path. The kernels are split_mma_body<false, true> and split_mma_body<true, true> of
sparse_mla_split_mma.cuh; sparse_mla_combine: sparse_mla_combine.cuh. The op and the index
conventions: sparse_mla_common.cuh.

Why: in split_mma (AHEAD = false) every thread resolves the rows of the tile it copies right after
the tile's barrier, before the tile's compute: per row a selection load, a branch on it, a
page-table load, then the cp.async (the SASS shows LDG -> BRA -> LDG -> LDGSTS, 8 rows a thread),
so two dependent global round trips per row stand between the barrier and the first HMMA of every
tile, and the tile-validity ballot waits on one more. Here lane l of every warp carries slot l of
three tiles through those reads (NOTES.md "split_mma_ahead"): the token of tile it + STAGES is
loaded at iteration it - 1, its page at iteration it, and its copy issued at iteration it + 1
from registers (broadcast by shuffle to the threads that copy it); the validity tokens run one
tile ahead. No load result is consumed in the iteration that issued it (checked in the SASS: the
three loads' registers are first read at the next iteration).

Grid (splits, M), block 256, the same dynamic shared memory as split_mma / split_mma_fp8 (the
launcher reads the #defines below).
*/

#include "sparse_mla_split_mma.cuh"

#define SPARSE_MLA_SPLIT_MMA_AHEAD_THREADS 256
#define SPARSE_MLA_SPLIT_MMA_AHEAD_SMEM_BYTES 196608
#define SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_THREADS 256
#define SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_SMEM_BYTES 197376
static_assert(MmaLayout<false>::SMEM == SPARSE_MLA_SPLIT_MMA_AHEAD_SMEM_BYTES, "smem layout");
static_assert(MmaLayout<true>::SMEM == SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_SMEM_BYTES, "smem layout");
static_assert(SPARSE_MLA_SPLIT_MMA_AHEAD_THREADS == MMA_THREADS && SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_THREADS == MMA_THREADS,
              "block size");

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_MMA_AHEAD_THREADS, 1)
sparse_mla_split_mma_ahead(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                           const int* __restrict__ page_table, const int* __restrict__ selection,
                           float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                           int pages_per_stream, int page_size, int splits, float scale) {
    split_mma_body<false, true>(q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                                page_size, splits, scale);
}

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_THREADS, 1)
sparse_mla_split_mma_fp8_ahead(const bf16* __restrict__ q, const unsigned char* __restrict__ codes,
                               const float* __restrict__ row_scale, const int* __restrict__ page_table,
                               const int* __restrict__ selection, float* __restrict__ part_acc,
                               float* __restrict__ part_ml, int M, int W, int pages_per_stream, int page_size,
                               int splits, float scale) {
    split_mma_body<true, true>(q, codes, row_scale, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                               page_size, splits, scale);
}
