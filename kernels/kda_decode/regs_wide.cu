/*
KDA decode step, designs regs_wide, regs_wide3 and regs_wide3_pdl: one device template, three
launch-bound / overlap choices. The op, the layouts and the lazy form: kda_common.cuh.

regs_v16's exact form with 32 KiB per block in both dtypes (the whole head in BF16, 8 16-byte
loads per thread); the tile stays as raw words in registers and is decoded twice instead of held as
floats, so BF16 fits 4 blocks (128 KiB of loads in flight) per SM: regs_v16's BF16 blocks carry half
the bytes.
*/

#include "kda_common.cuh"

// regs_pipelined's tile code (TileG) run once per block, without the double buffer: its registers
// hold one tile, so more blocks fit and more bytes are in flight per SM.
template <typename T, int COLS, int OVERLAP>
__device__ __forceinline__ void regs_wide(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                          const bf16* __restrict__ v, const float* __restrict__ g,
                                          const float* __restrict__ beta, T* __restrict__ S,
                                          bf16* __restrict__ o, int M, int H, float eps, float scale) {
    using G = TileG<T, COLS>;
    using C = Cols<T, G::VEC>;
    __shared__ float sq[KDIM], sk[KDIM], sa[KDIM];
    __shared__ float red[2][G::WARPS][G::COLS];
    __shared__ float su[G::COLS];

    if constexpr (OVERLAP == PDL) pdl_launch_dependents();
    const int blk = blockIdx.x;
    if (blk >= M * H * G::SLICES) return;
    const int mh = blk / G::SLICES, slice = blk % G::SLICES;
    const int tid = threadIdx.x, cv = tid % G::CV, rg = tid / G::CV;
    const size_t off = (size_t)mh * KDIM;
    T* Sh = S + (size_t)mh * KDIM * VDIM + slice * G::COLS + cv * G::VEC;

    // Every state load first, so their latency overlaps the prologue.
    typename C::Raw raw[G::RPT];
#pragma unroll
    for (int i = 0; i < G::RPT; ++i) raw[i] = C::load_raw(Sh + (size_t)(rg + G::NRG * i) * VDIM);
    // PDL: the state is in flight; q, k, v, g, beta come from the kernels before this one.
    if constexpr (OVERLAP == PDL) pdl_wait();

    stage_head<G::THREADS>(q, k, g, off, sq, sk, sa);
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
        float s[G::VEC];
        C::decode(raw[i], s);  // the same fade as above, bit for bit
        const float a = sa[c], kc = sk[c];
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) s[e] = fmaf(kc, uk[e], s[e] * a);
        C::store(Sh + (size_t)c * VDIM, s);
    }
}

// 32 KiB tiles for both dtypes: the whole head (128 columns) in BF16, half a head in FP32.
// Capped at 64 registers (4 blocks of 256 threads per SM): 4 x 32 KiB of loads in flight per SM,
// the same bytes in flight that regs_v16 reaches only with FP32.
#define DEFINE_EXACT_MINB(NAME, SUFFIX, T, THREADS, MINB, ...)                                    \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB) kda_##NAME##_##SUFFIX(EXACT_ARGS(T)) { \
        NAME<__VA_ARGS__>(q, k, v, g, beta, S, o, M, H, eps, scale);                            \
    }
DEFINE_EXACT_MINB(regs_wide, bf16, bf16, 256, 4, bf16, 128, SOLO)
DEFINE_EXACT_MINB(regs_wide, f32, float, 256, 4, float, 64, SOLO)
// The same code uncapped (80 registers in BF16: 3 blocks/SM, no spill): which costs more, the
// 92 bytes of BF16 spill under the cap or the fourth block's missing 32 KiB in flight?
DEFINE_EXACT_OF(regs_wide3, regs_wide, bf16, bf16, 256, bf16, 128, SOLO)
DEFINE_EXACT_OF(regs_wide3, regs_wide, f32, float, 256, float, 64, SOLO)
// regs_wide3 as a programmatic dependent (LaunchOverlap, kda_common.cuh): a block-per-tile grid, so the next
// layer may launch once this one's last wave has started, and its blocks load their state while
// this layer's last blocks drain.
DEFINE_EXACT_OF(regs_wide3_pdl, regs_wide, bf16, bf16, 256, bf16, 128, PDL)
DEFINE_EXACT_OF(regs_wide3_pdl, regs_wide, f32, float, 256, float, 64, PDL)
