/*
KDA decode step with its short convolution in front (component kda_decode_conv): the convolution of
one decode token, shared by the fused ring (fused_conv_bulk_early_pdl.cu through ring.cuh) and the
unfused path's own launch (conv_update.cu). The step's op and layouts: kda_common.cuh.
*/
#ifndef KDA_SHORT_CONV_CUH
#define KDA_SHORT_CONV_CUH

#include "kda_common.cuh"

// Short convolution: the KDA layer's q_conv1d, k_conv1d, v_conv1d (depthwise, kernel 4, SiLU) for
// one decode token, as the ring's CONV fusion and as the unfused path's own launch.
//   conv_state : [M, 3 (q, k, v), H * 128 (channel), 3 (tap, oldest first)] bf16, updated in place
//   conv_w     : [3 (q, k, v), H * 128, 4 (tap, oldest first; the last weighs the new token)] bf16
//   y = silu(w0 s0 + w1 s1 + w2 s2 + w3 x);   taps <- (s1, s2, x)
// The shift moves the raw bf16 words, so the new taps are exact. Taps are channel-major so a head's
// 128 channels are one contiguous 768-byte run per tensor (3 loads a thread, coalesced per warp).

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

#endif  // KDA_SHORT_CONV_CUH
