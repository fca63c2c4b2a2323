/*
KDA decode step (GLM-5.3-Flash Kimi Delta Attention, one token per stream), every variant.

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
bf16 is handled by bit manipulation (no <cuda_bf16.h>) so NVRTC needs no include path.
Every template is instantiated as kda_<variant>_bf16 (bf16 state) and kda_<variant>_f32.

Variants:
  lazy_1pass        seed design: 1 block of 128 threads per head, thread j walks column j (coalesced
                    across the warp), lazy form: one read + one write of S.
  global_2pass      same geometry, exact form: pass 1 reads the column for vhat/w, pass 2 re-reads it
                    (L2 hit expected) and writes F + kn u; costs a second read to stay exact.
  vec2              lazy_1pass with 2 adjacent columns per thread (64 threads/head): 4/8-byte
                    accesses halve the load instruction count.
  smem_staged       seed comparison point: the whole 128x128 tile is copied to shared memory, then the
                    exact form runs from there; 32/64 KiB per block caps occupancy.
  regs_v16          exact form with the state slice in registers: 16-byte loads, all issued before
                    the head prologue so their latency overlaps it, shuffle+smem column reduction,
                    16-byte stores from registers; 2 column slices x 256 threads per head.
  lazy_v16          lazy form with the regs_v16 access pattern: each row is stored as soon as it is
                    converted (the store does not wait for the reduction): a pure streaming RMW.
  pipelined_cpasync persistent grid over (head, column-half) tiles; cp.async 16-byte copies fill a
                    2-3 stage shared-memory ring so the next tiles' state is in flight while the
                    current one computes; exact form, 16-byte stores.
  regs_pipelined    persistent grid over 64-column tiles (16 KiB BF16, 32 KiB FP32);
                    each CTA issues the next tile's 16-byte loads before reducing and storing the
                    current one (register double buffering), so a full tile of loads is always in
                    flight and the grid has no wave tail; exact form.
  regs_wide         regs_v16's exact form with 32 KiB per block in both dtypes (the whole head in
                    BF16, 8 16-byte loads per thread); the tile stays as raw words in registers and
                    is decoded twice instead of held as floats, so BF16 fits 4 blocks (128 KiB of
                    loads in flight) per SM: regs_v16's BF16 blocks carry half the bytes.
  ring<...>         persistent CTAs over 32 KiB tiles (a whole BF16 head, half an FP32 one) with a
                    cp.async or bulk-copy ring and lean per-tile code; instantiated as
                    ring32k_reread, bulk32k_hold, bulk32k_early, bulk32k_reread (see its comment).

With the short convolution in front (component kda_decode_conv; ShortConv below has its layout):
  fused_conv_bulk_early_pdl  ring<..., CONV>: the convolution of a head's q, k, v in each tile's
                    prologue, taps shifted in place; whole-head tiles so one CTA owns the head's taps.
  kda_conv_update   the convolution alone (q, k, v out in bf16), the first of the unfused path's
                    two launches; bulk32k_early_pdl is the second.
*/

typedef unsigned short bf16;  // raw bf16 bits
// Same type as the builtin size_t (redeclaring a typedef to the same type is legal), so the file
// does not depend on whether NVRTC predeclares it without any header.
typedef decltype(sizeof(0)) size_t;

#define KDIM 128  // key dim   (rows of S)
#define VDIM 128  // value dim (cols of S)
#define FULL_MASK 0xffffffffu

// ------------------------------------------------------------------------------------------------
// Timeline probes (tools/kda_timeline.py builds with -DKDA_TIMELINE; a normal build compiles them to
// nothing, so the swept kernels' machine code is unchanged). Thread 0 of each CTA writes
// %globaltimer (ns) into row (layer * gridDim.x + block) of kda_timeline, TL_SLOTS words a row:
// slot 0 entry, 1 exit, 2 the SM id, 3 + 2n when the CTA's n-th tile is in shared memory, 4 + 2n
// when thread 0 has issued its stores. The layer is the index of the launch's state pointer in
// kda_tl_states, which the tool fills for a chain of launches (their CTAs overlap in time under
// PDL); a single launch, or a state not listed, is layer 0.
#ifdef KDA_TIMELINE
#define TL_SLOTS 256
#define TL_CAPACITY (1 << 20)
#define TL_MAX_LAYERS 64
__device__ unsigned long long kda_timeline[TL_CAPACITY];
__device__ const void* kda_tl_states[TL_MAX_LAYERS];
__device__ __forceinline__ unsigned& tl_row() {
    __shared__ unsigned row;  // written and read by thread 0 only
    return row;
}
__device__ __forceinline__ void tl_enter(const void* state) {
    if (threadIdx.x != 0) return;
    unsigned layer = 0;
    for (unsigned i = 0; i < TL_MAX_LAYERS; ++i)
        if (kda_tl_states[i] == state) { layer = i; break; }
    tl_row() = layer * gridDim.x + blockIdx.x;
}
__device__ __forceinline__ void tl_put(int slot, unsigned long long value) {
    if (threadIdx.x != 0 || slot >= TL_SLOTS) return;
    const long long at = (long long)tl_row() * TL_SLOTS + slot;
    if (at < TL_CAPACITY) kda_timeline[at] = value;
}
__device__ __forceinline__ unsigned long long tl_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ unsigned tl_smid() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
#define TL_ENTER(state) tl_enter(state)
#define TL_MARK(slot) tl_put((slot), tl_now())
#define TL_SM() tl_put(2, tl_smid())
#else
#define TL_ENTER(state) ((void)0)
#define TL_MARK(slot) ((void)0)
#define TL_SM() ((void)0)
#endif

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

