/*
DSA expand (seed 001 expand_selection; seed 003 §8.5; the rule and its exact reference:
reference.py expand_selection; the component: expand_spec.py): the top-k's pool ids -> the token
row the sparse MLA reads.

The op, per stream m (one query token at position t = positions[m], so t + 1 tokens visible):
    pools[m]     : k int32 pool ids, any order, -1 = no pool (a chosen non-finite score)
    selection[m] : W int32 token ids, W % 4 == 0 (2112 in the model), -1 = an empty slot
    T = 4 k (the top-k in tokens: 2048)
    dense  (t + 1 <= T): slot j = j for j <= t, else -1
    sparse (t + 1 >  T): slots 4i .. 4i + 3 = 4 pools[m][i] + 0..3 for i < k (all four -1 for a -1
           pool); then the tail: slot 4k + r = 4 (n / 4) + r for r < n % 4 (n = t + 1: the tokens
           of the incomplete pool, the query included); every other slot -1.
Layouts (row-major, contiguous): pools [M][k] int32, positions [M] int32, selection [M][W] int32.

expand_v1: one CTA (256 threads) per stream; the row is W / 4 chunks of 4 slots (one pool's
tokens: the pool region starts at slot 0 and the tail at slot 4k, both chunk-aligned), thread c
writes chunks c, c + 256, ... with one 16-byte store each, its final value computed directly.
Every slot is written exactly once (seed 001 writes -1 over the row first and then the indices;
here no slot is written twice, so there is no ordering between the two writes to get right and no
barrier). A chunk of the pool region reads its one pool id (a warp reads 128 contiguous bytes).
Tiny: 8.4 KiB written a stream; its time is the launch.
*/

#define EXPAND_THREADS 256
#define EXPAND_KPOOL 4  // tokens a pool: a chunk of 4 slots is one pool (the launcher refuses others)

__device__ __forceinline__ void st_v4_s32(int* p, int a, int b, int c, int d) {
    asm volatile("st.global.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
}

extern "C" __global__ void __launch_bounds__(EXPAND_THREADS)
expand_v1(const int* __restrict__ pools, const int* __restrict__ positions, int* __restrict__ selection,
          int M, int k, int W) {
    // As a programmatic dependent in a multi-kernel step (compress -> scan -> select -> expand), wait
    // for the top-k that writes pools (a no-op in a plain launch).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int m = blockIdx.x;
    if (m >= M) return;
    const int t = __ldg(positions + m);
    const int n = t + 1;                         // tokens visible
    const int T = EXPAND_KPOOL * k;              // the top-k in tokens
    const bool is_dense = n <= T;
    const int base = (n / EXPAND_KPOOL) * EXPAND_KPOOL;   // first token of the incomplete pool
    const int tail = n - base;                   // 0..3 tokens
    const int* pm = pools + (size_t)m * (size_t)k;
    int* row = selection + (size_t)m * (size_t)W;
    for (int c = threadIdx.x; c < W / EXPAND_KPOOL; c += EXPAND_THREADS) {
        const int j = EXPAND_KPOOL * c;          // first slot of the chunk
        int v[EXPAND_KPOOL];
        if (is_dense) {
#pragma unroll
            for (int r = 0; r < EXPAND_KPOOL; ++r) v[r] = j + r < n ? j + r : -1;
        } else if (c < k) {
            const int pool = __ldg(pm + c);
#pragma unroll
            for (int r = 0; r < EXPAND_KPOOL; ++r) v[r] = pool >= 0 ? EXPAND_KPOOL * pool + r : -1;
        } else if (c == k) {
#pragma unroll
            for (int r = 0; r < EXPAND_KPOOL; ++r) v[r] = r < tail ? base + r : -1;
        } else {
#pragma unroll
            for (int r = 0; r < EXPAND_KPOOL; ++r) v[r] = -1;
        }
        st_v4_s32(row + j, v[0], v[1], v[2], v[3]);
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
