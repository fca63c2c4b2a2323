/*
KDA decode step, design vec2. The op, the layouts and the lazy form: kda_common.cuh.

lazy_1pass with 2 adjacent columns per thread (64 threads per head): 4- or 8-byte accesses halve
the load and store instruction count.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void vec2(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                     const bf16* __restrict__ v, const float* __restrict__ g,
                                     const float* __restrict__ beta, T* __restrict__ S,
                                     const float* __restrict__ kprev, const float* __restrict__ dprev,
                                     float* __restrict__ knew, float* __restrict__ dnew,
                                     bf16* __restrict__ o, int M, int H, float eps, float scale) {
    constexpr int NT = VDIM / 2;
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM], skp[KDIM];
    const int mh = blockIdx.x;
    if (mh >= M * H) return;
    const int t = threadIdx.x, j0 = 2 * t;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM;

    stage_head<NT>(q, k, g, off, sq, sk, sa);
    skp[t] = kprev[off + t];
    skp[t + NT] = kprev[off + t + NT];
    const float2 dp = *reinterpret_cast<const float2*>(dprev + off + j0);
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    float vh0 = 0.f, vh1 = 0.f, w0 = 0.f, w1 = 0.f;
    for (int c0 = 0; c0 < KDIM; c0 += ROW_BATCH) {
        typename Cols<T, 2>::Raw raw[ROW_BATCH];
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) raw[i] = Cols<T, 2>::load_raw(Sh + (size_t)(c0 + i) * VDIM + j0);
#pragma unroll
        for (int i = 0; i < ROW_BATCH; ++i) {
            const int c = c0 + i;
            float s[2];
            Cols<T, 2>::decode(raw[i], s);
            const float a = sa[c], kp = skp[c];
            s[0] = a * fmaf(kp, dp.x, s[0]);
            s[1] = a * fmaf(kp, dp.y, s[1]);
            Cols<T, 2>::store(Sh + (size_t)c * VDIM + j0, s);
            const float kc = sk[c], qc = sq[c];
            vh0 = fmaf(s[0], kc, vh0);
            vh1 = fmaf(s[1], kc, vh1);
            w0 = fmaf(s[0], qc, w0);
            w1 = fmaf(s[1], qc, w1);
        }
    }
    const float b = beta[mh];
    const unsigned vv = *reinterpret_cast<const unsigned*>(v + off + j0);
    const float d0 = b * (bf2f((unsigned short)(vv & 0xFFFFu)) - n.rk * vh0);
    const float d1 = b * (bf2f((unsigned short)(vv >> 16)) - n.rk * vh1);
    *reinterpret_cast<unsigned*>(o + off + j0) =
        (unsigned)f2bf(n.rq * w0 + d0 * n.kq) | ((unsigned)f2bf(n.rq * w1 + d1 * n.kq) << 16);
    *reinterpret_cast<float2*>(dnew + off + j0) = make_float2(d0, d1);
    knew[off + t] = n.rk * sk[t];
    knew[off + t + NT] = n.rk * sk[t + NT];
}

DEFINE_LAZY(vec2, bf16, bf16, 64)
DEFINE_LAZY(vec2, f32, float, 64)
