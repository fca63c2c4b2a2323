// Holds a stream until the host has enqueued a whole batch of timed repetitions (harness/timing.py,
// timing.hold). Without it a repetition whose host-side launch (Python, CuPy, argument packing)
// takes longer than the GPU's flush plus the kernel leaves the GPU idle between the start event and
// the kernel, and that host gap lands inside the sample: small kernels read slower and noisier
// than they run. With it the batch waits behind this kernel, which spins on a flag in pinned host
// memory (mapped: UVA) until the host sets it after the batch's last end event, so every sample
// holds only what the GPU did. nvbench's blocking kernel does the same.
//
// A bound on the spin (max_cycles of the SM clock) keeps a host that never releases from hanging
// the stream: the kernel then sets *timed_out and returns, and the caller drops the batch and times
// the step without a hold.

extern "C" __global__ void host_hold(const volatile unsigned int* __restrict__ flag, long long max_cycles,
                                     unsigned int* __restrict__ timed_out) {
    const long long t0 = clock64();
    while (*flag == 0u) {
        if (clock64() - t0 > max_cycles) {
            *timed_out = 1u;
            return;
        }
        __nanosleep(256);
    }
}
