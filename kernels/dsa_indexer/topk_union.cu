/*
DSA top-k, one thread-block cluster a row with the row held on chip (issue 14; kernels
`dsa_topk_union_c<CS>`, variant radix_union). The op, the contract and the tie rule are
topk_radix.cu's; topk_model.select_row_union emulates every decision below.

What bound the split designs at 512 of 65536, M = 32 (TOPK_NOTES.md, radix_split2's timeline): a
fixed chain in series after the launch (~2.7 us): the slice read through the ring (4.2), pass 2
over it (2.8), three digit searches (1.9), the hand-off through global memory and the row's last
CTA's select over the P k = 2048 candidates it reads back from L2 (5.8). Here:
  1. CTA r of the row's cluster of CS loads its slice (split_slice r of CS, at most UNI_KEYS keys:
     32 a thread) with every load issued at once (8 x 16 B a thread, 128 KiB an SM in flight, no
     ring): float4 q < UNI_REG_VECS of a thread into registers, the rest by cp.async into its own
     slots of shared memory (UNI_HELD_BYTES; 4 float4 in registers spilled 40 B, 3 12 B). Key j of thread t:
     element 4 (q 1024 + t) + e of the slice, q = j / 4, e = j % 4 (float4 loads when C % 4 == 0,
     else 4-B loads of the same elements); past the slice, key 0.
  2. Each thread's largest key (its "thread max", taken over the scores by fmaxf and converted once;
     key 0 counts nothing) goes into the CTA's digit-0
     histogram (12 bits, 4096 bins, one shared atomic a thread); the CTA's bound b_r is the bin of
     its ceil(k / CS)-th largest thread max (s2_find, 0 when it has fewer). barrier.cluster; every
     CTA reads the CS bounds (one DSMEM load a lane of warp 0) and takes the least, b. tlb = b << 20
     is a lower bound on T, the row's k-th key: each rank has ceil(k / CS) thread maxes >= its b_r
     >= tlb, CS ceil(k / CS) >= k distinct keys in all. (The first H200 run, at 99d880a, summed
     the CS histograms through DSMEM instead: 2.25 us for 16 B x CS a thread; and clusters of 4
     at one CTA an SM fit only 30 at once on the H200, so 2 of M = 32's clusters ran in a second
     wave: topk_model.CLUSTER_SLOTS, pick_union.) On N(0, 1) rows the union of the keys >= tlb
     is ~0.8-1.6 k at 512 of 65536 (the CPU model counts it at every sweep point).
  3. b = 0 (a rank with fewer than ceil(k / CS) nonzero thread maxes, or its in the lowest bin):
     nothing is pushed. Else every key >= tlb (found by comparing the scores with
     topk_key_floor(tlb); only the hits are converted) goes, as a (key, row index) pair, to the union in
     rank 0's dynamic shared memory after its held part (one atom.shared::cluster add on rank 0's
     counter a warp, st.shared::cluster for the pairs; pairs past UNI_CAP are counted, not stored).
     barrier.cluster; every rank but 0 exits (nobody reads another rank's shared memory after it).
  4. Rank 0 with n <= UNI_CAP pairs in the union: first uni_window_select (one 10-bit digit over
     the window [tlb, kmax], kmax the row's largest thread max read with the bounds, counted by the
     push itself into rank 0's s.h1 with red.shared::cluster; the k-th key's bin taken whole or
     ranked by one warp: 2-3 block barriers, where s2_select's three digits take ~11 and measured
     3.5 us at 512 of 65536 on the H100, c717f47, and a 12-bit window counted by rank 0 1.58,
     b2a6e50); where that cannot finish
     (+inf in the row, a partial bin of more than 32 keys: tie levels), s2_select over them
     (topk_select.cuh, DROP: +inf counts towards k and is written -1) into the row's output, its
     partial tie level from the union (ShrFinalOut): exact, since T >= tlb puts every key of the
     row >= T, ties included, in the union. Otherwise (b = 0, or more than UNI_CAP keys >= tlb: tie levels, few eligible,
     ordered rows) s2_select over the row itself through the ring (one CTA: correct, slow).
Under --use_fast_math the thread max (max.ftz) and the push's compare (setp.ge.ftz) flush denormal
scores to +-0, so for rows with denormals the bin of a thread max, b and the union can differ from
topk_model.select_row_union's exact arithmetic (a second reader's emulation: 556 of 3,000 adversarial
rows); the result cannot: the flush is monotone, so the pushed set is still upward-closed and holds
every counted thread max's element (>= k of them), hence every key >= T, and the select uses the
exact keys (topk_key of the raw bits).
Tried on the push and removed (TOPK_NOTES.md, Stop 32; H100, event-timed p50 at M = 32 against
radix_union in the same call): a segmented push from a local counter (a948558: 13.73 against 13.12
us; push phase 1.73 against 1.68); each rank gathering its keys locally and rank 0 pulling them with
coalesced DSMEM loads at a split barrier (a97468e: 14.14 against 13.34; push 1.60 against 1.71, the
pull and the others' wait ~1 us more); the push by st.async / red.async completing on rank 0's
mbarrier, no cluster barrier after it (d333829: 13.95 against 13.50; push 1.93 against 1.70, rank 0
done at the same time). Under ncu (a948558) the barrier after the push stalled on its release
(MEMBAR.ALL.GPU), but that stall was the remote stores landing: rank 0 receives ~800 pairs and ~800
bin adds, one lane each, however they are sent or fenced.
The own form (dsa_topk_union_own_c<CS>, union_body's OWN; topk_model.select_row_union(own=True)):
the first cluster barrier and the bounds' exchange (0.51 + 0.27 us of the H200 timeline at M = 32,
3200498) go. Each CTA arrives on the cluster barrier right after one_reset (rank 0's n_union and
s.h1 zeroed) and waits for it only before its push, by which time every rank has long arrived; it
pushes its keys >= its own b_r << 20, counting each in rank 0's window over [b_r << 20,
uni_own_top] (fixed by the bound, so the ranks' digits agree wherever their bounds do), and stores b_r
and its largest thread max in every rank. After the cluster barrier that ends the push every rank
reads the CS bounds: where they differ (and the least, bmin, is nonzero) the ranks above bmin push
their keys in [bmin << 20, b_r << 20) in a second round and a third barrier follows, so the union is
again every key >= bmin << 20; rank 0 then counts it into bmin's window itself (one pass over the
union: the ranks' digits disagreed) before the window select; where they agree the select starts at
the search as above. The float4 slots past a short slice (6 and 7 at
clusters of 3 on 65536 keys: a quarter of each thread's compares) are neither stored nor compared.
The own form with its two bin searches by one warp (dsa_topk_union_ownw_c<CS>, union_body's WFIND;
the same decisions, so topk_model.select_row_union(own=True) emulates it too): the CTA's bound over
the 4096-bin thread-max histogram and rank 0's window search over 1024 bins by s2_find_warp
(topk_select.cuh: warp 0 alone, one block barrier) instead of s2_find (1024 threads, two barriers):
0.59 and 0.78 us of the own form's H200 timeline at M = 32 (ec9fb09), both on its critical path.
dsa_topk_union_ownwl_c<CS> (LATE) also moves the own form's cluster arrive from under the loads' flight
to after the read's barrier: the own form's read phase is 0.15 us (H200) to 0.56 us (H100) longer than
radix_union's, whose loads are the same, and the arrive's release is what it adds to that phase.
Measured, both correct and slower: 0.4-0.5 us over the own form at M = 8, 32 and 64 (H100, 797aadc;
TOPK_NOTES.md, Stop 40), so the two searches' barriers are not what those phases cost; kept as variants.
The own form with regions (dsa_topk_union_owns_c<CS>, union_body's SEG;
topk_model.select_row_union(own=True, regions=True)): rank r pushes into its own region of rank 0's
union, pairs [r UNI_CAP / CS, (r + 1) UNI_CAP / CS), its slots claimed by one atomic a warp on a
counter in its own shared memory, and each warp adds its count to rank 0's region_n[r] by a
red.shared::cluster that nobody waits for (the cluster barrier ending the round publishes it). Why: in the own form every
warp of every rank waits for the return of an atomic on rank 0's one counter (96 such at clusters of
3), and the push is the largest phase after the read (1.41 us of the own form's H200 timeline at
M = 32, ec9fb09); the per-rank segments tried at b785159 took the push from 1.51 to 0.89 us (H100)
and lost it in rank 0's compaction. Here rank 0 reads the regions in place (UniRegions: a pair's
region from the regions' prefix counts, CS compares) in the window select and its recount, and moves
them into one run only on the fallback path (ties, +inf). The union is the own form's set in another
order; a region past UNI_CAP / CS pairs sends the row to the row's select, as a union past UNI_CAP
does (the CPU model, N(0, 1) rows: at 512 of 65536 the largest region held 132 of 512 pairs in
clusters of 8; at 2048 of 262144 in clusters of 8, 477 of 512 over 1500 rows, a thin margin).
The early forms (dsa_topk_union_early<EV>_c<CS>, union_body's EV = 3 or 4;
topk_model.select_row_union(early=EV)): the exchanged form with its bound taken from the first EV
float4 slots of each thread only. The register loads are issued first and the cp.async copies in
two groups (slots REG..EV-1, then EV..), so the local bound, the cluster barrier and the bounds'
exchange (0.60 + 0.51 + 0.27 us of the H200 timeline at M = 32, 3200498) run while group B lands.
The bound stays a lower bound on T (CS ceil(k / CS) thread maxes over distinct keys are above it),
but a lower one: the CPU model puts the union at ~1000 (EV 4) and ~1500 (EV 3) keys at 512 of 65536
in clusters of 3, against ~800, and past UNI_CAP at 2048 of 262144 in clusters of 8 (the row path
then: correct, slow). The window is the own form's, fixed by the bound, since the row's largest key
is known only after group B: each thread's max over every slot goes to rank 0's kmax_row by
red.shared::cluster.max before the push (zeroed by rank 0 before the exchange's barrier, read after
the push's), for the +inf test alone.
No workspace and no counter in global memory: a launch leaves nothing behind. Cluster barriers: 2
(the own form: 2, 3 where the bounds differ).
Shared memory: OneShared (45,200 B) + 4 words (+ the bulk form's mbarrier, the regions form's CS
counts; ptxas: 45,216 B to 45,312 B static) + UNI_DYN_BYTES dynamic (UNI_BULK_DYN_BYTES for the
bulk form: the held part, then the union; the fallback's ring over the held part, rank 0's being
dead by then); one CTA an SM;
__launch_bounds__(1024, 1). __cluster_dims__ at compile time (a plain launch of grid (CS, M) runs
it); a launch of another cluster shape traps.
*/