// Two floats -> one word of two bf16 (lo in the low half), round to nearest even, NaN stays NaN:
// the same result as f2bf on each, in ONE instruction (cvt.rn.bf16x2.f32, sm_80+) instead of about
// six per element. With a BF16 state the SM issues ~2x the arithmetic per byte of an FP32 state, so
// the store-side conversion is a visible share of the instruction budget.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
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
// lazy_1pass: one block of 128 threads per head, thread j owns column j.

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

// ================================================================================================
// global_2pass: exact form, same geometry; the column is read twice from global.

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

// ================================================================================================
// vec2: lazy_1pass with two adjacent columns per thread.

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

// ================================================================================================
// smem_staged: the head's whole tile in shared memory (dynamic: 32 KiB bf16, 64 KiB fp32), exact.

__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

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
// G is any tile geometry with THREADS/COLS/VEC/CV/WARPS (Tile16 here, TileG for regs_pipelined).
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
// regs_v16: exact form, the slice of S lives in registers between the load and the store.

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

// ================================================================================================
// lazy_v16: lazy form with the 16-byte pattern; rows are written back as soon as they are faded.

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

// ================================================================================================
// pipelined_cpasync: persistent CTAs, cp.async ring of STAGES tiles.
//
// Work tile t = (mh = t / 2, column half t % 2): the 128 x 64 state slice plus the head's q, k, g
// and the slice's 64 values of v, all copied by cp.async into one stage, so the compute phase reads
// only shared memory. The two halves of a head are adjacent tiles, i.e. neighbouring CTAs, so
// q/k/g are fetched from DRAM once and hit L2 for the second half.

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    // .cg: bypass L1; the state is touched once per step, so L1 allocation only evicts q/k/g.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

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

// ================================================================================================
// How a launch meets its neighbours in a stream (ring and regs_wide). SOLO: plain. PDL
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
// Measured and dropped (reports/2026-11-29-kda_decode_step-h200-140926, code in git at 1cdd740):
// PDL plus an L2 prefetch (cp.async.bulk.prefetch.L2) of two more state tiles per CTA before the
// wait, to keep the DRAM reading while the previous layer drains: 1-6% slower than plain PDL.
enum LaunchOverlap { SOLO = 0, PDL = 1 };

__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// ================================================================================================
// Short convolution: the KDA layer's q_conv1d, k_conv1d, v_conv1d (depthwise, kernel 4, SiLU) for
// one decode token, as the ring's CONV fusion and as the unfused path's own launch.
//   conv_state : [M, 3 (q, k, v), H * 128 (channel), 3 (tap, oldest first)] bf16, updated in place
//   conv_w     : [3 (q, k, v), H * 128, 4 (tap, oldest first; the last weighs the new token)] bf16
//   y = silu(w0 s0 + w1 s1 + w2 s2 + w3 x);   taps <- (s1, s2, x)
// The shift moves the raw bf16 words, so the new taps are exact. Taps are channel-major so a head's
// 128 channels are one contiguous 768-byte run per tensor (3 loads a thread, coalesced per warp).
// Measured and dropped (reports/2026-11-29-kda_decode_conv-h200-154537, code in git at 5dfb0c6):
// the shifted taps written back into the staged buffer and stored by the bulk engine from warp 4
// instead of 9 two-byte stores a thread: 15% slower with BF16 at M = 32 (busy per tile 4.00 us
// against 3.82), the same with FP32: moving those stores off the 4 warps did not shorten the tile.
// Also measured and dropped (reports/2026-11-29-kda_decode_conv-h200-155935, code in git at
// 7512b0c): the taps copied by 16-byte cp.async from 144 threads onto the taps barrier instead of
// by the bulk engine (and ahead of the state copies in the prologue): within 0.5% of this design
// from M = 8 up (2.1% faster at M = 1 with FP32), so the taps do not wait behind the bulk engine's
// state copies.
// Also measured and dropped (reports/2026-11-29-kda_decode_conv-h200-165758 and -170451, code in
// git at 2bd41fb): 32 KiB tiles with FP32 (a head as two 64-column tiles that one CTA takes in a
// row, convolving at the first; two CTAs per SM as in bulk32k_early_pdl). Back to back it was
// 1.7-3.3% faster than the whole-head tile from M = 8 up (79.97 against 82.13 us at M = 32) and
// 16% slower at M = 1, and still 1.4-14.3% behind the two launches from M = 8 (73.90 us at M = 32):
// the FP32 fused ring's cost over the two launches is mostly not its tile shape.
enum ConvFusion { NO_CONV = 0, CONV = 1 };

