/*
KDA decode step, design global_2pass. The op, the layouts and the lazy form: kda_common.cuh.

lazy_1pass's geometry in the exact form: pass 1 reads the column for vhat and w, pass 2 re-reads it
(an L2 hit expected) and writes F + kn u. It measures what staying exact costs: a second read.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void global_2pass(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                             const bf16* __restrict__ v, const float* __restrict__ g,
                                             const float* __restrict__ beta, T* __restrict__ S,
                                             bf16* __restrict__ o, int M, int H, float eps,
                                             float scale) {
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM];
    const int mh = blockIdx.x;
    if (mh >= M * H) return;
    const int j = threadIdx.x;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM;

    stage_head<VDIM>(q, k, g, off, sq, sk, sa);
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    float vh = 0.f, w = 0.f;
    for (int c0 = 0; c0 < KDIM; c0 += ROW_BATCH) {
        typename Cols<T, 1>::Raw raw[ROW_BATCH];
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) raw[i] = Cols<T, 1>::load_raw(Sh + (size_t)(c0 + i) * VDIM + j);
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) {
            float s[1];
            Cols<T, 1>::decode(raw[i], s);
            const float f = sa[c0 + i] * s[0];
            vh = fmaf(f, sk[c0 + i], vh);
            w = fmaf(f, sq[c0 + i], w);
        }
    }
    const float u = beta[mh] * (bf2f(v[off + j]) - n.rk * vh);
    o[off + j] = f2bf(n.rq * w + u * n.kq);
    const float uk = u * n.rk;  // kn_c u = k_c (rk u)
    for (int c0 = 0; c0 < KDIM; c0 += ROW_BATCH) {
        typename Cols<T, 1>::Raw raw[ROW_BATCH];
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) raw[i] = Cols<T, 1>::load_raw(Sh + (size_t)(c0 + i) * VDIM + j);
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) {
            float s[1];
            Cols<T, 1>::decode(raw[i], s);
            s[0] = fmaf(sk[c0 + i], uk, sa[c0 + i] * s[0]);
            Cols<T, 1>::store(Sh + (size_t)(c0 + i) * VDIM + j, s);
        }
    }
}

DEFINE_EXACT(global_2pass, bf16, bf16, 128, bf16)
DEFINE_EXACT(global_2pass, f32, float, 128, float)
