/*
DSA indexer scan, the stream-only floor (component indexer_stream): the bandwidth ceiling of every
scan design. The op and layouts: scan_common.cuh.

It reads exactly the key bytes a scan must read (the eligible keys of every stream, in the point's
layout and dtype, and for fp8 their scales) once each, and writes one uint32 per candidate:
    checksum[m][c] = XOR of key(m, c)'s 32-bit words in the cand_dim packing
                     (bf16: low half = XOR of the even dims, high half = XOR of the odd dims;
                      fp8: byte b = XOR of the codes of dims d = b mod 4), XOR the scale's bits (fp8)
    checksum[m][c] = 0 for eligible[m] <= c < C (nothing read)
the same value in either layout, so the host checks it byte-exact (scan_spec.key_checksums).

scan_stream_cand_dim<KEY_BYTES>: grid (ceil(C / keys per CTA), M), block 256; a CTA covers
    16 (bf16) / 32 (fp8) keys a warp batch x 8 warps x STREAM_BATCHES batches.
    A key is KEY_BYTES / 16 lanes (16 bf16, 8 fp8); one 16-byte load instruction of a warp reads 512
    contiguous bytes (2 bf16 keys / 4 fp8 keys); STREAM_UNROLL loads a lane are issued before any
    XOR (8 KiB a warp in flight). The group's words are XOR-reduced by shuffles; the group's first
    lane writes. A batch that reaches past eligible[m] takes the guarded path (loads only below it).
scan_stream_dim_cand<FP8>: grid (ceil(Cpad / STREAM_DC_CANDS(FP8)), M), block 128.
    Thread t owns one 16-byte column block (8 bf16 / 16 fp8 candidates) and walks the 128 dim rows
    (a warp: 512 contiguous bytes of one row per load, STREAM_UNROLL rows in flight), XORing each
    row's block into an accumulator per dim parity (bf16) or dim mod 4 (fp8); the candidates' words
    are then assembled from those (byte permutes) and stored, 0 past eligible[m]. Column blocks past
    eligible[m] are not read; the pad columns of the last block are read (they are in the row).
*/

#include "scan_common.cuh"

#define STREAM_THREADS 256
#define STREAM_WARPS (STREAM_THREADS / 32)
#define STREAM_UNROLL 8   // 16-byte loads a lane issues before it XORs any
#define STREAM_BATCHES 4  // batches of STREAM_UNROLL loads a warp does in turn
#define STREAM_DC_THREADS 128
// What a CTA covers (literals: the launcher reads them from here).
#define STREAM_CD_KEYS_PER_CTA_BF16 512    // 2 keys a load x 8 loads x 8 warps x 4 batches
#define STREAM_CD_KEYS_PER_CTA_FP8 1024    // 4 keys a load x ...
#define STREAM_DC_CANDS_PER_CTA_BF16 1024  // 128 threads x 8 candidates
#define STREAM_DC_CANDS_PER_CTA_FP8 2048   // 128 threads x 16 candidates

// ---- cand_dim ------------------------------------------------------------------------------------