struct ShortConv {
    static constexpr int TAP_BYTES = 3 * KDIM * 3 * 2;  // one head's taps, 3 tensors: 2304 bytes
    static __device__ __forceinline__ size_t tensor_stride(int H) { return (size_t)H * KDIM * 3; }
    // Offset of channel c of head mh's q taps (k and v follow at tensor_stride).
    static __device__ __forceinline__ size_t taps_at(int mh, int H, int c) {
        const int m = mh / H, h = mh - m * H;
        return ((size_t)m * 3 * H + h) * (KDIM * 3) + (size_t)c * 3;
    }
    static __device__ __forceinline__ uint2 weights(const bf16* __restrict__ conv_w, int tensor,
                                                    size_t channel, int H) {
        return *reinterpret_cast<const uint2*>(conv_w + ((size_t)tensor * H * KDIM + channel) * 4);
    }
    static __device__ __forceinline__ float apply(const unsigned short (&s)[3], uint2 w, unsigned short x) {
        float y = __uint_as_float(w.x << 16) * bf2f(s[0]);
        y = fmaf(__uint_as_float(w.x & 0xFFFF0000u), bf2f(s[1]), y);
        y = fmaf(__uint_as_float(w.y << 16), bf2f(s[2]), y);
        y = fmaf(__uint_as_float(w.y & 0xFFFF0000u), bf2f(x), y);
        return y / (1.f + __expf(-y));  // SiLU; large negative y gives -0
    }
    static __device__ __forceinline__ void shift(bf16* __restrict__ at, const unsigned short (&s)[3], unsigned short x) {
        at[0] = s[1];
        at[1] = s[2];
        at[2] = x;
    }
    // Channel c of head mh, from its taps in shared memory (staged: [tensor][channel][tap], the
    // global layout of one head) and its weights w: q, k, v after the convolution into
    // qkv[0, 1, 2 x KDIM + c] (floats, not rounded to bf16 as an unfused pipeline's intermediate
    // tensors are), the shifted taps stored to conv.
    static __device__ __forceinline__ void step(const bf16* staged, const uint2 (&w)[3], const bf16* xq,
                                                const bf16* xk, const bf16* xv, bf16* __restrict__ conv,
                                                int mh, int H, int c, float* qkv) {
        const unsigned short x[3] = {xq[c], xk[c], xv[c]};
        const size_t at = taps_at(mh, H, c);
#pragma unroll
        for (int i = 0; i < 3; ++i) {
            const unsigned short* t = staged + (i * KDIM + c) * 3;
            const unsigned short s[3] = {t[0], t[1], t[2]};
            qkv[i * KDIM + c] = apply(s, w[i], x[i]);
            shift(conv + at + i * tensor_stride(H), s, x[i]);
        }
    }
};

// The unfused path's first launch: one thread per (stream, tensor, channel), y rounded to bf16 as
// the tensors q, k, v that the step kernel then reads. A programmatic dependent like the step
// kernels: its taps and weights are read before the wait (only this layer's own launch one step
// earlier writes them), x after it.
extern "C" __global__ void __launch_bounds__(256)
kda_conv_update(const bf16* __restrict__ x_q, const bf16* __restrict__ x_k, const bf16* __restrict__ x_v,
                bf16* __restrict__ conv, const bf16* __restrict__ conv_w, bf16* __restrict__ y_q,
                bf16* __restrict__ y_k, bf16* __restrict__ y_v, int M, int H) {
    pdl_launch_dependents();
    const int C = H * KDIM;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // ((m * 3) + tensor) * C + channel
    if (i >= M * 3 * C) return;
    const int c = i % C, tensor = (i / C) % 3, m = i / (3 * C);
    unsigned short s[3];
#pragma unroll
    for (int j = 0; j < 3; ++j) s[j] = conv[(size_t)i * 3 + j];
    const uint2 w = ShortConv::weights(conv_w, tensor, c, H);
    pdl_wait();
    const bf16* xs = tensor == 0 ? x_q : tensor == 1 ? x_k : x_v;
    bf16* ys = tensor == 0 ? y_q : tensor == 1 ? y_k : y_v;
    const unsigned short x = xs[(size_t)m * C + c];
    ys[(size_t)m * C + c] = f2bf(ShortConv::apply(s, w, x));
    ShortConv::shift(conv + (size_t)i * 3, s, x);
}

// ================================================================================================
// regs_pipelined: persistent CTAs, register double buffering across tiles (exact form).
//
// What the other 16-byte designs leave on the table at small M: each block loads its tile, then
// reduces, then stores, so for most of its life a block has no loads in flight, and the grid ends
// in a ragged tail. Here each CTA walks tiles t, t + grid, ... and issues the NEXT tile's 16-byte
// state loads (and its q/k/g/v/beta) before it reduces and stores the current one: the DRAM
// latency of tile n+1 hides behind the arithmetic, barriers and stores of tile n, every CTA always
// has a tile of loads outstanding, and the grid is sized to the resident CTAs so the tail is one
// tile long. The current tile stays as raw words in registers (decoded twice rather than held as
// floats).
//
// regs_wide (below) is the same tile code run once per block (no double buffer), with 32 KiB
// tiles: its registers hold one tile, so more blocks fit and more bytes are in flight per SM.

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

// ================================================================================================
// ring: persistent CTAs, a cp.async or bulk-copy ring of STAGES tiles, with the per-tile overhead
// cut down.
//
// Why not pipelined_cpasync: its BF16 SASS spends ~780 instructions per warp per 16 KiB tile, of
// which ~180 touch the state. A run-time-strided copy loop costs ~300 (integer division and
// remainder handling per chunk), every warp recomputes the q/k norms, and 16 partials per thread
// go through two shuffle rounds. With a BF16 state at ~4 TB/s that is most of the SM's issue
// budget, so the loads of the next tiles issue late. Here:
//   - thread (cv, rg) copies exactly the RPT 16-byte chunks it later reads, at compile-time offsets
//     from two base addresses fixed for the whole kernel: RPT LDGSTS and a few adds per tile;
//   - the per-row scalars (alpha, kn, alpha*kn, alpha*qn) are computed once per tile by KDIM
//     threads into shared memory (the norms by those 4 warps only), then read as one float4 a row;
//   - the tile shape is a template: 16 KiB or 32 KiB tiles, 128 or 256 threads, so the per-tile
//     costs (barriers, norms, cross-warp sums) are spread over more bytes.
// KEEP (RingKeep below): HOLD and HOLD_EARLY keep the faded tile in registers between the reduction
// and the write (5.5 instructions per BF16 element); REREAD re-reads and re-decodes it from the
// stage (about 1.4 more per element, but no registers, so a thread can own 16 rows and the column
// sums need fewer shuffles). The mode also decides when a stage may be refilled (see RingKeep).
// LOADER: per-thread 16-byte cp.async, or the bulk copy engine (one instruction per tile row).
// Measured on the H200 (reports/2026-11-29-kda_decode-h200-110800/FINDINGS.md): this cut the BF16
// instructions per byte 2.5x, yet time moved by at most 2%: the SMs were not the bound. The
// variants kept are the 32 KiB-tile ones; 16 KiB tiles, the 2-stage hold and one deep CTA per SM
// were slower. Also measured and dropped (reports 2026-11-29-kda_decode-h200-114510, -115517,
// -120457 and -121616; the code is in git at 068ffe8, ad8cdec, 897ecec and b592462): 256 or 512 threads per 32 KiB tile,
// a 3-stage REREAD ring, a 2-stage HOLD_EARLY ring, HOLD_EARLY with cp.async, tiles taken from a
// global counter instead of a fixed stride, and the tile written back by bulk-engine stores.

