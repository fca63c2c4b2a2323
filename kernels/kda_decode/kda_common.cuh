/*
KDA decode step (GLM-5.3-Flash Kimi Delta Attention, one token per stream): the op, its layouts and
what every design shares. Each design is one .cu beside this header (kernels/kda_decode/__init__.py
lists them); designs measured and dropped are in NOTES.md.

The op, per stream m and head h (float32 arithmetic inside every kernel):
    qn = q / sqrt(sum(q^2) + eps) * scale          kn = k / sqrt(sum(k^2) + eps)
    alpha_c = exp(g_c)                             (g is the per-key-channel log-decay, < 0)
    F[c,j]  = alpha_c * S[c,j]                     fade
    vhat_j  = sum_c F[c,j] kn_c                    predict
    u_j     = beta * (v_j - vhat_j)                correct
    S'[c,j] = F[c,j] + kn_c u_j                    write (in place)
    o_j     = sum_c S'[c,j] qn_c = w_j + u_j (kn . qn),  w_j = sum_c F[c,j] qn_c
The single-pass identity in the last line is what every kernel uses: vhat_j and w_j come from ONE
sweep over the faded column, so o never needs the updated state read back.

Lazy formulation (seed paper): the state buffer holds S_stored with S_true = S_stored + kprev dprev^T.
One step: F = alpha * (S_stored + kprev dprev^T); vhat, w from F; d = beta (v - vhat);
o = w + d (kn . qn); S_stored <- F; knew = kn, dnew = d. The store of F does not depend on the
reduction, so the state is streamed once (one read, one write, no second touch); the rank-one
correction is deferred to the next step. kprev/dprev and knew/dnew MUST be different buffers: the
several blocks of one head read kprev/dprev while one of them writes knew/dnew.

Conventions: K = V = 128 (asserted by the launcher). Head index mh = m * H + h, mh < M * H.
    q, k, v, o : [M, H, 128]  bf16 (raw 16-bit patterns, unsigned short)
    g          : [M, H, 128]  float32        beta : [M, H] float32
    S          : [M, H, 128 (key row c), 128 (value col j)], j contiguous, bf16 or float32
    kprev, dprev, knew, dnew : [M, H, 128] float32 (lazy variants only)
bf16 is handled by bit manipulation (no <cuda_bf16.h>) so NVRTC needs no system headers.
Every template is instantiated as kda_<variant>_bf16 (bf16 state) and kda_<variant>_f32.
*/
#ifndef KDA_COMMON_CUH
#define KDA_COMMON_CUH
#include "../common/device.cuh"  // neg_inf, pack_bf16x2, smem_addr, dynamic_smem_bytes, cp_async_commit / _wait

typedef unsigned short bf16;  // raw bf16 bits
// Same type as the builtin size_t (redeclaring a typedef to the same type is legal), so the file
// does not depend on whether NVRTC predeclares it without any header.
typedef decltype(sizeof(0)) size_t;

#define KDIM 128  // key dim   (rows of S)
#define VDIM 128  // value dim (cols of S)
#define FULL_MASK 0xffffffffu

// ------------------------------------------------------------------------------------------------
// bf16 <-> float by bit manipulation.

__device__ __forceinline__ float bf2f(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }

__device__ __forceinline__ unsigned short f2bf(float f) {
    unsigned u = __float_as_uint(f);
    // A NaN must stay a NaN: the rounding add could carry its mantissa into the exponent (Inf) and
    // a poisoned or diverged value would then pass a finiteness check looking like an overflow.
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}


// ------------------------------------------------------------------------------------------------
// N consecutive state elements <-> N floats, with the widest single access the byte count allows
// (2, 4, 8 or 16 bytes). Callers guarantee alignment (column offsets are multiples of N).

template <int W>
__device__ __forceinline__ void ld_words(const void* p, unsigned (&w)[W]) {
    static_assert(W == 1 || W == 2 || W == 4, "one access of 4, 8 or 16 bytes");
    if constexpr (W == 1) {
        w[0] = *reinterpret_cast<const unsigned*>(p);
    } else if constexpr (W == 2) {
        uint2 r = *reinterpret_cast<const uint2*>(p);
        w[0] = r.x; w[1] = r.y;
    } else {
        uint4 r = *reinterpret_cast<const uint4*>(p);
        w[0] = r.x; w[1] = r.y; w[2] = r.z; w[3] = r.w;
    }
}

