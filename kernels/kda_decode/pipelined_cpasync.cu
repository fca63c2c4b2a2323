/*
KDA decode step, design pipelined_cpasync. The op, the layouts and the lazy form: kda_common.cuh.

Persistent CTAs over (head, column-half) tiles; cp.async 16-byte copies fill a 2-3 stage
shared-memory ring so the next tiles' state is in flight while the current one computes; exact
form, 16-byte stores.
*/

#include "kda_common.cuh"

// Work tile t = (mh = t / 2, column half t % 2): the 128 x 64 state slice plus the head's q, k, g
// and the slice's 64 values of v, all copied by cp.async into one stage, so the compute phase reads
// only shared memory. The two halves of a head are adjacent tiles, i.e. neighbouring CTAs, so
// q/k/g are fetched from DRAM once and hit L2 for the second half.

template <typename T>
struct Stage {
    static constexpr int TILE = KDIM * Tile16<T>::COLS * (int)sizeof(T);  // 16 / 32 KiB
    static constexpr int Q = TILE;                                      // 128 bf16
    static constexpr int K = Q + KDIM * 2;                              // 128 bf16
    static constexpr int G = K + KDIM * 2;                              // 128 float
    static constexpr int V = G + KDIM * 4;                              // 64 bf16
    static constexpr int BYTES = V + Tile16<T>::COLS * 2;               // TILE + 1152
    static constexpr int ROW = Tile16<T>::COLS * (int)sizeof(T);        // bytes per tile row
    static constexpr int ROW_CHUNKS = ROW / 16;
};

template <typename T>
__device__ __forceinline__ void issue_tile(unsigned char* st, int tile, const bf16* __restrict__ q,
                                           const bf16* __restrict__ k, const bf16* __restrict__ v,
                                           const float* __restrict__ g, const T* __restrict__ S) {
    using P = Stage<T>;
    const int tid = threadIdx.x;
    const int mh = tile >> 1, half = tile & 1;
    const unsigned char* src = reinterpret_cast<const unsigned char*>(
        S + (size_t)mh * KDIM * VDIM + half * Tile16<T>::COLS);
#pragma unroll
    for (int i = tid; i < KDIM * P::ROW_CHUNKS; i += Tile16<T>::THREADS) {
        const int r = i / P::ROW_CHUNKS, ch = i % P::ROW_CHUNKS;
        cp_async16(st + r * P::ROW + ch * 16, src + (size_t)r * VDIM * sizeof(T) + ch * 16);
    }
    // 16 chunks of q, 16 of k, 32 of g, 8 of the v slice: 72 threads, one chunk each.
    const size_t off = (size_t)mh * KDIM;
    if (tid < 16) cp_async16(st + P::Q + tid * 16, reinterpret_cast<const unsigned char*>(q + off) + tid * 16);
    else if (tid < 32) cp_async16(st + P::K + (tid - 16) * 16, reinterpret_cast<const unsigned char*>(k + off) + (tid - 16) * 16);
    else if (tid < 64) cp_async16(st + P::G + (tid - 32) * 16, reinterpret_cast<const unsigned char*>(g + off) + (tid - 32) * 16);
    else if (tid < 72) cp_async16(st + P::V + (tid - 64) * 16, reinterpret_cast<const unsigned char*>(v + off + half * Tile16<T>::COLS) + (tid - 64) * 16);
}