template <typename T, int COLS_, int THREADS_>
struct RingTile {
    static constexpr int THREADS = THREADS_;
    static constexpr int COLS = COLS_;
    static constexpr int SLICES = VDIM / COLS;
    static constexpr int VEC = 16 / (int)sizeof(T);   // columns per 16-byte chunk
    static constexpr int CV = COLS / VEC;             // chunks per tile row
    static constexpr int NRG = THREADS / CV;          // row groups; thread rows are rg + NRG * i
    static constexpr int RPT = KDIM / NRG;            // rows per thread
    static constexpr int WARPS = THREADS / 32;
    static constexpr int ROW = COLS * (int)sizeof(T); // bytes of one tile row in the stage
    static constexpr int TILE = KDIM * ROW;
    static constexpr int OFF_Q = TILE;                // 128 bf16
    static constexpr int OFF_K = OFF_Q + KDIM * 2;    // 128 bf16
    static constexpr int OFF_G = OFF_K + KDIM * 2;    // 128 float
    static constexpr int OFF_V = OFF_G + KDIM * 4;    // COLS bf16
    static constexpr int BYTES = OFF_V + COLS * 2;
    static constexpr int VCHUNKS = (OFF_V - OFF_Q + COLS * 2) / 16;  // 16-byte chunks of q, k, g, v
    // 8 consecutive lanes (one 16-byte shared-memory phase) read one contiguous 128-byte row
    // segment: conflict-free without padding, and coalesced in global memory.
    static_assert(CV >= 8 && 32 % CV == 0, "a row segment of at least 128 bytes per 8 lanes");
    static_assert(THREADS % CV == 0 && KDIM % NRG == 0, "rows split evenly");
    static_assert(THREADS >= KDIM && THREADS >= VCHUNKS && THREADS >= COLS, "one item per thread");
};

__device__ __forceinline__ void cp_async16_s(unsigned saddr, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}

// Bulk (TMA engine) copies completing on an mbarrier, plain sm_90 PTX. One instruction moves a
// whole row segment; the copy engine, not the SM's load/store unit, tracks the bytes in flight.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred P1;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1 bra DONE;\n"
        "bra WAIT;\n"
        "DONE:\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

enum RingLoader { CPASYNC = 0, BULK = 1 };
// What a ring does with the tile between its column sums and its write, and so when a stage may be
// refilled: REREAD reads it again from the stage (refill after the next tile's first barrier);
// HOLD keeps it faded in registers (refill at the top of the next tile, before its wait);
// HOLD_EARLY holds it too and refills right after the column-partials barrier, the first point
// where no thread reads the stage any more, so the next load is in flight during the sums, the
// write and the wait instead of only the wait.
enum RingKeep { REREAD = 0, HOLD = 1, HOLD_EARLY = 2 };
// FUSE: CONV makes the ring also run the short convolution (ShortConv below): q, k, v are then the
// raw projections x_q, x_k, x_v, staged exactly as q, k, v are, and conv / conv_w are used.
template <typename T, int COLS, int THREADS, int STAGES, int KEEP, int LOADER, int OVERLAP,
          int FUSE = NO_CONV>