// Stores go to global memory only. The vector forms are inline PTX because NVVM splits a C++
// uint4/uint2 struct store into 32-bit stores (observed in the PTX), which quadruples the store
// instruction count of the 16-byte variants. No "memory" clobber on purpose: it would forbid the
// compiler from hoisting the next rows' loads above this store; that is safe here because no kernel
// reads an address after storing to it (the stored value depends on the only loads of it).
template <int W>
__device__ __forceinline__ void st_words(void* p, const unsigned (&w)[W]) {
    static_assert(W == 1 || W == 2 || W == 4, "one access of 4, 8 or 16 bytes");
    if constexpr (W == 1) {
        *reinterpret_cast<unsigned*>(p) = w[0];
    } else if constexpr (W == 2) {
        asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1]));
    } else {
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                     "r"(w[2]), "r"(w[3]));
    }
}

template <typename T, int N>
struct Cols {
    static constexpr int BYTES = N * (int)sizeof(T);
    static constexpr int W = BYTES / 4;  // 32-bit words per access (0 for a lone bf16)

    // Raw (undecoded) words: lets a caller issue every load first and decode later.
    struct Raw { unsigned w[W > 0 ? W : 1]; };

    static __device__ __forceinline__ Raw load_raw(const T* p) {
        Raw r;
        if constexpr (BYTES == 2) r.w[0] = *reinterpret_cast<const unsigned short*>(p);
        else ld_words<W>(p, r.w);
        return r;
    }

    static __device__ __forceinline__ void decode(const Raw& r, float (&f)[N]) {
        if constexpr (sizeof(T) == 4) {
#pragma unroll
            for (int i = 0; i < N; ++i) f[i] = __uint_as_float(r.w[i]);
        } else if constexpr (BYTES == 2) {
            f[0] = bf2f((unsigned short)r.w[0]);
        } else {
#pragma unroll
            for (int i = 0; i < W; ++i) {  // little endian: the lower column is the low half
                f[2 * i] = __uint_as_float(r.w[i] << 16);
                f[2 * i + 1] = __uint_as_float(r.w[i] & 0xFFFF0000u);
            }
        }
    }

    static __device__ __forceinline__ void load(const T* p, float (&f)[N]) { decode(load_raw(p), f); }

    static __device__ __forceinline__ void store(T* p, const float (&f)[N]) {
        if constexpr (sizeof(T) == 4) {
            unsigned w[W];
#pragma unroll
            for (int i = 0; i < N; ++i) w[i] = __float_as_uint(f[i]);
            st_words<W>(p, w);
        } else if constexpr (BYTES == 2) {
            *reinterpret_cast<unsigned short*>(p) = f2bf(f[0]);
        } else {
            unsigned w[W];
#pragma unroll
            for (int i = 0; i < W; ++i) w[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
            st_words<W>(p, w);
        }
    }
};

// ------------------------------------------------------------------------------------------------
// Head prologue shared by all block-per-head kernels.

// Raw q, k and alpha = exp(g) into shared memory. Normalisation is NOT applied here: the norms are
// folded into the per-column scalars at the end (vhat = rk * sum F k, w = rq * sum F q), which saves
// a second barrier between "vectors staged" and "vectors normalised".
template <int NT>
__device__ __forceinline__ void stage_head(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                           const float* __restrict__ g, size_t off, float* sq,
                                           float* sk, float* sa) {
    for (int i = threadIdx.x; i < KDIM; i += NT) {
        sq[i] = bf2f(q[off + i]);
        sk[i] = bf2f(k[off + i]);
        sa[i] = __expf(g[off + i]);
    }
}

struct Norms {
    float rq;  // scale / sqrt(q.q + eps): qn = rq * q
    float rk;  // 1 / sqrt(k.k + eps):     kn = rk * k
    float kq;  // kn . qn
};

__device__ __forceinline__ void warp_sum3(float& a, float& b, float& c) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(FULL_MASK, a, o);
        b += __shfl_xor_sync(FULL_MASK, b, o);
        c += __shfl_xor_sync(FULL_MASK, c, o);
    }
}

