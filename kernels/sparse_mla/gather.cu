/*
Sparse MLA family, the gather roofline: the bandwidth ceiling of every sparse MLA design. The op and
the index conventions: sparse_mla_common.cuh.

It reads exactly what an attention kernel over the selection must read, the selected arena rows
(1 KiB each), once each and nothing else, and reduces them to an exact checksum so the reads cannot
be optimised away and the host can verify them bit for bit.

sparse_gather_xor: grid (splits, M), block 256. CTA (s, m) covers slots
    [s * W / splits, (s + 1) * W / splits) of row m (the launcher guarantees W % splits == 0 and
    (W / splits) % 8 == 0; the code is correct for any split anyway).
    It XORs every 16-byte word (as 4 x uint32, lanes x, y, z, w kept separate) of every valid
    selected row of its chunk and writes partial[(m * splits + s) * 4 + {0,1,2,3}]: every CTA writes
    its 4 words exactly once, zeros when its chunk holds no valid slot. No atomics. The host XORs the
    partials of a row (XOR is associative and commutative, so the split does not change the result).
Shape: a warp reads whole rows (lane l: 16-byte words l and l + 32, so each load instruction is
    512 contiguous bytes); the rows of a chunk are dealt to the 8 warps round-robin (warp w: rows
    w, w + 8, ...) so even a 64-row chunk keeps all 8 warps busy. The indirections (selection, then
    page table) are resolved 32 rows at a time, one row per lane, and the valid rows' arena row
    numbers compacted into a per-warp list in shared memory: two dependent round trips per 32 rows
    instead of per row, and no -1 slot costs a load slot. GATHER_ROWS rows (8 x 16 B per lane) are
    in flight before the first XOR.
*/

#include "sparse_mla_common.cuh"

#define GATHER_THREADS 256
#define GATHER_WARPS (GATHER_THREADS / 32)
#define GATHER_ROWS 4  // rows a warp has in flight before it XORs any

// minBlocks 4 (64 registers): with the default bound ptxas held the kernel to 32 registers and
// interleaved the first rows' XORs with the last rows' loads (waiting for data with only two rows
// in flight); at 56 registers all 8 loads of a batch issue back to back, and 4 CTAs x 8 warps x
// 4 KiB = 128 KiB are in flight per SM.
extern "C" __global__ void __launch_bounds__(GATHER_THREADS, 4)
sparse_gather_xor(const bf16* __restrict__ arena, const int* __restrict__ page_table,
                  const int* __restrict__ selection, unsigned* __restrict__ partial, int M, int W,
                  int pages_per_stream, int page_size, int splits) {
    __shared__ unsigned red[GATHER_WARPS][4];
    __shared__ long long list[GATHER_WARPS][32];  // a round's valid arena rows, per warp
    const int s = blockIdx.x, m = blockIdx.y;
    if (m >= M) return;  // whole block: the barrier below is never split
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // 64-bit products: s * W cannot overflow even for very long selections.
    const int start = (int)(((long long)s * W) / splits);
    const int end = (int)(((long long)(s + 1) * W) / splits);
    const int n = end - start;  // rows of this chunk
    const int* sel = selection + (size_t)m * (size_t)W + start;
    const uint4* rows = reinterpret_cast<const uint4*>(arena);  // 64 words a row

    unsigned x = 0u, y = 0u, z = 0u, w = 0u;
    // Rounds of 256 chunk rows; in a round lane l of warp w resolves chunk row base + 8 l + w.
    // The warp's valid rows are compacted into list[warp][0 .. nv) (ballot rank, order kept), so
    // the batched loads below are unconditional: with "valid ? load : 0" per row, ptxas copied each
    // row's data out of the load registers (waiting for it) before the next row's load reused them.
    for (int base = 0; base < n; base += 32 * GATHER_WARPS) {
        const int i = base + 8 * lane + warp;
        long long my_row = -1;  // arena row of chunk row i; -1 if out of the chunk or an empty slot
        if (i < n) {
            const int t = ld_nc_s32(sel + i);
            if (t >= 0) my_row = (long long)row_of(page_table, m, t, pages_per_stream, page_size);
        }
        const unsigned valid = __ballot_sync(FULL_MASK, my_row >= 0);
        if (my_row >= 0) list[warp][__popc(valid & ((1u << lane) - 1u))] = my_row;
        __syncwarp();
        const int nv = __popc(valid);  // warp-uniform
        int k = 0;
#pragma unroll 1
        for (; k + GATHER_ROWS <= nv; k += GATHER_ROWS) {
            // All row numbers first, then all loads, then the XORs.
            long long r[GATHER_ROWS];
#pragma unroll
            for (int u = 0; u < GATHER_ROWS; ++u) r[u] = list[warp][k + u];
            uint4 a[GATHER_ROWS], b[GATHER_ROWS];
#pragma unroll
            for (int u = 0; u < GATHER_ROWS; ++u) {
                const uint4* p = rows + (size_t)r[u] * SMLA_ROW_CHUNKS;
                a[u] = ld_nc_v4(p + lane);
                b[u] = ld_nc_v4(p + lane + 32);
            }
#pragma unroll
            for (int u = 0; u < GATHER_ROWS; ++u) {
                x ^= a[u].x ^ b[u].x;
                y ^= a[u].y ^ b[u].y;
                z ^= a[u].z ^ b[u].z;
                w ^= a[u].w ^ b[u].w;
            }
        }
        for (; k < nv; ++k) {  // the last nv % GATHER_ROWS rows, one at a time
            const uint4* p = rows + (size_t)list[warp][k] * SMLA_ROW_CHUNKS;
            const uint4 a = ld_nc_v4(p + lane), b = ld_nc_v4(p + lane + 32);
            x ^= a.x ^ b.x;
            y ^= a.y ^ b.y;
            z ^= a.z ^ b.z;
            w ^= a.w ^ b.w;
        }
        __syncwarp();  // every lane has read list[warp] before the next round overwrites it
    }

    // Block reduction: butterfly within each warp, then the 8 warps' words through shared memory.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        x ^= __shfl_xor_sync(FULL_MASK, x, o);
        y ^= __shfl_xor_sync(FULL_MASK, y, o);
        z ^= __shfl_xor_sync(FULL_MASK, z, o);
        w ^= __shfl_xor_sync(FULL_MASK, w, o);
    }
    if (lane == 0) {
        red[warp][0] = x;
        red[warp][1] = y;
        red[warp][2] = z;
        red[warp][3] = w;
    }
    __syncthreads();
    if (threadIdx.x < 4) {
        unsigned v = 0u;
#pragma unroll
        for (int k = 0; k < GATHER_WARPS; ++k) v ^= red[k][threadIdx.x];
        partial[((size_t)m * (size_t)splits + (size_t)s) * 4 + threadIdx.x] = v;
    }
}