__device__ __forceinline__ void ring(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                     const bf16* __restrict__ v, const float* __restrict__ g,
                                     const float* __restrict__ beta, T* __restrict__ S,
                                     bf16* __restrict__ o, int M, int H, float eps, float scale,
                                     bf16* __restrict__ conv = nullptr,
                                     const bf16* __restrict__ conv_w = nullptr) {
    using R = RingTile<T, COLS, THREADS>;
    using C = Cols<T, R::VEC>;
    static_assert(STAGES >= 2, "one stage computing, at least one loading");
    // One CTA must own a head's whole conv state: with two column slices in two CTAs, one could
    // read the taps after the other had shifted them.
    static_assert(FUSE == NO_CONV || COLS == VDIM, "conv fusion needs whole-head tiles");
    extern __shared__ __align__(16) unsigned char ring_smem[];
    __shared__ __align__(16) float4 srow[KDIM];  // alpha, kn, alpha*kn, alpha*qn of each key row
    __shared__ __align__(16) float red[2][R::WARPS][R::COLS];
    __shared__ __align__(16) float su[R::COLS];
    __shared__ float skq;
    // CONV: after the stages, one head's taps (ShortConv::TAP_BYTES), refilled one tile ahead.
    constexpr int TAPS_OFF = STAGES * R::BYTES;
    if (dynamic_smem_bytes() < (unsigned)(TAPS_OFF + (FUSE == CONV ? ShortConv::TAP_BYTES : 0))) __trap();
    // CONV: the grid is a multiple of H, so every tile of a CTA is the same head h of another
    // stream and its weights are read once (the launcher sizes the grid so).
    if (FUSE == CONV && gridDim.x % H != 0) __trap();
    TL_ENTER(S);
    TL_MARK(0);
    TL_SM();
    if constexpr (OVERLAP == PDL) pdl_launch_dependents();

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cv = tid % R::CV, rg = tid / R::CV;
    const int ntiles = M * H * R::SLICES;
    const int stride = gridDim.x;
    constexpr size_t HEAD_BYTES = (size_t)KDIM * VDIM * sizeof(T);
    constexpr size_t ROW_STEP_G = (size_t)R::NRG * VDIM * sizeof(T);  // global bytes between own rows
    constexpr int ROW_STEP_S = R::NRG * R::ROW;                         // stage bytes between own rows

    // Fixed per-thread copy addressing.
    const unsigned ring_base = smem_addr(ring_smem);
    const unsigned s_own = rg * R::ROW + cv * 16;
    const unsigned char* g_own = reinterpret_cast<const unsigned char*>(S) +
                                 (size_t)rg * VDIM * sizeof(T) + cv * 16;
    // One 16-byte chunk of q, k, g or the v slice per thread tid < VCHUNKS; per tile it moves by
    // vhead bytes per head and vslice bytes per column slice.
    const unsigned char* vsrc = nullptr;
    unsigned vdst = 0, vhead = 0, vslice = 0;
    if (tid < 16) {
        vsrc = reinterpret_cast<const unsigned char*>(q) + tid * 16; vdst = R::OFF_Q + tid * 16; vhead = KDIM * 2;
    } else if (tid < 32) {
        vsrc = reinterpret_cast<const unsigned char*>(k) + (tid - 16) * 16; vdst = R::OFF_K + (tid - 16) * 16; vhead = KDIM * 2;
    } else if (tid < 64) {
        vsrc = reinterpret_cast<const unsigned char*>(g) + (tid - 32) * 16; vdst = R::OFF_G + (tid - 32) * 16; vhead = KDIM * 4;
    } else if (tid < R::VCHUNKS) {
        vsrc = reinterpret_cast<const unsigned char*>(v) + (tid - 64) * 16; vdst = R::OFF_V + (tid - 64) * 16;
        vhead = VDIM * 2; vslice = R::COLS * 2;
    }

    // BULK: thread c < KDIM copies tile row c (ROW bytes, one instruction); threads 0-3 also copy
    // q, k, g and the v slice whole. Thread 0 arms the stage's barrier with the stage's byte count
    // (the transaction count may go negative first: the phase cannot complete before the arrive).
    // CONV adds one barrier after the stages' for the taps.
    __shared__ __align__(8) unsigned long long full_bar[STAGES + (FUSE == CONV)];
    const unsigned bar0 = smem_addr(full_bar);
    static_assert(FUSE == NO_CONV || LOADER == BULK, "the taps come by bulk copy");
    if constexpr (LOADER == BULK) {
        if (tid == 0) {
#pragma unroll
            for (int s = 0; s < STAGES + (FUSE == CONV); ++s) mbar_init(bar0 + 8 * s, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
    }
    const unsigned char* b_row = reinterpret_cast<const unsigned char*>(S) + (size_t)tid * VDIM * sizeof(T);
    const unsigned char* b_vec = tid == 0 ? reinterpret_cast<const unsigned char*>(q)
                               : tid == 1 ? reinterpret_cast<const unsigned char*>(k)
                               : tid == 2 ? reinterpret_cast<const unsigned char*>(g)
                                          : reinterpret_cast<const unsigned char*>(v);
    const unsigned b_vdst = tid == 0 ? R::OFF_Q : tid == 1 ? R::OFF_K : tid == 2 ? R::OFF_G : R::OFF_V;
    const unsigned b_vbytes = tid == 2 ? KDIM * 4 : tid == 3 ? R::COLS * 2 : KDIM * 2;
    const unsigned b_vhead = tid == 2 ? KDIM * 4 : tid == 3 ? VDIM * 2 : KDIM * 2;

    // A tile's copies: the state part, then q, k, g and the v slice (PDL splits them at the wait).
    auto issue_state = [&](int stage, int t) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const unsigned dst = ring_base + stage * R::BYTES;
        if constexpr (LOADER == BULK) {
            const unsigned bar = bar0 + 8 * stage;
            if (tid == 0) mbar_expect_tx(bar, R::BYTES);
            if (tid < KDIM) bulk_copy(dst + tid * R::ROW, b_row + (size_t)mh * HEAD_BYTES + sl * R::ROW, R::ROW, bar);
        } else {
            const unsigned char* src = g_own + (size_t)mh * HEAD_BYTES + sl * R::ROW;
#pragma unroll
            for (int i = 0; i < R::RPT; ++i) cp_async16_s(dst + s_own + i * ROW_STEP_S, src + i * ROW_STEP_G);
        }
    };
    auto issue_vectors = [&](int stage, int t) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const unsigned dst = ring_base + stage * R::BYTES;
        if constexpr (LOADER == BULK) {
            if (tid < 4) bulk_copy(dst + b_vdst, b_vec + (size_t)mh * b_vhead + (tid == 3 ? sl * R::COLS * 2 : 0), b_vbytes, bar0 + 8 * stage);
        } else {
            if (vsrc) cp_async16_s(dst + vdst, vsrc + (size_t)mh * vhead + sl * vslice);
        }
    };
    auto issue = [&](int stage, int t) {
        issue_state(stage, t);
        issue_vectors(stage, t);
        if constexpr (LOADER != BULK) cp_async_commit();  // one group per issue slot, empty or not (see refill)
    };
    // CONV: tile t's taps, 3 runs of 768 bytes (one per tensor), by thread 0 on the taps barrier.
    // The taps, like the state, are written only by this layer's own launch one step earlier, so
    // the first tile's may be copied before the PDL wait.
    const unsigned taps_bar = bar0 + 8 * STAGES, taps_dst = ring_base + TAPS_OFF;
    auto issue_taps = [&](int tt) {
        if constexpr (FUSE == CONV) {
            if (tid == 0 && tt < ntiles) {
                mbar_expect_tx(taps_bar, ShortConv::TAP_BYTES);
                const bf16* src = conv + ShortConv::taps_at(tt, H, 0);
#pragma unroll
                for (int x = 0; x < 3; ++x)
                    bulk_copy(taps_dst + x * (ShortConv::TAP_BYTES / 3), src + x * ShortConv::tensor_stride(H),
                              ShortConv::TAP_BYTES / 3, taps_bar);
            }
        }
    };
    uint2 conv_wt[3];  // CONV: this CTA's head's weights for channel tid (read once; never written)
    if constexpr (FUSE == CONV) {
        if (tid < KDIM) {
#pragma unroll
            for (int x = 0; x < 3; ++x) conv_wt[x] = ShortConv::weights(conv_w, x, (size_t)(blockIdx.x % H) * KDIM + tid, H);
        }
    }
    unsigned taps_parity = 0;

    // HOLD / REREAD refill the stage tile n - 1 used with tile n + STAGES - 1 (see RingKeep for
    // when); HOLD_EARLY refills tile n's own stage with tile n + STAGES once tile n is in registers.
    constexpr bool HOLDS = KEEP != REREAD;
    auto refill = [&](int stage, int t) {
        const int ahead = t + (KEEP == HOLD_EARLY ? STAGES : STAGES - 1) * stride;
        const int into = KEEP == HOLD_EARLY ? stage : (stage + STAGES - 1) % STAGES;
        if (ahead < ntiles) issue(into, ahead);
        else if constexpr (LOADER != BULK) cp_async_commit();  // keep the group count in step
    };

    // Prologue: STAGES-1 tiles in flight (HOLD_EARLY: all STAGES); with cp.async, empty groups are
    // committed too, so the group count always says which tile has landed.
    constexpr int PROLOGUE = KEEP == HOLD_EARLY ? STAGES : STAGES - 1;
    int t = blockIdx.x;
    if constexpr (OVERLAP == PDL) {
        // State first, then wait for the previous kernel, then its inputs; cp.async puts all the
        // prologue's vectors in one extra group, so the first tile waits for every group.
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s) {
            if (t + s * stride < ntiles) issue_state(s, t + s * stride);
            if constexpr (LOADER != BULK) cp_async_commit();
        }
        issue_taps(t);
        pdl_wait();
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s)
            if (t + s * stride < ntiles) issue_vectors(s, t + s * stride);
        if constexpr (LOADER != BULK) {
            cp_async_commit();
            cp_async_wait<0>();
        }
    } else {
#pragma unroll
        for (int s = 0; s < PROLOGUE; ++s) {
            if (t + s * stride < ntiles) issue(s, t + s * stride);
            else if constexpr (LOADER != BULK) cp_async_commit();
        }
        issue_taps(t);
    }

    // Where column tid's partial sits in red[][warp][]: chunk-major within each 4-float group so
    // the lanes writing partials store contiguous 16-byte vectors.
    const int rcol = ((tid % R::VEC) / 4) * R::CV * 4 + (tid / R::VEC) * 4 + (tid % 4);

    int stage = 0;
    unsigned parity = 0;  // BULK: phase of the current stage's barrier
    int local = 0;  // this CTA's tile count (timeline probes)
    for (; t < ntiles; t += stride) {
        const int mh = t / R::SLICES, sl = t % R::SLICES;
        const float b = tid < R::COLS ? beta[mh] : 0.f;  // latency hidden behind the wait
        if constexpr (KEEP == HOLD) refill(stage, t);
        if constexpr (LOADER == BULK) {
            mbar_wait(bar0 + 8 * stage, parity);  // the barrier's phase makes the stage visible
            if constexpr (!HOLDS) __syncthreads();  // every thread is done with the last tile's stage
        } else {
            // Groups committed before this wait: PROLOGUE + one per earlier tile (+ this tile's,
            // for HOLD; + the prologue's vector group for PDL, already complete); tile n's group
            // must be complete.
            cp_async_wait<KEEP == REREAD ? STAGES - 2 : STAGES - 1>();
            __syncthreads();  // the other threads' copies are visible; the last tile is done
        }
        TL_MARK(3 + 2 * local);
        if constexpr (KEEP == REREAD) refill(stage, t);
        const unsigned char* st = ring_smem + stage * R::BYTES;

        // CONV: q, k, v after the convolution, as floats in red[0] (free until the column partials,
        // which come after the next barrier; vj is read before it for that reason).
        float* const qkv = &red[0][0][0];
        float vj_conv = 0.f;
        if constexpr (FUSE == CONV) {
            if (tid < KDIM) {
                mbar_wait(taps_bar, taps_parity);  // landed during the previous tile
                ShortConv::step(reinterpret_cast<const bf16*>(ring_smem + TAPS_OFF), conv_wt,
                                reinterpret_cast<const bf16*>(st + R::OFF_Q),
                                reinterpret_cast<const bf16*>(st + R::OFF_K),
                                reinterpret_cast<const bf16*>(st + R::OFF_V), conv, mh, H, tid, qkv);
            }
            taps_parity ^= 1u;
            __syncthreads();
            issue_taps(t + stride);  // nothing reads the taps buffer any more this tile
        }
        if (tid < KDIM) {  // warps 0-3: norms (each warp, no barrier), then one key row each
            if constexpr (FUSE == CONV) {
                const Norms n = warp_norms(qkv, qkv + KDIM, eps, scale);
                const float a = __expf(reinterpret_cast<const float*>(st + R::OFF_G)[tid]);
                const float kn = n.rk * qkv[KDIM + tid], qn = n.rq * qkv[tid];
                srow[tid] = make_float4(a, kn, a * kn, a * qn);
                if (tid == 0) skq = n.kq;
                vj_conv = qkv[2 * KDIM + tid];  // COLS == KDIM
            } else {
                const bf16* sq = reinterpret_cast<const bf16*>(st + R::OFF_Q);
                const bf16* sk = reinterpret_cast<const bf16*>(st + R::OFF_K);
                const Norms n = warp_norms_bf16(sq, sk, lane, eps, scale);
                const float a = __expf(reinterpret_cast<const float*>(st + R::OFF_G)[tid]);
                const float kn = n.rk * bf2f(sk[tid]), qn = n.rq * bf2f(sq[tid]);
                srow[tid] = make_float4(a, kn, a * kn, a * qn);
                if (tid == 0) skq = n.kq;
            }
        }
        __syncthreads();

        float vh[R::VEC], w[R::VEC];
#pragma unroll
        for (int e = 0; e < R::VEC; ++e) vh[e] = w[e] = 0.f;
        float held[HOLDS ? R::RPT : 1][R::VEC];  // faded rows (HOLD, HOLD_EARLY)
        float knr[HOLDS ? R::RPT : 1];
        // v is read here, before the column-partials barrier, so HOLD_EARLY may refill after it.
        const float vj = FUSE == CONV ? vj_conv
                       : tid < R::COLS ? bf2f(reinterpret_cast<const bf16*>(st + R::OFF_V)[tid]) : 0.f;
#pragma unroll
        for (int i = 0; i < R::RPT; ++i) {
            float s[R::VEC];
            C::load(reinterpret_cast<const T*>(st + s_own + i * ROW_STEP_S), s);
            const float4 r = srow[rg + R::NRG * i];
#pragma unroll
            for (int e = 0; e < R::VEC; ++e) {
                vh[e] = fmaf(s[e], r.z, vh[e]);
                w[e] = fmaf(s[e], r.w, w[e]);
            }
            if constexpr (HOLDS) {
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) held[i][e] = s[e] * r.x;
                knr[i] = r.y;
            }
        }
