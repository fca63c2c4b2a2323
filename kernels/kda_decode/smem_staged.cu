/*
KDA decode step, design smem_staged. The op, the layouts and the lazy form: kda_common.cuh.

The seed's comparison point: the head's whole 128 x 128 tile is copied to shared memory (dynamic:
32 KiB bf16, 64 KiB fp32), then the exact form runs from there; that much shared memory per block
caps occupancy.
*/

#include "kda_common.cuh"

template <typename T>
__device__ __forceinline__ void smem_staged(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                            const bf16* __restrict__ v, const float* __restrict__ g,
                                            const float* __restrict__ beta, T* __restrict__ S,
                                            bf16* __restrict__ o, int M, int H, float eps,
                                            float scale) {
    extern __shared__ __align__(16) unsigned char dsmem[];
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM];
    // A launch with too little dynamic shared memory would silently read past the tile.
    if (dynamic_smem_bytes() < KDIM * VDIM * sizeof(T)) __trap();
    const int mh = blockIdx.x;
    if (mh >= M * H) return;
    const int j = threadIdx.x;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM;
    T* tile = reinterpret_cast<T*>(dsmem);

    constexpr int CHUNKS = KDIM * VDIM * (int)sizeof(T) / 16;
    const uint4* src = reinterpret_cast<const uint4*>(Sh);
    uint4* dst = reinterpret_cast<uint4*>(tile);
#pragma unroll 4
    for (int i = j; i < CHUNKS; i += VDIM) dst[i] = src[i];
    stage_head<VDIM>(q, k, g, off, sq, sk, sa);
    __syncthreads();
    const Norms n = warp_norms(sq, sk, eps, scale);

    // Column reads from shared memory: consecutive threads hit consecutive words (fp32) or share a
    // word (bf16), so there are no bank conflicts.
    float vh = 0.f, w = 0.f;
#pragma unroll 8
    for (int c = 0; c < KDIM; ++c) {
        float s[1];
        Cols<T, 1>::load(tile + c * VDIM + j, s);
        const float f = sa[c] * s[0];
        vh = fmaf(f, sk[c], vh);
        w = fmaf(f, sq[c], w);
    }
    const float u = beta[mh] * (bf2f(v[off + j]) - n.rk * vh);
    o[off + j] = f2bf(n.rq * w + u * n.kq);
    const float uk = u * n.rk;
#pragma unroll 8
    for (int c = 0; c < KDIM; ++c) {
        float s[1];
        Cols<T, 1>::load(tile + c * VDIM + j, s);
        s[0] = fmaf(sk[c], uk, sa[c] * s[0]);
        Cols<T, 1>::store(Sh + (size_t)c * VDIM + j, s);
    }
}

DEFINE_EXACT(smem_staged, bf16, bf16, 128, bf16)
DEFINE_EXACT(smem_staged, f32, float, 128, float)
