/*
DSA indexer, kpool compress (seed 003 §8.5; seed 001 kpool_compress; the rule and its float64
reference: reference.py kpool_compress; the component: kpool_spec.py). Memory-bound streaming.

The op, per stream m with n_m = lengths[m] tokens (the query at n_m - 1), pool p, channel d:
    P        = context / 4 pooled rows per stream (the output's pool axis)
    Pm       = n_m / 4 (integer division): the complete pools, every one of their 4 tokens visible
    l_r      = gates[m][4p + r][d] + ape[r][d]                   r = 0..3, FP32
    pooled[m][p][d] = sum_r softmax_r(l)_r * keys[m][4p + r][d]  for p < Pm  (BF16, round to nearest even)
    pooled[m][p][d] = 0                                          for Pm <= p < P: defined so that the
              whole output is written; the scan scores those pools -inf, nothing reads them. Their
              tokens (past n_m) are never read.
Layouts (row-major, contiguous): keys, gates [M][context][128] bf16 (256 B a token row), ape [4][128]
float32, lengths [M] int32, pooled [M][P][128] bf16. Offsets are size_t: at M = 64 and 1M tokens a
tensor holds 2^33 elements.

kpool_compress_v1: a thread per (pool, 8 channels): work item i of M * P * 16 covers pool pp = i / 16
(over all streams: m = pp / P, p = pp % P) and channels 8 (i % 16) .. + 7. A lane issues 8
independent 16-byte ld.global.nc loads (its 8 channels of the pool's 4 key rows and 4 gate rows)
before any math: the 16 lanes of a pool read one whole 256-byte token row per load, a warp two pools,
so every load instruction covers 16 full 32-byte sectors and every byte of a complete pool is read
exactly once. The softmax is max-subtracted in FP32 with __expf (ex2.approx under --use_fast_math:
~2 ulp relative on each weight, far below the BF16 output's 2^-9), the division by the weight sum
once per channel; one 16-byte store a lane (a warp writes 512 contiguous bytes). Grid-stride over the
items with a persistent grid: the stride (grid x 256) is a multiple of 16, so a thread keeps its 8
channels and holds their 32 ape values in registers, loaded once.
*/

typedef unsigned short bf16;  // raw bf16 bits
typedef decltype(sizeof(0)) size_t;

#define KPOOL_THREADS 256
#define KPOOL 4                          // tokens a pool (indexer.kpool); the launcher refuses others
#define KPOOL_DIM 128                    // channels a key (indexer.head_dim)
#define KPOOL_GROUPS (KPOOL_DIM / 8)     // 16-byte channel groups a row

#include "../common/device.cuh"  // bf_lo / bf_hi, pack_bf16x2

// The read-only 16-byte load (sparse_mla_common.cuh has the same; scan_common.cuh's is volatile).
__device__ __forceinline__ uint4 ld_nc_v4(const void* p) {
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ void st_v4_b32(void* p, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
}

// Element e (0..7) of a 16-byte word of 8 bf16, as float.
__device__ __forceinline__ float elem(const uint4& v, int e) {
    const unsigned w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
    return (e & 1) ? bf_hi(w) : bf_lo(w);
}

extern "C" __global__ void __launch_bounds__(KPOOL_THREADS)
kpool_compress_v1(const bf16* __restrict__ keys, const bf16* __restrict__ gates, const float* __restrict__ ape,
                  const int* __restrict__ lengths, bf16* __restrict__ pooled, int M, int P) {
    // As a programmatic dependent in a multi-kernel step (the DSA layer's KernelStep), wait for the
    // launch before it to complete: the previous step's scan may still read pooled. A no-op in a
    // plain launch.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int stride = gridDim.x * KPOOL_THREADS;                      // a multiple of 16
    const int first = blockIdx.x * KPOOL_THREADS + threadIdx.x;
    const int g = first % KPOOL_GROUPS;                                // this thread's channel group
    float a[KPOOL][8];
#pragma unroll
    for (int r = 0; r < KPOOL; ++r) {
        const float4 lo = *reinterpret_cast<const float4*>(ape + r * KPOOL_DIM + 8 * g);
        const float4 hi = *reinterpret_cast<const float4*>(ape + r * KPOOL_DIM + 8 * g + 4);
        a[r][0] = lo.x; a[r][1] = lo.y; a[r][2] = lo.z; a[r][3] = lo.w;
        a[r][4] = hi.x; a[r][5] = hi.y; a[r][6] = hi.z; a[r][7] = hi.w;
    }
    const int total = M * P * KPOOL_GROUPS;                            // < 2^31: the launcher checks
    for (int i = first; i < total; i += stride) {
        const int pp = i / KPOOL_GROUPS;                               // pool over all streams
        const int m = pp / P, p = pp - m * P;
        // the output row of this lane: 16 bytes at channel 8 g of pooled[m][p]
        bf16* dst = pooled + (size_t)pp * KPOOL_DIM + 8 * g;
        if (p >= __ldg(lengths + m) / KPOOL) {                         // not a complete pool
            st_v4_b32(dst, 0u, 0u, 0u, 0u);
            continue;
        }
        const size_t row = (size_t)pp * KPOOL;                         // token row 4p of stream m (context = 4P)
        const bf16* kp = keys + row * KPOOL_DIM + 8 * g;
        const bf16* gp = gates + row * KPOOL_DIM + 8 * g;
        uint4 kv[KPOOL], gv[KPOOL];
#pragma unroll
        for (int r = 0; r < KPOOL; ++r) {                              // all 8 loads before any use
            kv[r] = ld_nc_v4(kp + r * KPOOL_DIM);
            gv[r] = ld_nc_v4(gp + r * KPOOL_DIM);
        }
        float out[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            float l[KPOOL];
#pragma unroll
            for (int r = 0; r < KPOOL; ++r) l[r] = elem(gv[r], e) + a[r][e];
            float mx = l[0];
#pragma unroll
            for (int r = 1; r < KPOOL; ++r) mx = fmaxf(mx, l[r]);
            float sum = 0.f, acc = 0.f;
#pragma unroll
            for (int r = 0; r < KPOOL; ++r) {
                const float w = __expf(l[r] - mx);                     // <= 1; the max slot's is 1
                sum += w;
                acc = fmaf(w, elem(kv[r], e), acc);
            }
            out[e] = acc / sum;                                        // sum in [1, 4]
        }
        st_v4_b32(dst, pack_bf16x2(out[0], out[1]), pack_bf16x2(out[2], out[3]),
                  pack_bf16x2(out[4], out[5]), pack_bf16x2(out[6], out[7]));
    }
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