#pragma unroll
        for (int off = R::CV; off < 32; off <<= 1) {
#pragma unroll
            for (int e = 0; e < R::VEC; ++e) {
                vh[e] += __shfl_xor_sync(FULL_MASK, vh[e], off);
                w[e] += __shfl_xor_sync(FULL_MASK, w[e], off);
            }
        }
        if (lane < R::CV) {  // lane == cv: the warp's sums for chunk cv
#pragma unroll
            for (int e = 0; e < R::VEC; e += 4) {
                const int at = (e / 4) * R::CV * 4 + cv * 4;
                *reinterpret_cast<float4*>(&red[0][warp][at]) = make_float4(vh[e], vh[e + 1], vh[e + 2], vh[e + 3]);
                *reinterpret_cast<float4*>(&red[1][warp][at]) = make_float4(w[e], w[e + 1], w[e + 2], w[e + 3]);
            }
        }
        __syncthreads();
        if constexpr (KEEP == HOLD_EARLY) refill(stage, t);  // nothing reads this stage any more
        if (tid < R::COLS) {
            float a = 0.f, bb = 0.f;
#pragma unroll
            for (int wp = 0; wp < R::WARPS; ++wp) { a += red[0][wp][rcol]; bb += red[1][wp][rcol]; }
            const float u = b * (vj - a);
            o[(size_t)mh * VDIM + sl * R::COLS + tid] = f2bf(bb + u * skq);
            su[tid] = u;
        }
        __syncthreads();

        float uu[R::VEC];
