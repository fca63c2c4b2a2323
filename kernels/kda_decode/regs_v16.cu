/*
KDA decode step, design regs_v16. The op, the layouts and the lazy form: kda_common.cuh.

The exact form with the state slice in registers (Tile16, kda_common.cuh): 16-byte loads, all
issued before the head prologue so their latency overlaps it, a shuffle + shared-memory column
reduction, 16-byte stores from registers; 2 column slices x 256 threads per head.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void regs_v16(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                         const bf16* __restrict__ v, const float* __restrict__ g,
                                         const float* __restrict__ beta, T* __restrict__ S,
                                         bf16* __restrict__ o, int M, int H, float eps, float scale) {
    using G = Tile16<T>;
    using C = Cols<T, G::VEC>;
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM];
    __shared__ float red[2][G::WARPS][G::COLS];
    __shared__ float su[G::COLS];

    const int blk = blockIdx.x;
    if (blk >= M * H * G::SLICES) return;
    const int mh = blk / G::SLICES, slice = blk % G::SLICES;
    const int tid = threadIdx.x, cv = tid % G::CV, rg = tid / G::CV;
    const int col0 = slice * G::COLS + cv * G::VEC;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM + col0;

    // Issue every state load before the prologue: the DRAM latency then overlaps the q/k/g
    // loads, the exp and the norm shuffles instead of following them.
    typename C::Raw raw[G::RPT];
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) raw[i] = C::load_raw(Sh + (size_t)(rg + G::NRG * i) * VDIM);

    stage_head<G::THREADS>(q, k, g, off, sq, sk, sa);
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    float s[G::RPT][G::VEC];
    float vh[G::VEC], w[G::VEC];
#pragma unroll
    for (int e = 0; e < G::VEC; ++e) vh[e] = w[e] = 0.f;
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) {
        const int c = rg + G::NRG * i;
        C::decode(raw[i], s[i]);
        const float a = sa[c], kc = sk[c], qc = sq[c];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) {
            s[i][e] *= a;
            vh[e] = fmaf(s[i][e], kc, vh[e]);
            w[e] = fmaf(s[i][e], qc, w[e]);
        }
    }
    column_partials<T>(vh, w, red);

    if (tid < G::COLS) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int wp = 0; wp < G::WARPS; ++wp) { a += red[0][wp][tid]; b += red[1][wp][tid]; }
        const int j = slice * G::COLS + tid;
        const float u = beta[mh] * (bf2f(v[off + j]) - n.rk * a);
        o[off + j] = f2bf(n.rq * b + u * n.kq);
        su[tid] = u * n.rk;
    }
    __syncthreads();

    float uk[G::VEC];
#pragma unroll
    for (int e = 0; e < G::VEC; ++e) uk[e] = su[cv * G::VEC + e];
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) {
        const int c = rg + G::NRG * i;
        const float kc = sk[c];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) s[i][e] = fmaf(kc, uk[e], s[i][e]);
        C::store(Sh + (size_t)c * VDIM, s[i]);
    }
}

DEFINE_EXACT(regs_v16, bf16, bf16, 256, bf16)
DEFINE_EXACT(regs_v16, f32, float, 256, float)