#define UNI_CTAS_PER_SM 1                // __launch_bounds__(ONE_THREADS = 1024, 1): the SM's registers are one CTA's
#define UNI_VECS 8                       // float4 a thread: UNI_REG_VECS in registers, the rest in shared memory
#define UNI_REG_VECS 2                   // float4 a thread held in registers (more spill: header)
#define UNI_KEYS 32768                   // keys a CTA at most: UNI_VECS x 4 x ONE_THREADS
#define UNI_HELD_BYTES 98304             // the slice's shared-memory part (float4 q >= UNI_REG_VECS)
#define UNI_DYN_BYTES 131072             // the held part, then the union; the fallback's ring over both
#define UNI_CAP 4096                     // (key, row index) pairs the union holds
// The bulk form (dsa_topk_union_bulk_c<CS>): the whole slice in shared memory, copied by the bulk
// (TMA) engine, then the union after it
#define UNI_BULK_HELD_BYTES 131072       // UNI_KEYS x 4 B
#define UNI_BULK_DYN_BYTES 163840        // the slice, then the union; the fallback's ring over the slice

#include "topk_union.cuh"   // union_body and DSA_TOPK_UNION_FORM

#define DSA_TOPK_UNION_KERNEL(CS)                                          \
    DSA_TOPK_UNION_FORM(dsa_topk_union, CS, false, false)                  \
    DSA_TOPK_UNION_FORM(dsa_topk_union_bulk, CS, true, false)              \
    DSA_TOPK_UNION_FORM(dsa_topk_union_own, CS, false, true)               \
    DSA_TOPK_UNION_FORM(dsa_topk_union_ownw, CS, false, true, 0u, true)    \
    DSA_TOPK_UNION_FORM(dsa_topk_union_ownwl, CS, false, true, 0u, true, true) \
    DSA_TOPK_UNION_FORM(dsa_topk_union_owns, CS, false, true, 0u, false, false, true) \
    DSA_TOPK_UNION_FORM(dsa_topk_union_early3, CS, false, false, 3u)       \
    DSA_TOPK_UNION_FORM(dsa_topk_union_early4, CS, false, false, 4u)

DSA_TOPK_UNION_KERNEL(1)
DSA_TOPK_UNION_KERNEL(2)
DSA_TOPK_UNION_KERNEL(3)
DSA_TOPK_UNION_KERNEL(4)
DSA_TOPK_UNION_KERNEL(8)