#pragma unroll
        for (int e = 0; e < R::VEC; e += 4) {
            const float4 x = *reinterpret_cast<const float4*>(&su[cv * R::VEC + e]);
            uu[e] = x.x; uu[e + 1] = x.y; uu[e + 2] = x.z; uu[e + 3] = x.w;
        }
        T* dst = S + (size_t)mh * KDIM * VDIM + sl * R::COLS + (size_t)rg * VDIM + cv * R::VEC;
#pragma unroll
        for (int i = 0; i < R::RPT; ++i) {
            float s[R::VEC];
            if constexpr (HOLDS) {
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) s[e] = fmaf(knr[i], uu[e], held[i][e]);
            } else {
                C::load(reinterpret_cast<const T*>(st + s_own + i * ROW_STEP_S), s);
                const float2 r = *reinterpret_cast<const float2*>(&srow[rg + R::NRG * i]);
#pragma unroll
                for (int e = 0; e < R::VEC; ++e) s[e] = fmaf(s[e], r.x, r.y * uu[e]);
            }
            C::store(dst + (size_t)i * R::NRG * VDIM, s);
        }
        TL_MARK(4 + 2 * local);
        ++local;
        if (++stage == STAGES) { stage = 0; parity ^= 1u; }
    }
    if constexpr (LOADER != BULK) cp_async_wait<0>();  // only empty groups remain; drain them
    TL_MARK(1);
}

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

