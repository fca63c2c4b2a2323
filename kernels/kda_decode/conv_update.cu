/*
KDA decode step with its short convolution (component kda_decode_conv): kda_conv_update, the
convolution alone, the first of the unfused path's two launches (bulk32k_early_pdl.cu is the
second). The convolution's layout: short_conv.cuh; the step's: kda_common.cuh.
*/

#include "kda_common.cuh"
#include "short_conv.cuh"

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
