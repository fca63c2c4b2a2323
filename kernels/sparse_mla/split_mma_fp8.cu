/*
Sparse MLA decode, design split_mma over the FP8 latent (latent_dtype fp8: e4m3 codes [rows][512]
and one FP32 scale a row, kernels/fp8.py): sparse_mla_split_mma_fp8 is split_mma_body<true> of
sparse_mla_split_mma.cuh (the FP8 pipeline, the widening and where the row scale enters are
documented there); sparse_mla_combine: sparse_mla_combine.cuh, the same partials and combine as
the BF16 design. The op and the index conventions: sparse_mla_common.cuh.

Grid (splits, M), block SPARSE_MLA_SPLIT_MMA_FP8_THREADS, SPARSE_MLA_SPLIT_MMA_FP8_SMEM_BYTES of
dynamic shared memory (the launcher reads both #defines below).
*/

#include "sparse_mla_split_mma.cuh"

// Block size and dynamic shared memory (literals for the launcher's regex): 65536 (sQ) + 32768
// (the widened BF16 tile) + 6 x (16384 codes + 128 scales) (the code ring) = 197376 bytes.
#define SPARSE_MLA_SPLIT_MMA_FP8_THREADS 256
#define SPARSE_MLA_SPLIT_MMA_FP8_SMEM_BYTES 197376
static_assert(MmaLayout<true>::SMEM == SPARSE_MLA_SPLIT_MMA_FP8_SMEM_BYTES, "smem layout");
static_assert(SPARSE_MLA_SPLIT_MMA_FP8_THREADS == MMA_THREADS, "block size");

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_MMA_FP8_THREADS, 1)
sparse_mla_split_mma_fp8(const bf16* __restrict__ q, const unsigned char* __restrict__ codes,
                         const float* __restrict__ row_scale, const int* __restrict__ page_table,
                         const int* __restrict__ selection, float* __restrict__ part_acc,
                         float* __restrict__ part_ml, int M, int W, int pages_per_stream, int page_size,
                         int splits, float scale) {
    split_mma_body<true>(q, codes, row_scale, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                         page_size, splits, scale);
}