// Every warp reduces the 128-vectors itself (4 elements a lane, 5 butterfly steps) instead of one
// block reduction: no shared scratch and no extra barrier, and all warps get bit-identical results
// because the reduction order is the same in each.
// qa/ka: this lane's 4 of the 128 elements of q and k (any split, the same in every warp).
__device__ __forceinline__ Norms norms_of_lanes(const float (&qa)[KDIM / 32], const float (&ka)[KDIM / 32],
                                                float eps, float scale) {
    float qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
    for (int e = 0; e < KDIM / 32; ++e) {
        qq = fmaf(qa[e], qa[e], qq);
        kk = fmaf(ka[e], ka[e], kk);
        qk = fmaf(qa[e], ka[e], qk);
    }
    warp_sum3(qq, kk, qk);
    Norms n;
    n.rq = scale * rsqrtf(qq + eps);
    n.rk = rsqrtf(kk + eps);
    n.kq = qk * n.rq * n.rk;
    return n;
}

__device__ __forceinline__ Norms warp_norms(const float* sq, const float* sk, float eps, float scale) {
    const int lane = threadIdx.x & 31;
    float qa[KDIM / 32], ka[KDIM / 32];
#pragma unroll
    for (int i = 0; i < KDIM / 32; ++i) { qa[i] = sq[lane + 32 * i]; ka[i] = sk[lane + 32 * i]; }
    return norms_of_lanes(qa, ka, eps, scale);
}

// The same from the raw bf16 vectors (as copied into a cp.async stage): 4 elements a lane, read as
// one 8-byte word each of q and k.
__device__ __forceinline__ Norms warp_norms_bf16(const bf16* sq, const bf16* sk, int lane, float eps,
                                                 float scale) {
    const uint2 qw = *reinterpret_cast<const uint2*>(sq + 4 * lane);
    const uint2 kw = *reinterpret_cast<const uint2*>(sk + 4 * lane);
    const float qa[KDIM / 32] = {__uint_as_float(qw.x << 16), __uint_as_float(qw.x & 0xFFFF0000u),
                         __uint_as_float(qw.y << 16), __uint_as_float(qw.y & 0xFFFF0000u)};
    const float ka[KDIM / 32] = {__uint_as_float(kw.x << 16), __uint_as_float(kw.x & 0xFFFF0000u),
                         __uint_as_float(kw.y << 16), __uint_as_float(kw.y & 0xFFFF0000u)};
    return norms_of_lanes(qa, ka, eps, scale);
}

// Column-walking kernels load ROW_BATCH rows before using any of them. A row-at-a-time loop whose
// store depends on its load makes every warp wait one full memory latency per row (in-order issue
// stalls at the store); batching keeps 16 loads per thread in flight.
#define ROW_BATCH 16


// ================================================================================================
// 16-byte tiles: shared geometry of regs_v16, lazy_v16 and pipelined_cpasync.
//
// A block of 256 threads covers all 128 rows of a COLS-wide column slice. A 16-byte vector holds
// VEC columns (8 bf16 or 4 fp32). Thread tid owns column vector cv = tid % CV and rows
// c = rg + NRG * i (rg = tid / CV, i < RPT). With cv fastest, each quarter-warp (8 lanes, one 16-byte
// memory phase) touches one contiguous 128-byte row segment: coalesced in global memory and free of
// bank conflicts in shared memory without any row padding. 64-column slices give every thread 32
// state values (RPT * VEC = 32 for both dtypes): enough independent loads in flight without spills.

template <typename T>
struct Tile16 {
    static constexpr int THREADS = 256;
    static constexpr int COLS = 64;
    static constexpr int SLICES = VDIM / COLS;
    static constexpr int VEC = 16 / (int)sizeof(T);
    static constexpr int CV = COLS / VEC;  // 8 (bf16) or 16 (fp32): divides 32
    static constexpr int NRG = THREADS / CV;
    static constexpr int RPT = KDIM / NRG;  // 4 (bf16) or 8 (fp32)
    static constexpr int WARPS = THREADS / 32;
    static_assert(32 % CV == 0 && KDIM % NRG == 0, "lanes sharing a column vector must be in one warp");
};

// Sum vh/w over the threads that share a column vector (lanes cv, cv+CV, ... of each warp by shuffle,
// then the 8 warps through shared memory). After the barrier, red[*][warp][col] holds the partials.
// G is any tile geometry with THREADS/COLS/VEC/CV/WARPS (Tile16, or TileG below).
template <typename G>
__device__ __forceinline__ void column_partials_g(float (&vh)[G::VEC], float (&w)[G::VEC],
                                                  float (*red)[G::WARPS][G::COLS]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = G::CV; o < 32; o <<= 1) {
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) {
            vh[e] += __shfl_xor_sync(FULL_MASK, vh[e], o);
            w[e] += __shfl_xor_sync(FULL_MASK, w[e], o);
        }
    }
    if (lane < G::CV) {  // lane == cv here because CV divides 32
#pragma unroll
        for (int e = 0; e < G::VEC; ++e) {
            red[0][warp][lane * G::VEC + e] = vh[e];
            red[1][warp][lane * G::VEC + e] = w[e];
        }
    }
    __syncthreads();
}

