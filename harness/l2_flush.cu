// L2 flush for cold-cache timing: read a buffer of at least 2x the L2 between repetitions.
//
// Reading (not writing) evicts whatever the previous repetition left in L2 and leaves only clean
// lines behind, so the next timed kernel never pays for writing back the flush's own dirty data
// (a memset-style flush would leave ~L2 bytes of dirty lines competing with the timed kernel).
// The XOR and the never-taken store keep the compiler from dropping the loads.

extern "C" __global__ void l2_flush_read(const uint4* __restrict__ buf, unsigned long long n16,
                                         unsigned int* __restrict__ sink) {
    unsigned int acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = buf[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u && threadIdx.x == 1023) sink[0] = acc;  // threadIdx.x < 1024: never
}