template <int KEY_BYTES>
__device__ __forceinline__ void stream_cand_dim(const unsigned char* __restrict__ keys,
                                                const float* __restrict__ scales,
                                                const int* __restrict__ eligible,
                                                unsigned* __restrict__ checksum, int M, int C) {
    constexpr int LANES = KEY_BYTES / 16;             // lanes per key
    constexpr int KEYS_PER_LOAD = 32 / LANES;         // keys a warp load instruction covers
    constexpr int KEYS_PER_WARP = KEYS_PER_LOAD * STREAM_UNROLL;
    constexpr int KEYS_PER_CTA = KEYS_PER_WARP * STREAM_WARPS * STREAM_BATCHES;
    static_assert(KEYS_PER_CTA == (KEY_BYTES == 256 ? STREAM_CD_KEYS_PER_CTA_BF16 : STREAM_CD_KEYS_PER_CTA_FP8),
                  "the launcher's keys per CTA");
    const int m = blockIdx.y;
    if (m >= M) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int elig = ld_nc_s32(eligible + m);
    const int sub = lane / LANES, part = lane % LANES;  // key within a load, 16-byte part of the key
    const size_t stream = (size_t)m * (size_t)C;
#pragma unroll 1
    for (int batch = 0; batch < STREAM_BATCHES; ++batch) {
        // consecutive warps read consecutive batches: a CTA's loads stay within one region
        const int base = blockIdx.x * KEYS_PER_CTA + (batch * STREAM_WARPS + warp) * KEYS_PER_WARP;
        if (base >= C) break;  // warp-uniform
        const unsigned char* kp = keys + (stream + (size_t)base) * KEY_BYTES + part * 16;
        uint4 v[STREAM_UNROLL];
        if (base + KEYS_PER_WARP <= elig) {  // warp-uniform: every key of the batch eligible
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u)
                v[u] = ld_nc_v4(kp + (size_t)(u * KEYS_PER_LOAD + sub) * KEY_BYTES);
        } else {
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) {
                v[u] = make_uint4(0u, 0u, 0u, 0u);
                if (base + u * KEYS_PER_LOAD + sub < elig)
                    v[u] = ld_nc_v4(kp + (size_t)(u * KEYS_PER_LOAD + sub) * KEY_BYTES);
            }
        }