template <typename T>
__device__ __forceinline__ void column_partials(float (&vh)[Tile16<T>::VEC], float (&w)[Tile16<T>::VEC],
                                                float (*red)[Tile16<T>::WARPS][Tile16<T>::COLS]) {
    column_partials_g<Tile16<T>>(vh, w, red);
}

// ================================================================================================
// TileG: the 16-byte tile geometry of regs_pipelined and regs_wide, with the column width a
// template argument (64 columns in regs_pipelined, 32 KiB per block in regs_wide).

template <typename T, int COLS_>
struct TileG {
    static constexpr int THREADS = 256;
    static constexpr int COLS = COLS_;
    static constexpr int SLICES = VDIM / COLS;
    static constexpr int VEC = 16 / (int)sizeof(T);
    static constexpr int CV = COLS / VEC;   // 16 for both instantiations: divides 32
    static constexpr int NRG = THREADS / CV;
    static constexpr int RPT = KDIM / NRG;  // 8 rows per thread
    static constexpr int WARPS = THREADS / 32;
    static_assert(32 % CV == 0 && KDIM % NRG == 0 && COLS <= THREADS, "tile geometry");
};

// ================================================================================================
// cp.async: 16-byte global -> shared copies that complete per commit group (pipelined_cpasync, ring).

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    // .cg: bypass L1; the state is touched once per step, so L1 allocation only evicts q/k/g.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}


// ================================================================================================
// How a launch meets its neighbours in a stream (ring and regs_wide; kda_conv_update uses the same
// two instructions). SOLO: plain. PDL
// (programmatic dependent launch, sm_90): the CTA first lets the next kernel launch
// (griddepcontrol.launch_dependents), so that kernel's CTAs take SM slots as this one's exit; then
// it issues the loads of its first state tiles, and only then waits for the kernel before it
// (griddepcontrol.wait: complete, memory visible) before reading q, k, v, g, beta or writing
// anything. Those early loads are safe only if no kernel still running may write this state:
// since launch_dependents comes first, several launches back can still run at small M, so the
// state must be untouched since the last plain launch. In a decode step a layer's state is written
// only by that layer one step earlier; a chain (runner.replay) launches its first layer plainly,
// each layer on its own state. Everything the previous kernels produce is read after the wait.
// Without the PDL attribute both instructions are no-ops.
enum LaunchOverlap { SOLO = 0, PDL = 1 };

__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ================================================================================================
// extern "C" entry points: kda_<variant>_<bf16|f32>. Argument order (all variants):
//   q, k, v, g, beta, S, [kprev, dprev, knew, dnew,] o, M, H, eps, scale

#define EXACT_ARGS(T)                                                                            \
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,          \
        const float* __restrict__ g, const float* __restrict__ beta, T* __restrict__ S,          \
        bf16* __restrict__ o, int M, int H, float eps, float scale
#define LAZY_ARGS(T)                                                                             \
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,          \
        const float* __restrict__ g, const float* __restrict__ beta, T* __restrict__ S,          \
        const float* __restrict__ kprev, const float* __restrict__ dprev,                        \
        float* __restrict__ knew, float* __restrict__ dnew, bf16* __restrict__ o, int M, int H,  \
        float eps, float scale

// FN is the device template the entry point runs (the variant's own name unless it is another
// design's code with other template arguments).
#define DEFINE_EXACT_OF(NAME, FN, SUFFIX, T, THREADS, ...)                                       \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(EXACT_ARGS(T)) { \
        FN<__VA_ARGS__>(q, k, v, g, beta, S, o, M, H, eps, scale);                              \
    }
#define DEFINE_EXACT(NAME, SUFFIX, T, THREADS, ...) DEFINE_EXACT_OF(NAME, NAME, SUFFIX, T, THREADS, __VA_ARGS__)
#define DEFINE_LAZY(NAME, SUFFIX, T, THREADS)                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(LAZY_ARGS(T)) {  \
        NAME<T>(q, k, v, g, beta, S, kprev, dprev, knew, dnew, o, M, H, eps, scale);            \
    }

#endif  // KDA_COMMON_CUH
