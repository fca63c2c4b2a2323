// Roofline: device copy and in-place read-modify-write at full memory bandwidth.
//
// Op: dst[i] = src[i] over n bytes (copy), or x[i] ^= pattern in place (rmw). Bytes moved are
// counted as bytes read + bytes written, the way every GB/s figure in attnbench is counted.
// Buffers are 16-byte aligned (CuPy allocations are 256-byte aligned); n counts words.
//
// copy_v16:       block-contiguous tiles of 16-byte words: thread t of a block moves words
//                 tile + u*blockDim + t for u < UNROLL, so each unrolled load of a warp is 512
//                 contiguous bytes and a block's UNROLL loads cover one contiguous span (DRAM
//                 pages are opened once); 8 loads in flight per thread before the first store.
//                 Grid-stride over tiles with a grid sized to the resident blocks. The roofline.
// copy_v16_cs:    copy_v16 with streaming cache hints (ld.global.cs / st.global.cs: evict-first),
//                 so a copy that does not fit in L2 does not churn it; measures what the hint buys.
// copy_v16_strided: the textbook grid-stride loop, UNROLL words per thread spaced a whole grid
//                 apart: the same instruction count as copy_v16 but every unrolled access lands
//                 in a different DRAM page; kept to show why access locality matters.
// copy_v4:        copy_v16's layout with 4-byte words: 4x the instructions per byte; kept to
//                 show what vectorisation buys.
// rmw_v16:        in-place XOR in copy_v16's layout: the access pattern of a recurrent-state
//                 update (read then write the same line), which must reach the copy rate too.

typedef unsigned long long u64;


__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
    uint4 r;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void store_streaming(uint4* p, const uint4& v) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// Block-contiguous tiles, grid-stride over tiles; the ragged last tile is bounds-checked.
template <typename W, int UNROLL, bool STREAMING>
__device__ __forceinline__ void copy_tiles(const W* __restrict__ src, W* __restrict__ dst, u64 n) {
    const u64 tile = (u64)blockDim.x * UNROLL;
    for (u64 base = (u64)blockIdx.x * tile; base < n; base += (u64)gridDim.x * tile) {
        W r[UNROLL];
        const u64 i0 = base + threadIdx.x;
        if (base + tile <= n) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if constexpr (STREAMING) r[u] = load_streaming(src + i0 + (u64)u * blockDim.x);
                else r[u] = src[i0 + (u64)u * blockDim.x];
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if constexpr (STREAMING) store_streaming(dst + i0 + (u64)u * blockDim.x, r[u]);
                else dst[i0 + (u64)u * blockDim.x] = r[u];
            }
        } else {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u64 i = i0 + (u64)u * blockDim.x;
                if (i < n) dst[i] = src[i];
            }
        }
    }
}

extern "C" __global__ void copy_v16(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n16) {
    copy_tiles<uint4, 8, false>(src, dst, n16);
}

extern "C" __global__ void copy_v16_cs(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n16) {
    copy_tiles<uint4, 8, true>(src, dst, n16);
}

extern "C" __global__ void copy_v4(const unsigned int* __restrict__ src, unsigned int* __restrict__ dst, u64 n4) {
    copy_tiles<unsigned int, 8, false>(src, dst, n4);
}

extern "C" __global__ void copy_v16_strided(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n16) {
    constexpr int UNROLL = 8;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = src[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * stride] = r[u];
    }
    for (; i < n16; i += stride) dst[i] = src[i];
}

extern "C" __global__ void rmw_v16(uint4* __restrict__ x, u64 n16, unsigned int pattern) {
    constexpr int UNROLL = 8;
    const u64 tile = (u64)blockDim.x * UNROLL;
    for (u64 base = (u64)blockIdx.x * tile; base < n16; base += (u64)gridDim.x * tile) {
        uint4 r[UNROLL];
        const u64 i0 = base + threadIdx.x;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + (u64)u * blockDim.x;
            if (i < n16) r[u] = x[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + (u64)u * blockDim.x;
            r[u].x ^= pattern; r[u].y ^= pattern; r[u].z ^= pattern; r[u].w ^= pattern;
            if (i < n16) x[i] = r[u];
        }
    }
}