DEFINE_LAZY(lazy_1pass, bf16, bf16, 128)
DEFINE_LAZY(lazy_1pass, f32, float, 128)
DEFINE_EXACT(global_2pass, bf16, bf16, 128, bf16)
DEFINE_EXACT(global_2pass, f32, float, 128, float)
DEFINE_LAZY(vec2, bf16, bf16, 64)
DEFINE_LAZY(vec2, f32, float, 64)
DEFINE_EXACT(smem_staged, bf16, bf16, 128, bf16)
DEFINE_EXACT(smem_staged, f32, float, 128, float)
DEFINE_EXACT(regs_v16, bf16, bf16, 256, bf16)
DEFINE_EXACT(regs_v16, f32, float, 256, float)
DEFINE_LAZY(lazy_v16, bf16, bf16, 256)
DEFINE_LAZY(lazy_v16, f32, float, 256)
// Stages: bf16 tiles are 17.1 KiB, so 3 stages (+4.3 KiB scratch) = 56 KiB and 3 CTAs/SM keep up to
// 6 tiles (96 KiB) in flight per SM; fp32 tiles are 33.1 KiB, so 2 stages = 70.5 KiB still fit 3
// CTAs/SM (3 tiles, 96 KiB in flight) where 3 stages would drop to 2 CTAs/SM for the same bytes.
DEFINE_EXACT(pipelined_cpasync, bf16, bf16, 256, bf16, 3)
DEFINE_EXACT(pipelined_cpasync, f32, float, 256, float, 2)
// 64-column tiles for both dtypes: a 128-column BF16 tile double-buffered needs 163 registers
// (1 CTA/SM); 64 columns keep it at 116-126 registers, 2 CTAs/SM.
DEFINE_EXACT(regs_pipelined, bf16, bf16, 256, bf16, 64)
DEFINE_EXACT(regs_pipelined, f32, float, 256, float, 64)
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
// regs_wide3 as a programmatic dependent (LaunchOverlap above): a block-per-tile grid, so the next
// layer may launch once this one's last wave has started, and its blocks load their state while
// this layer's last blocks drain.
DEFINE_EXACT_OF(regs_wide3_pdl, regs_wide, bf16, bf16, 256, bf16, 128, PDL)
DEFINE_EXACT_OF(regs_wide3_pdl, regs_wide, f32, float, 256, float, 64, PDL)

// ring configurations: 32 KiB tiles (128 BF16 / 64 FP32 columns), the tile held in registers or
// re-read, the loader (cp.async or bulk). The stage count is the same for both dtypes: 2 stages
// with 128 threads keep 3 CTAs per SM; 3 stages with 256 threads allow 2 (BF16 by its 127
// registers and shared memory, FP32 by shared memory alone: 3 x 33.1 KiB per CTA).
#define DEFINE_RING(NAME, SUFFIX, T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP)                 \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(EXACT_ARGS(T)) {  \
        ring<T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP>(q, k, v, g, beta, S, o, M, H, eps, scale); \
    }
DEFINE_RING(ring32k_reread, bf16, bf16, 128, 128, 2, REREAD, CPASYNC, SOLO)
DEFINE_RING(ring32k_reread, f32, float, 64, 128, 2, REREAD, CPASYNC, SOLO)
DEFINE_RING(bulk32k_hold, bf16, bf16, 128, 256, 3, HOLD, BULK, SOLO)
DEFINE_RING(bulk32k_hold, f32, float, 64, 256, 3, HOLD, BULK, SOLO)
DEFINE_RING(bulk32k_early, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, SOLO)
DEFINE_RING(bulk32k_early, f32, float, 64, 256, 3, HOLD_EARLY, BULK, SOLO)
DEFINE_RING(bulk32k_reread, bf16, bf16, 128, 128, 2, REREAD, BULK, SOLO)
DEFINE_RING(bulk32k_reread, f32, float, 64, 128, 2, REREAD, BULK, SOLO)
DEFINE_RING(ring32k_reread_pdl, bf16, bf16, 128, 128, 2, REREAD, CPASYNC, PDL)
DEFINE_RING(ring32k_reread_pdl, f32, float, 64, 128, 2, REREAD, CPASYNC, PDL)
DEFINE_RING(bulk32k_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL)
DEFINE_RING(bulk32k_early_pdl, f32, float, 64, 256, 3, HOLD_EARLY, BULK, PDL)
// Whole-head tiles in both dtypes (FP32: 64 KiB, 3 stages = 196 KiB, one CTA per SM): the shape the
// fused convolution below must use, measured without it to separate the two costs.
DEFINE_RING(bulk_head_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL)
DEFINE_RING(bulk_head_early_pdl, f32, float, 128, 256, 3, HOLD_EARLY, BULK, PDL)

// The ring with the short convolution fused (FUSE = CONV): the kda_decode_conv component. Whole-head
// tiles in both dtypes (see the static_assert in ring): BF16 is bulk32k_early_pdl's shape; FP32 has
// 64 KiB tiles, so 3 stages (196 KiB) leave one CTA of 256 threads per SM with the same 192 KiB in
// flight per SM as two CTAs of 32 KiB tiles. Argument order:
//   x_q, x_k, x_v, conv_state, conv_w, g, beta, S, o, M, H, eps, scale
#define CONV_ARGS(T)                                                                             \
    const bf16* __restrict__ x_q, const bf16* __restrict__ x_k, const bf16* __restrict__ x_v,    \
        bf16* __restrict__ conv_state, const bf16* __restrict__ conv_w,                          \
        const float* __restrict__ g, const float* __restrict__ beta, T* __restrict__ S,          \
        bf16* __restrict__ o, int M, int H, float eps, float scale
#define DEFINE_RING_CONV(NAME, SUFFIX, T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP, FUSE)      \
    extern "C" __global__ void __launch_bounds__(THREADS) kda_##NAME##_##SUFFIX(CONV_ARGS(T)) {   \
        ring<T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP, FUSE>(x_q, x_k, x_v, g, beta, S, o, M, H, \
                                                                    eps, scale, conv_state, conv_w); \
    }
DEFINE_RING_CONV(fused_conv_bulk_early_pdl, bf16, bf16, 128, 256, 3, HOLD_EARLY, BULK, PDL, CONV)
DEFINE_RING_CONV(fused_conv_bulk_early_pdl, f32, float, 128, 256, 3, HOLD_EARLY, BULK, PDL, CONV)
