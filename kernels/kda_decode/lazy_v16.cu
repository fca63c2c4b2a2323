/*
KDA decode step, design lazy_v16. The op, the layouts and the lazy form: kda_common.cuh.

The lazy form with regs_v16's 16-byte access pattern: each row is stored as soon as it is faded
(the store does not wait for the reduction), a pure streaming read-modify-write.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void lazy_v16(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                         const bf16* __restrict__ v, const float* __restrict__ g,
                                         const float* __restrict__ beta, T* __restrict__ S,
                                         const float* __restrict__ kprev,
                                         const float* __restrict__ dprev, float* __restrict__ knew,
                                         float* __restrict__ dnew, bf16* __restrict__ o, int M, int H,
                                         float eps, float scale) {
    using G = Tile16<T>;
    using C = Cols<T, G::VEC>;
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM], skp[KDIM];
    __shared__ float red[2][G::WARPS][G::COLS];

    const int blk = blockIdx.x;
    if (blk >= M * H * G::SLICES) return;
    const int mh = blk / G::SLICES, slice = blk % G::SLICES;
    const int tid = threadIdx.x, cv = tid % G::CV, rg = tid / G::CV;
    const int col0 = slice * G::COLS + cv * G::VEC;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM + col0;

    typename C::Raw raw[G::RPT];
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) raw[i] = C::load_raw(Sh + (size_t)(rg + G::NRG * i) * VDIM);

    float dp[G::VEC];
#pragma unroll
    for (int e = 0; e < G::VEC; e += 4) {
        const float4 t = *reinterpret_cast<const float4*>(dprev + off + col0 + e);
        dp[e] = t.x; dp[e + 1] = t.y; dp[e + 2] = t.z; dp[e + 3] = t.w;
    }
    stage_head<G::THREADS>(q, k, g, off, sq, sk, sa);
    if (tid < KDIM) skp[tid] = kprev[off + tid];
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    float vh[G::VEC], w[G::VEC];
#pragma unroll
    for (int e = 0; e < G::VEC; ++e) vh[e] = w[e] = 0.f;
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) {
        const int c = rg + G::NRG * i;
        float s[G::VEC];
        C::decode(raw[i], s);
        const float a = sa[c], kp = skp[c], kc = sk[c], qc = sq[c];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) s[e] = a * fmaf(kp, dp[e], s[e]);
        C::store(Sh + (size_t)c * VDIM, s);
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) {
            vh[e] = fmaf(s[e], kc, vh[e]);
            w[e] = fmaf(s[e], qc, w[e]);
        }
    }
    column_partials<T>(vh, w, red);

    if (tid < G::COLS) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int wp = 0; wp < G::WARPS; ++wp) { a += red[0][wp][tid]; b += red[1][wp][tid]; }
        const int j = slice * G::COLS + tid;
        const float d = beta[mh] * (bf2f(v[off + j]) - n.rk * a);
        o[off + j] = f2bf(n.rq * b + d * n.kq);
        dnew[off + j] = d;
    }
    // One slice writes kn for the whole head; every slice read kprev from the other buffer.
    if (slice == 0 && tid < KDIM) knew[off + tid] = n.rk * sk[tid];
}

DEFINE_LAZY(lazy_v16, bf16, bf16, 256)
DEFINE_LAZY(lazy_v16, f32, float, 256)
