/*
DSA top-k, one CTA a row (issue 14): per stream m, the k candidates of highest score out of C, with
no cluster, no DSMEM and no cluster barrier. topk_model.select_row_onecta is the NumPy emulation of
exactly this logic (digits, the direct writes, the threshold-bin buffer, overflow, the index-order
take), tested against reference.topk on the CPU.

The op and its conventions: exactly those of topk_radix.cu (reference.topk is the rule):
    scores [M][C] float32 row-major; out [M][k] int32: the members (finite scores among the top k,
    the lower index winning among equal scores, NaN as -inf, -0 == +0), in no particular order, in
    slots [0, F), then -1 in [F, k). The key map (topk_key) is topk_common.cuh's: -inf / NaN -> 0
    (never a member, never counted), +inf -> 0xff800000 (chosen first, then -1).

Design (dsa_topk_onecta): grid (1, M), 1024 threads a CTA, one CTA a row; digits of 12 / 10 / 10
bits (key bits 31..20, 19..10, 9..0). Every nonzero key has digit 0 >= 8 (the least, -FLT_MAX, is
0x00800000), so bin 0 holds key 0 alone and b0 = 0 can mean "fewer than k nonzero keys".
  pass 1 (HBM): the row in batches of 4 float4 a thread (64 KiB of loads a CTA; C % 4 != 0: 16
    scalar loads), the batch ONE_AHEAD = 3 later prefetched into L2 meanwhile (~256 KiB of the row
    in flight an SM without registers to hold it); digit 0 of every nonzero key into h0 (4096
    bins) by shared atomics; a warp whose 512 keys of a batch share one bin adds once (one-level
    rows, sorted runs).
  digit 0: block scan of h0 in descending bin order -> b0, G0 = #(keys in bins above b0).
  pass 2 (L2): every key in a bin above b0 (not +inf) is a member: written straight to out at a
    shared counter (one warp scan and one atomic a warp a batch); every nonzero key of bin b0 goes
    to a shared buffer of (key, index), ONE_CAP entries (~0.6% of an N(0,1) row at 2048 of 262144).
  digits 1 and 2 over bin b0's keys only: from the buffer, or, when it overflowed (a tie level or a
    degenerate row of more than ONE_CAP keys in one bin), from the row again (global, L2) -> T, G =
    #(key > T), Q = k - G keys == T to take, E = #(key == T) = h2[b2].
  write: bin b0's keys > T (not +inf), and those == T when Q == E, at the shared counter (after
    pass 2's G0 - #(+inf) direct members); when 0 < Q < E (tie rows only) the row is re-read in
    index order, tiles of 4096 with a block exclusive scan, and the first Q keys == T written at
    slots (G - #(+inf)) + their rank. Then -1 in [F, k), F = G - #(+inf) + Q (T finite).
  Slots: direct and in-bin members [0, G - #(+inf)), ties [G - #(+inf), F), -1 [F, k): disjoint,
  so no write races; nothing reads out.
Code is kept small (loops over batches, not unrolled over the row): the whole kernel's machine
code is fetched into every SM's instruction cache after the sweep's L2 flush.
The select itself is topk_onecta.cuh's one_select (shared with topk_split.cu) over the row
(OneRowSrc) into the output (OneRowOut).
Shared memory: 24 KiB of histograms + 20 KiB of buffer: 45.2 KB static; __launch_bounds__(1024, 1).
*/

#include "topk_onecta.cuh"

extern "C" __global__ void __launch_bounds__(ONE_THREADS, 1)
    dsa_topk_onecta(const float* __restrict__ scores, int* __restrict__ out, int C_, int k_) {
    __shared__ __align__(16) OneShared s;
    TK_ENTER(0u);
    const unsigned C = (unsigned)C_, k = (unsigned)k_;
    const float* row = scores + (size_t)blockIdx.y * C;
    int* orow = out + (size_t)blockIdx.y * k;
    one_reset(s);
    // C % 4 == 0: float4 loads (the row 16-B aligned)
    one_select<true, true>(OneRowSrc{row, C, (C & 3u) == 0u}, OneRowOut{row, C, orow}, k, s);
    TK_MARK(TK_EXIT);
}
