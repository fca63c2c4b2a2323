/*
KDA decode step, design regs_pipelined. The op, the layouts and the lazy form: kda_common.cuh.

Persistent CTAs over 64-column tiles (16 KiB BF16, 32 KiB FP32), each issuing the next tile's
16-byte loads before it reduces and stores the current one (register double buffering), so a full
tile of loads is always in flight and the grid has no wave tail; exact form.
*/

#include "kda_common.cuh"

// What the other 16-byte designs leave on the table at small M: each block loads its tile, then
// reduces, then stores, so for most of its life a block has no loads in flight, and the grid ends
// in a ragged tail. Here each CTA walks tiles t, t + grid, ... and issues the NEXT tile's 16-byte
// state loads (and its q/k/g/v/beta) before it reduces and stores the current one: the DRAM
// latency of tile n+1 hides behind the arithmetic, barriers and stores of tile n, every CTA always
// has a tile of loads outstanding, and the grid is sized to the resident CTAs so the tail is one
// tile long. The current tile stays as raw words in registers (decoded twice rather than held as
// floats).

template <typename T, int COLS>
__device__ __forceinline__ void regs_pipelined(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                               const bf16* __restrict__ v, const float* __restrict__ g,
                                               const float* __restrict__ beta, T* __restrict__ S,
                                               bf16* __restrict__ o, int M, int H, float eps, float scale) {
    using G = TileG<T, COLS>;
    using C = Cols<T, G::VEC>;
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM];
    __shared__ float red[2][G::WARPS][G::COLS];
    __shared__ float su[G::COLS];

    const int tiles = M * H * G::SLICES;
    const int tid = threadIdx.x, cv = tid % G::CV, rg = tid / G::CV;
    int t = blockIdx.x;
    if (t >= tiles) return;

    typename C::Raw cur[G::RPT], nxt[G::RPT];
    // Per-tile vectors, prefetched into registers one tile ahead: thread tid < KDIM holds q/k/g of
    // row tid, thread tid < COLS holds v of column tid and beta.
    float nq = 0.f, nk = 0.f, ng = 0.f, nv = 0.f, nb = 0.f;

    auto issue = [&](int tile) {
        const int mh = tile / G::SLICES, slice = tile % G::SLICES;
        const T* src = S + (size_t)mh * KDIM * VDIM + slice * G::COLS + cv * G::VEC;
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) nxt[i] = C::load_raw(src + (size_t)(rg + G::NRG * i) * VDIM);
        const size_t off = (size_t)mh * KDIM;
        if (tid < KDIM) { nq = bf2f(q[off + tid]); nk = bf2f(k[off + tid]); ng = g[off + tid]; }
        if (tid < G::COLS) { nv = bf2f(v[off + slice * G::COLS + tid]); nb = beta[mh]; }
    };

    issue(t);
    for (; t < tiles; t += gridDim.x) {
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) cur[i] = nxt[i];
        const float cq = nq, ck = nk, cg = ng, cvv = nv, cb = nb;
        const int tn = t + gridDim.x;
        if (tn < tiles) issue(tn);  // next tile's loads go out before this tile's first barrier

        const int mh = t / G::SLICES, slice = t % G::SLICES;
        __syncthreads();  // the previous tile's readers of sq/sk/sa/su are done
        if (tid < KDIM) { sq[tid] = cq; sk[tid] = ck; sa[tid] = __expf(cg); }
        __syncthreads();
        const Norms n = warp_norms(sq, sk, eps, scale);

        float vh[G::VEC], w[G::VEC];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) vh[e] = w[e] = 0.f;
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) {
            const int c = rg + G::NRG * i;
            float s[G::VEC];
            C::decode(cur[i], s);
            const float a = sa[c], kc = sk[c], qc = sq[c];
#pragma unroll
            for (int e = 0; e < G::VEC; ++e) {
                s[e] *= a;
                vh[e] = fmaf(s[e], kc, vh[e]);
                w[e] = fmaf(s[e], qc, w[e]);
            }
        }
        column_partials_g<G>(vh, w, red);

        if (tid < G::COLS) {
            float a = 0.f, b = 0.f;
#pragma unroll
            for (int wp = 0; wp < G::WARPS; ++wp) { a += red[0][wp][tid]; b += red[1][wp][tid]; }
            const float u = cb * (cvv - n.rk * a);
            o[(size_t)mh * VDIM + slice * G::COLS + tid] = f2bf(n.rq * b + u * n.kq);
            su[tid] = u * n.rk;
        }
        __syncthreads();

        float uk[G::VEC];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) uk[e] = su[cv * G::VEC + e];
        T* dst = S + (size_t)mh * KDIM * VDIM + slice * G::COLS + cv * G::VEC;
#pragma unroll
        for (int i = 0; i < G::RPT; ++i) {
            const int c = rg + G::NRG * i;
            float s[G::VEC];
            C::decode(cur[i], s);  // the same fade as above, bit for bit
            const float a = sa[c], kc = sk[c];
#pragma unroll
            for (int e = 0; e < G::VEC; ++e) s[e] = fmaf(kc, uk[e], s[e] * a);
            C::store(dst + (size_t)c * VDIM, s);
        }
    }
}

// 64-column tiles for both dtypes: a 128-column BF16 tile double-buffered needs 163 registers
// (1 CTA/SM); 64 columns keep it at 116-126 registers, 2 CTAs/SM.
DEFINE_EXACT(regs_pipelined, bf16, bf16, 256, bf16, 64)
DEFINE_EXACT(regs_pipelined, f32, float, 256, float, 64)
