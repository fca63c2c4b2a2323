/*
Sparse MLA decode, design split_mma over the BF16 latent: sparse_mla_split_mma is
split_mma_body<false> of sparse_mla_split_mma.cuh (the design, its contract, fragment layouts and
pipeline are documented there); sparse_mla_combine: sparse_mla_combine.cuh. The op and the index
conventions: sparse_mla_common.cuh.

Grid (splits, M), block SPARSE_MLA_SPLIT_MMA_THREADS, SPARSE_MLA_SPLIT_MMA_SMEM_BYTES of dynamic
shared memory (the launcher reads both #defines below).
*/

#include "sparse_mla_split_mma.cuh"

// Block size and dynamic shared memory (literals for the launcher's regex):
// 65536 (sQ) + 4 x 32768 (tile ring) = 196608 bytes (192 KiB; the opt-in limit is 227 KiB).
#define SPARSE_MLA_SPLIT_MMA_THREADS 256
#define SPARSE_MLA_SPLIT_MMA_SMEM_BYTES 196608
static_assert(MmaLayout<false>::SMEM == SPARSE_MLA_SPLIT_MMA_SMEM_BYTES, "smem layout");
static_assert(SPARSE_MLA_SPLIT_MMA_THREADS == MMA_THREADS, "block size");

extern "C" __global__ void __launch_bounds__(SPARSE_MLA_SPLIT_MMA_THREADS, 1)
sparse_mla_split_mma(const bf16* __restrict__ q, const bf16* __restrict__ arena,
                     const int* __restrict__ page_table, const int* __restrict__ selection,
                     float* __restrict__ part_acc, float* __restrict__ part_ml, int M, int W,
                     int pages_per_stream, int page_size, int splits, float scale) {
    split_mma_body<false>(q, arena, nullptr, page_table, selection, part_acc, part_ml, M, W, pages_per_stream,
                          page_size, splits, scale);
}
