/*
KDA decode step, design lazy_1pass. The op, the layouts and the lazy form: kda_common.cuh.

The seed design: one block of 128 threads per head, thread j walks column j (coalesced across the
warp), in the lazy form, so S is read once and written once in the same sweep.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void lazy_1pass(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                           const bf16* __restrict__ v, const float* __restrict__ g,
                                           const float* __restrict__ beta, T* __restrict__ S,
                                           const float* __restrict__ kprev,
                                           const float* __restrict__ dprev, float* __restrict__ knew,
                                           float* __restrict__ dnew, bf16* __restrict__ o, int M,
                                           int H, float eps, float scale) {
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM], skp[KDIM];
    const int mh = blockIdx.x;
    if (mh >= M * H) return;
    const int j = threadIdx.x;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM;

    stage_head<VDIM>(q, k, g, off, sq, sk, sa);
    skp[j] = kprev[off + j];
    const float dp = dprev[off + j];
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    float vh = 0.f, w = 0.f;
    for (int c0 = 0; c0 < KDIM; c0 += ROW_BATCH) {
        typename Cols<T, 1>::Raw raw[ROW_BATCH];
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) raw[i] = Cols<T, 1>::load_raw(Sh + (size_t)(c0 + i) * VDIM + j);
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) {
            const int c = c0 + i;
            float s[1];
            Cols<T, 1>::decode(raw[i], s);
            s[0] = sa[c] * fmaf(skp[c], dp, s[0]);
            Cols<T, 1>::store(Sh + (size_t)c * VDIM + j, s);  // independent of the reduction
            vh = fmaf(s[0], sk[c], vh);
            w = fmaf(s[0], sq[c], w);
        }
    }
    const float d = beta[mh] * (bf2f(v[off + j]) - n.rk * vh);
    o[off + j] = f2bf(n.rq * w + d * n.kq);
    dnew[off + j] = d;
    knew[off + j] = n.rk * sk[j];
}

DEFINE_LAZY(lazy_1pass, bf16, bf16, 128)
DEFINE_LAZY(lazy_1pass, f32, float, 128)
