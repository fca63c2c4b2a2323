// Roofline: device copy and in-place read-modify-write at full memory bandwidth.
//
// Op: dst[i] = src[i] over n bytes (copy), or x[i] ^= pattern in place (rmw). Bytes moved are
// counted as bytes read + bytes written, the way every GB/s figure in attnbench is counted.
// Buffers are 16-byte aligned (CuPy allocations are 256-byte aligned); n16 counts 16-byte words.
//
// copy_v16: one uint4 (16 bytes) per load and store, grid-stride, 4 words in flight per thread:
//           the widest LDG/STG the SM issues, so the fewest instructions per byte. This is the
//           roofline every sweep measures.
// copy_v4:  the same with 4-byte words: 4x the instructions per byte; kept to show what a
//           kernel loses when its accesses are not vectorised.
// rmw_v16:  in-place XOR over uint4 words: the access pattern of a recurrent-state update
//           (read then write the same line), which must reach the copy rate too.

#define UNROLL 4

extern "C" __global__ void copy_v16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                    unsigned long long n16) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    // Issue UNROLL independent loads before the first store: more bytes in flight per thread.
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = r[u];
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

extern "C" __global__ void copy_v4(const unsigned int* __restrict__ src, unsigned int* __restrict__ dst,
                                   unsigned long long n4) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        unsigned int r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = r[u];
    }
    for (; i < n4; i += stride) dst[i] = src[i];
}

extern "C" __global__ void rmw_v16(uint4* __restrict__ x, unsigned long long n16, unsigned int pattern) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = x[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            r[u].x ^= pattern; r[u].y ^= pattern; r[u].z ^= pattern; r[u].w ^= pattern;
            x[i + u * stride] = r[u];
        }
    }
    for (; i < n16; i += stride) {
        uint4 r = x[i];
        r.x ^= pattern; r.y ^= pattern; r.z ^= pattern; r.w ^= pattern;
        x[i] = r;
    }
}