#pragma unroll
        for (int u = 0; u < STREAM_UNROLL; ++u) {
            unsigned x = v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
#pragma unroll
            for (int o = LANES / 2; o > 0; o >>= 1) x ^= __shfl_xor_sync(FULL_MASK, x, o);
            const int c = base + u * KEYS_PER_LOAD + sub;
            if (part == 0 && c < C) {
                if (c >= elig) x = 0u;
                else if (scales != nullptr) x ^= __float_as_uint(ld_nc_f32(scales + stream + c));
                checksum[stream + c] = x;
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
scan_stream_cand_dim_bf16(const unsigned char* __restrict__ keys, const int* __restrict__ eligible,
                          unsigned* __restrict__ checksum, int M, int C) {
    stream_cand_dim<256>(keys, nullptr, eligible, checksum, M, C);
}

extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
scan_stream_cand_dim_fp8(const unsigned char* __restrict__ keys, const float* __restrict__ scales,
                         const int* __restrict__ eligible, unsigned* __restrict__ checksum, int M, int C) {
    stream_cand_dim<128>(keys, scales, eligible, checksum, M, C);
}

// ---- dim_cand ------------------------------------------------------------------------------------

// Byte b of each word of a, b, c, d -> the word {a.b, b.b, c.b, d.b} (byte 0 from a).
__device__ __forceinline__ unsigned gather_byte(unsigned a, unsigned b, unsigned c, unsigned d, int byte) {
    const unsigned lo = __byte_perm(a, b, (unsigned)(byte | ((byte + 4) << 4)));       // a.b, b.b
    const unsigned hi = __byte_perm(c, d, (unsigned)(byte | ((byte + 4) << 4)));       // c.b, d.b
    return __byte_perm(lo, hi, 0x5410);
}

template <bool FP8>
__device__ __forceinline__ void stream_dim_cand(const unsigned char* __restrict__ keys,
                                                const float* __restrict__ scales,
                                                const int* __restrict__ eligible,
                                                unsigned* __restrict__ checksum, int M, int C, int Cpad) {
    constexpr int ELEM = FP8 ? 1 : 2;
    constexpr int CANDS = 16 / ELEM;                   // candidates of one 16-byte column block
    constexpr int PHASES = FP8 ? 4 : 2;                // dims d with the same d % PHASES share a word byte
    static_assert(STREAM_DC_THREADS * CANDS == (FP8 ? STREAM_DC_CANDS_PER_CTA_FP8 : STREAM_DC_CANDS_PER_CTA_BF16),
                  "the launcher's candidates per CTA");
    const int m = blockIdx.y;
    if (m >= M) return;
    const int elig = ld_nc_s32(eligible + m);
    const int c0 = (blockIdx.x * STREAM_DC_THREADS + threadIdx.x) * CANDS;
    if (c0 >= C) return;  // no barrier below: threads may leave on their own
    unsigned out[CANDS];
    if (c0 >= elig) {
#pragma unroll
        for (int i = 0; i < CANDS; ++i) out[i] = 0u;
    } else {
        const unsigned char* col = keys + (size_t)m * SCAN_DIM * (size_t)Cpad * ELEM + (size_t)c0 * ELEM;
        const size_t row = (size_t)Cpad * ELEM;        // bytes between dim rows
        uint4 acc[PHASES];
#pragma unroll
        for (int p = 0; p < PHASES; ++p) acc[p] = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll 1
        for (int d0 = 0; d0 < SCAN_DIM; d0 += STREAM_UNROLL) {
            uint4 v[STREAM_UNROLL];
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) v[u] = ld_nc_v4(col + (size_t)(d0 + u) * row);
#pragma unroll
            for (int u = 0; u < STREAM_UNROLL; ++u) {  // d0 is a multiple of 8: (d0 + u) % PHASES == u % PHASES
                acc[u % PHASES].x ^= v[u].x;
                acc[u % PHASES].y ^= v[u].y;
                acc[u % PHASES].z ^= v[u].z;
                acc[u % PHASES].w ^= v[u].w;
            }
        }
        if constexpr (FP8) {
            // candidate 4 k + b (k: word of the block, b: byte) = byte b of word k of each phase
            const unsigned w0[4] = {acc[0].x, acc[0].y, acc[0].z, acc[0].w};
            const unsigned w1[4] = {acc[1].x, acc[1].y, acc[1].z, acc[1].w};
            const unsigned w2[4] = {acc[2].x, acc[2].y, acc[2].z, acc[2].w};
            const unsigned w3[4] = {acc[3].x, acc[3].y, acc[3].z, acc[3].w};
#pragma unroll
            for (int k = 0; k < 4; ++k)
#pragma unroll
                for (int b = 0; b < 4; ++b) out[4 * k + b] = gather_byte(w0[k], w1[k], w2[k], w3[k], b);
        } else {
            // candidate 2 k + h: half h of word k; low half from the even dims, high half from the odd
            const unsigned e[4] = {acc[0].x, acc[0].y, acc[0].z, acc[0].w};
            const unsigned o[4] = {acc[1].x, acc[1].y, acc[1].z, acc[1].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                out[2 * k] = __byte_perm(e[k], o[k], 0x5410);      // e.lo16 | o.lo16 << 16
                out[2 * k + 1] = __byte_perm(e[k], o[k], 0x7632);  // e.hi16 | o.hi16 << 16
            }
        }
#pragma unroll
        for (int i = 0; i < CANDS; ++i) {
            const int c = c0 + i;
            if (c >= elig) {
                out[i] = 0u;
            } else if constexpr (FP8) {
                out[i] ^= __float_as_uint(ld_nc_f32(scales + (size_t)m * (size_t)C + c));
            }
        }
    }
    unsigned* dst = checksum + (size_t)m * (size_t)C;
#pragma unroll
    for (int i = 0; i < CANDS; ++i)
        if (c0 + i < C) dst[c0 + i] = out[i];
}

extern "C" __global__ void __launch_bounds__(STREAM_DC_THREADS)
scan_stream_dim_cand_bf16(const unsigned char* __restrict__ keys, const int* __restrict__ eligible,
                          unsigned* __restrict__ checksum, int M, int C, int Cpad) {
    stream_dim_cand<false>(keys, nullptr, eligible, checksum, M, C, Cpad);
}

extern "C" __global__ void __launch_bounds__(STREAM_DC_THREADS)
scan_stream_dim_cand_fp8(const unsigned char* __restrict__ keys, const float* __restrict__ scales,
                         const int* __restrict__ eligible, unsigned* __restrict__ checksum, int M, int C,
                         int Cpad) {
    stream_dim_cand<true>(keys, scales, eligible, checksum, M, C, Cpad);
}