template <typename T, int STAGES>
__device__ __forceinline__ void pipelined_cpasync(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                                  const bf16* __restrict__ v, const float* __restrict__ g,
                                                  const float* __restrict__ beta, T* __restrict__ S,
                                                  bf16* __restrict__ o, int M, int H, float eps,
                                                  float scale) {
    using G = Tile16<T>;
    using P = Stage<T>;
    using C = Cols<T, G::VEC>;
    static_assert(G::SLICES == 2, "tile index = 2 * head + half");
    extern __shared__ __align__(16) unsigned char ring[];
    __shared__ float red[2][G::WARPS][G::COLS];
    __shared__ float su[G::COLS];
    if (dynamic_smem_bytes() < (unsigned)(STAGES * P::BYTES)) __trap();

    const int ntiles = M * H * 2;
    const int tid = threadIdx.x, lane = tid & 31, cv = tid % G::CV, rg = tid / G::CV;
    const int stride = gridDim.x;

    // Prologue: STAGES-1 tiles in flight. Groups are committed even when empty so that
    // "wait_group STAGES-1" always means "the current tile has landed".
    int tile = blockIdx.x;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (tile + s * stride < ntiles) issue_tile<T>(ring + s * P::BYTES, tile + s * stride, q, k, v, g, S);
        cp_async_commit();
    }

    int stage = 0;
    for (; tile < ntiles; tile += stride) {
        // Refill the stage consumed by the previous tile: safe because every thread has passed that
        // tile's second barrier, after which it no longer reads its stage.
        {
            const int ahead = tile + (STAGES - 1) * stride;
            const int fill = (stage + STAGES - 1) % STAGES;
            if (ahead < ntiles) issue_tile<T>(ring + fill * P::BYTES, ahead, q, k, v, g, S);
            cp_async_commit();
        }
        const int mh = tile >> 1, half = tile & 1;
        const float b = beta[mh];  // tiny; its latency hides behind the wait
        cp_async_wait<STAGES - 1>();
        __syncthreads();  // other threads' copies of this stage are now visible

        const unsigned char* st = ring + stage * P::BYTES;
        const bf16* sq = reinterpret_cast<const bf16*>(st + P::Q);
        const bf16* sk = reinterpret_cast<const bf16*>(st + P::K);
        const float* sg = reinterpret_cast<const float*>(st + P::G);

        float s[G::RPT][G::VEC];
#pragma unroll
        for (int i = 0; i < G::RPT; ++i)
            C::load(reinterpret_cast<const T*>(st + (rg + G::NRG * i) * P::ROW + cv * 16), s[i]);

        // Norms straight from the bf16 copies in the stage (each warp redundantly, no barrier).
        const Norms n = warp_norms_bf16(sq, sk, lane, eps, scale);

        float kr[G::RPT];  // raw k of this thread's rows, kept for the write phase
        float vh[G::VEC], w[G::VEC];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) vh[e] = w[e] = 0.f;
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) {
            const int c = rg + G::NRG * i;
            const float a = __expf(sg[c]), kc = bf2f(sk[c]), qc = bf2f(sq[c]);
            kr[i] = kc;
#pragma unroll
            for (int e = 0; e < G::VEC; ++e) {
                s[i][e] *= a;
                vh[e] = fmaf(s[i][e], kc, vh[e]);
                w[e] = fmaf(s[i][e], qc, w[e]);
            }
        }
        column_partials<T>(vh, w, red);  // barrier inside

        const size_t off = (size_t)mh * KDIM;
        if (tid < G::COLS) {
            float a = 0.f, bb = 0.f;
#pragma unroll
            for (int wp = 0; wp < G::WARPS; ++wp) { a += red[0][wp][tid]; bb += red[1][wp][tid]; }
            const float vj = bf2f(reinterpret_cast<const bf16*>(st + P::V)[tid]);
            const float u = b * (vj - n.rk * a);
            o[off + half * G::COLS + tid] = f2bf(n.rq * bb + u * n.kq);
            su[tid] = u * n.rk;
        }
        __syncthreads();  // last read of this stage and of red[] happened before this barrier

        float uk[G::VEC];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) uk[e] = su[cv * G::VEC + e];
        T* dst = S + (size_t)mh * KDIM * VDIM + half * G::COLS + cv * G::VEC;
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) {
#pragma unroll
            for (int e = 0; e < G::VEC; ++e) s[i][e] = fmaf(kr[i], uk[e], s[i][e]);
            C::store(dst + (size_t)(rg + G::NRG * i) * VDIM, s[i]);
        }
        stage = (stage + 1) % STAGES;
    }
    cp_async_wait<0>();  // only empty groups can remain; leave nothing outstanding at exit
}

// Stages: bf16 tiles are 17.1 KiB, so 3 stages (+4.3 KiB scratch) = 56 KiB and 3 CTAs/SM keep up to
// 6 tiles (96 KiB) in flight per SM; fp32 tiles are 33.1 KiB, so 2 stages = 70.5 KiB still fit 3
// CTAs/SM (3 tiles, 96 KiB in flight) where 3 stages would drop to 2 CTAs/SM for the same bytes.
DEFINE_EXACT(pipelined_cpasync, bf16, bf16, 256, bf16, 3)
DEFINE_EXACT(pipelined_cpasync, f32, float, 256, float, 2)
