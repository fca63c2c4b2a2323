"""Launchers and declarations of the DSA top-k variants (component ``dsa_topk``).

- ``radix_cluster`` (ours): ``topk_radix.cu``, a radix threshold select over a thread-block
  cluster per row (1, 2, 4 or 8 CTAs, picked so that M x CTAs fills the SMs), histograms merged
  through distributed shared memory; never sorts the row. ``radix_cluster4``: the same at 4 CTAs a
  row whatever M (one CTA an SM at M = 32), to price the pick.
- ``radix_cluster_len``: radix_cluster with the cluster size capped at 4 below 262144 candidates
  (pick_cluster_len, from the H200 run). ``radix_lean`` / ``radix_lean4``: the same logic with the
  two row passes batched (``dsa_topk_lean_c*``; every count identical, so topk_model emulates it).
  ``radix_bound`` / ``radix_bound4``: ``dsa_topk_bound_c*``, a lower bound on the threshold from
  pass 1's per-thread two largest keys, every later count over the keys above it
  (``topk_model.select_row(bound=True)``).
- ``resident`` / ``resident_wide`` (ours): ``topk_resident.cu``, the row read once into registers
  and shared memory (65536 a CTA), every digit pass on chip; 1 CTA a row up to 65536 candidates,
  clusters of 2 / 4 to 262144 (``resident_wide``: slices of at most 32768 where that fits).
- ``radix_onecta`` (ours): ``topk_onecta.cu``, one CTA of 1024 threads a row whatever its length (no
  cluster, no DSMEM): digit 0 on 12 bits over the row (HBM, prefetched ahead into L2), then the keys
  above the threshold bin written straight out and the bin's keys buffered in shared memory, digits
  1 and 2 from that buffer only; small machine code (loops, not unrolled rows).
- ``radix_split`` (ours): ``topk_split.cu``, P CTAs a row in one launch, no cluster and no
  grid-wide wait: radix_onecta's select (``topk_onecta.cuh``) over each slice writes the slice's top
  k as candidates to a workspace the step owns, and the row's last CTA (a per-row counter) selects
  the final k from them. ``radix_split2`` (ours): ``topk_split2.cu``, the same design and decisions
  with a pass 2 over each lane's hits only, (key, index) candidate pairs and 2-barrier bin searches.
  ``radix_sample`` (ours): ``dsa_topk_sample`` in the same file, split2 whose stage 1 reads its slice
  once: a sampled bound, one pass buffering the keys above it, the select over that buffer.
- ``radix_union`` (ours): ``topk_union.cu``, one thread-block cluster a row (topk_model.pick_union: 1-8
  CTAs, the most SMs whose clusters fit at once), the slice held on chip (32 keys a thread: 8 in registers, 24
  in shared memory; every load issued at once); each CTA's bound from its thread maxes, the least
  of them bounds the row's k-th key from below, every key above it goes to a union in rank 0's
  shared memory, and rank 0 selects from it (s2_select, topk_select.cuh); the row itself where the
  union does not serve. ``radix_union_bulk`` (ours): the same kernel with the whole slice copied into
  shared memory by the bulk (TMA) engine (``dsa_topk_union_bulk_c<CS>``). ``radix_union_own`` (ours):
  no bound exchange before the push (``dsa_topk_union_own_c<CS>``): each CTA pushes against its own
  bound and a window fixed by it, rank 0 checks that the bounds agreed, and the padding slots past
  the slice are neither stored nor compared. ``radix_union_own_wfind`` (ours): the own form with its two
  bin searches by one warp (``s2_find_warp``, one block barrier; ``dsa_topk_union_ownw_c<CS>``).
  ``radix_union_own_wfind_late`` (ours): that form with its cluster arrive after the read
  (``dsa_topk_union_ownwl_c<CS>``). ``radix_union_own_regions`` (ours): the own form with each rank's
  pushes in its own region of rank 0's union, claimed on a local counter (``dsa_topk_union_owns_c<CS>``).
  ``radix_union_early3`` / ``radix_union_early4`` (ours):
  radix_union with each CTA's bound from its first 3 or 4 float4 slots (the registers' loads, issued
  first, and the first cp.async group), found and exchanged while the rest of the slice lands
  (``dsa_topk_union_early<EV>_c<CS>``). ``radix_union_half`` / ``radix_union_half_own`` (ours):
  ``topk_union_half.cu``, radix_union and radix_union_own in CTAs of 512 threads, two an SM, clusters of
  6-8 (topk_model.pick_union at UNION_HALF: at M = 32, 7 CTAs a row on ~112 SMs).
- ``torch_topk`` (peer): ``torch.topk`` unsorted on our stream, non-finite picks mapped to -1 as a
  caller would.
- ``flashinfer_topk`` / ``flashinfer_topk_lower`` (peers): ``flashinfer.top_k(x, k)`` as called by
  default (no tie rule), and with ``tie_break=SMALL`` (lower index among equal scores: our
  contract); the row's note says which algorithm FlashInfer dispatched to.
- ``ref_topk`` (CPU): reference.topk row by row; ``model_radix`` (CPU): topk_model, the kernel's
  logic emulated in NumPy with the kernel's buffer size and cluster pick; ``model_resident`` (CPU):
  topk_resident.cu's logic (topk_model.select_row_resident); ``model_onecta`` (CPU): topk_onecta.cu's
  (topk_model.select_row_onecta); ``model_split`` (CPU): topk_split.cu's
  (topk_model.select_row_split); ``model_sample`` (CPU): dsa_topk_sample's (topk_model.select_row_sample);
  ``model_share`` (CPU): dsa_topk_share's (topk_model.select_row_share); ``model_union`` /
  ``model_union_own`` / ``model_union_own_regions`` / ``model_union_early3`` / ``model_union_early4`` /
  ``model_union_half`` / ``model_union_half_own`` (CPU): dsa_topk_union's, dsa_topk_union_own's,
  dsa_topk_union_owns's, dsa_topk_union_early<EV>'s and the half forms' (topk_model.select_row_union).

Nothing here imports cupy, torch or flashinfer at import time.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import NamedTuple

import numpy as np

from harness.cuda import KernelCall, KernelStep, get_kernel
from harness.registry import Launch, Variant
from kernels.flashinfer_site import prepare_flashinfer
from kernels.sparse_mla.variants import source_define

from . import reference, topk_model
from . import topk_spec as spec

HERE = pathlib.Path(__file__).resolve().parent
RADIX_SOURCE = "topk_radix.cu"
CLUSTER_SIZES = (1, 2, 4, 8)        # the kernels topk_radix.cu instantiates (8: the portable limit)
H200_SMS = 132


def radix_define(name: str) -> int:
    """A ``#define`` of topk_radix.cu (block size, buffer entries): declared once, in the source."""
    return source_define(str(HERE / RADIX_SOURCE), name)


def pick_cluster(M: int, sms: int) -> int:
    """CTAs per row: the fewest that give every SM a CTA (M x CTAs >= SMs), else the most there are."""
    return next((cs for cs in CLUSTER_SIZES if M * cs >= sms), CLUSTER_SIZES[-1])


# Below this many candidates a row, clusters of 4 beat pick_cluster's 8 (H200, M = 32, e9f434a:
# 25.09 against 31.10 us at 65536, 15.76 against 24.10 at 16384; at 262144 8 wins, 61.50 to 63.65).
LONG_ROW = 262144


def pick_cluster_len(M: int, C: int, sms: int) -> int:
    """pick_cluster, capped at 4 CTAs a row for rows shorter than LONG_ROW: there the cluster's
    fixed cost (barriers, DSMEM merges of 8 ranks) outweighs the halved slice."""
    cs = pick_cluster(M, sms)
    return min(cs, 4) if C < LONG_ROW else cs


def _supports_radix(geometry, point) -> str | None:
    if spec.n_candidates(geometry, point) >= 2 ** 31 or spec.k_selected(geometry, point) >= 2 ** 31:
        return "the radix kernel indexes rows with 32-bit integers"
    return None


def _supports_share(geometry, point) -> str | None:
    """dsa_topk_share's segment holds a slice's buffer (SMP_CAP pairs) or its k best: k rounded up to
    4 must fit SHR_DATA pairs (the CTAs a row, at most 16 by pick_split, always fit SHR_MAX_P)."""
    kp, data = (spec.k_selected(geometry, point) + 3) & ~3, split_define("SHR_DATA", "share")
    if kp > data:
        return f"k = {spec.k_selected(geometry, point)}: a slice's segment holds {data} pairs (k rounded up to 4 must fit)"
    return _supports_radix(geometry, point)


def _make_radix_build(cluster: int | None, by_length: bool = False, kernel: str = "radix"):
    """The radix kernel's launcher (``dsa_topk_<kernel>_c<CS>``), with a fixed cluster size or
    (None) pick_cluster's, or with by_length pick_cluster_len's."""

    def build(geometry, point, inputs, backend) -> KernelStep:
        Mn, sms = int(point["M"]), int(backend.props["multiProcessorCount"])
        if cluster:
            cs = cluster
        elif by_length:
            cs = pick_cluster_len(Mn, spec.n_candidates(geometry, point), sms)
        else:
            cs = pick_cluster(Mn, sms)
        return _radix_step(geometry, point, inputs, backend, cs, kernel)
    return build


def _topk_step(geometry, point, inputs, backend, source: str, symbol: str, cs: int, threads: int,
               smem: int, note: str) -> KernelStep:
    """One launch of a top-k kernel (scores, indices, C, k) on grid (cs, M), the indices poisoned."""
    cp = backend.cp
    Mn, C, k = int(point["M"]), spec.n_candidates(geometry, point), spec.k_selected(geometry, point)
    fn = get_kernel(backend, HERE / source, symbol, dyn_smem=smem)
    scores = backend.to_device(inputs["scores"])
    with backend.stream:
        buffers = {"indices": cp.empty((Mn, k), cp.int32)}
    kernels = [KernelCall(fn, (cs, Mn), threads, smem, lambda b: (scores, b["indices"], np.int32(C), np.int32(k)))]
    step = KernelStep(backend, kernels, buffers, {}, {"indices": topk_model.POISON},
                      lambda b: {"indices": backend.to_host(b["indices"])}, dependent=False)
    step.note = note
    return step.ready()


def _radix_step(geometry, point, inputs, backend, cs: int, kernel: str = "radix") -> KernelStep:
    Mn = int(point["M"])
    return _topk_step(geometry, point, inputs, backend, RADIX_SOURCE, f"dsa_topk_{kernel}_c{cs}", cs,
                      radix_define("DSA_TOPK_THREADS"), 0,
                      f"dsa_topk_{kernel}_c{cs}: cluster of {cs} CTAs per row ({Mn * cs} CTAs), "
                      f"{radix_define('DSA_TOPK_CAP')} buffer entries a CTA")


RESIDENT_SOURCE = "topk_resident.cu"
RESIDENT_SIZES = (1, 2, 4)          # the kernels topk_resident.cu instantiates


def resident_define(name: str) -> int:
    """A ``#define`` of topk_resident.cu (block size, keys a CTA, dynamic shared memory)."""
    return source_define(str(HERE / RESIDENT_SOURCE), name)


def pick_resident(C: int, per_cta: int | None = None) -> int | None:
    """CTAs a row for the resident kernel: the fewest of RESIDENT_SIZES whose slices (ceil(C / cs)
    rounded up to 4) hold at most ``per_cta`` keys (default: what a CTA holds); None if none does."""
    cap = resident_define("DSA_TOPK_RES_SLICE")
    per = cap if per_cta is None else min(per_cta, cap)
    return next((cs for cs in RESIDENT_SIZES if ((-(-C // cs) + 3) & ~3) <= per), None)


def pick_resident_wide(C: int) -> int | None:
    """pick_resident at half a CTA's keys a slice (twice the SMs a row on rows of 32769..131072),
    falling back to full slices where 4 CTAs of half are not enough."""
    return pick_resident(C, resident_define("DSA_TOPK_RES_SLICE") // 2) or pick_resident(C)


def _supports_resident(geometry, point) -> str | None:
    C = spec.n_candidates(geometry, point)
    if pick_resident(C) is None:
        cap = resident_define("DSA_TOPK_RES_SLICE")
        return (f"the resident kernel holds {cap} scores a CTA and at most {RESIDENT_SIZES[-1]} CTAs a row "
                f"({cap * RESIDENT_SIZES[-1]} candidates); this row has {C}")
    return None


def _make_resident_build(wide: bool):
    def build(geometry, point, inputs, backend) -> KernelStep:
        Mn, C = int(point["M"]), spec.n_candidates(geometry, point)
        cs = pick_resident_wide(C) if wide else pick_resident(C)
        return _topk_step(geometry, point, inputs, backend, RESIDENT_SOURCE, f"dsa_topk_resident_c{cs}", cs,
                          resident_define("DSA_TOPK_RES_THREADS"), resident_define("DSA_TOPK_RES_SMEM_BYTES"),
                          f"dsa_topk_resident_c{cs}: {cs} CTA{'s' if cs > 1 else ''} a row ({Mn * cs} CTAs, "
                          f"{'a cluster' if cs > 1 else 'no cluster'}), {-(-C // cs)} keys a CTA held on chip")
    return build


ONECTA_SOURCE = "topk_onecta.cu"
ONECTA_HEADER = "topk_onecta.cuh"   # one_select and its constants, shared with topk_split.cu


def onecta_define(name: str) -> int:
    """A ``#define`` of topk_onecta.cuh (block size, buffer entries)."""
    return source_define(str(HERE / ONECTA_HEADER), name)


def _onecta_build(geometry, point, inputs, backend) -> KernelStep:
    Mn = int(point["M"])
    return _topk_step(geometry, point, inputs, backend, ONECTA_SOURCE, "dsa_topk_onecta", 1,
                      onecta_define("ONE_THREADS"), 0,
                      f"dsa_topk_onecta: one CTA of {onecta_define('ONE_THREADS')} threads a row ({Mn} CTAs, no "
                      f"cluster), {onecta_define('ONE_CAP')} threshold-bin entries a CTA")


SPLIT_SOURCE = "topk_split.cu"
SPLIT2_SOURCE = "topk_split2.cu"
# design -> (source, kernel, the #define of its ring's dynamic shared memory, workspace layout):
# "split" writes the candidates' keys and indices to two arrays, "split2" (key, index) uint2 pairs,
# "segments" a segment of SHR_SEG pairs a CTA (its groups, then its header: dsa_topk_share)
SPLIT_DESIGNS = {"split": (SPLIT_SOURCE, "dsa_topk_split", "SPLIT_RING_BYTES", "two arrays"),
                 "split2": (SPLIT2_SOURCE, "dsa_topk_split2", "S2_RING_BYTES", "pairs"),
                 "sample": (SPLIT2_SOURCE, "dsa_topk_sample", "SMP_DYN_BYTES", "pairs"),
                 "share": (SPLIT2_SOURCE, "dsa_topk_share", "SMP_DYN_BYTES", "segments")}


def split_define(name: str, design: str = "split") -> int:
    """A ``#define`` of a split design's source (the ring's dynamic shared memory)."""
    return source_define(str(HERE / SPLIT_DESIGNS[design][0]), name)


def make_split_build(P_fixed: int | None = None, design: str = "split"):
    """radix_split's (design "split") or radix_split2's ("split2") launcher at topk_model.pick_split's
    P, or at ``P_fixed`` CTAs a row (a test's way to run more CTAs than fit at once: the kernels need
    no co-residency)."""
    if design not in SPLIT_DESIGNS:
        raise ValueError(f"design: {design!r}; allowed: {sorted(SPLIT_DESIGNS)}")

    def build(geometry, point, inputs, backend) -> KernelStep:
        return _split_step(geometry, point, inputs, backend, P_fixed, design)
    return build


def split_ws_pairs(design: str, k: int) -> int:
    """(key, index) pairs a CTA's workspace segment holds for a design of layout "pairs" (k rounded up
    to 4) or "segments" (SHR_SEG): the workspace is [M][P][that][2] uint32. ValueError for "two arrays"."""
    layout = SPLIT_DESIGNS[design][3]
    if layout == "pairs":
        return (k + 3) & ~3
    if layout == "segments":
        return split_define("SHR_SEG", design)
    raise ValueError(f"{SPLIT_DESIGNS[design][1]}: workspace layout {layout!r} is not one of (key, index) pairs")


def split_launch(backend, M: int, C: int, k: int, design: str = "split", P_fixed: int | None = None):
    """A split design's launch for M rows of C scores: (kernel, P CTAs a row, kp = k rounded up to
    4 candidate slots a CTA, ring bytes of dynamic shared memory, the workspace layout: "pairs"
    [M][P][kp][2] uint32, "two arrays" [M][P][kp] keys + indices, or "segments" [M][P][SHR_SEG][2]
    uint32). Grid (P, M), block ONE_THREADS; the caller owns the workspace and the [M] uint32 row
    counters, zero before every launch (the kernel leaves them zero)."""
    source, symbol, ring_define, layout = SPLIT_DESIGNS[design]
    P = P_fixed or topk_model.pick_split(M, C, k, int(backend.props["multiProcessorCount"]))
    if layout == "segments":
        max_p, data = split_define("SHR_MAX_P", design), split_define("SHR_DATA", design)
        if P > max_p or ((k + 3) & ~3) > data:
            raise ValueError(f"{symbol}: P = {P} CTAs a row and k = {k}; allowed: P <= {max_p}, "
                             f"k rounded up to 4 <= {data}")
    ring = split_define(ring_define, design)
    fn = get_kernel(backend, HERE / source, symbol, dyn_smem=ring)
    return fn, P, (k + 3) & ~3, ring, layout


def _split_step(geometry, point, inputs, backend, P_fixed: int | None, design: str = "split") -> KernelStep:
    """A split kernel on grid (P, M), P = topk_model.pick_split; the step owns its candidate
    workspace (poisoned with the output: every slot stage 1 should write is checked through stage
    2) and the per-row counters (zero at allocation and after every launch; put back to zero by
    ``poison`` too, so a launch that was cut short cannot leave the next one a wrong count)."""
    cp = backend.cp
    Mn, C, k = int(point["M"]), spec.n_candidates(geometry, point), spec.k_selected(geometry, point)
    fn, P, kp, ring, layout = split_launch(backend, Mn, C, k, design, P_fixed)
    symbol = SPLIT_DESIGNS[design][1]
    scores = backend.to_device(inputs["scores"])
    poison_u32 = topk_model.POISON.view(np.uint32)
    with backend.stream:
        buffers = {"indices": cp.empty((Mn, k), cp.int32), "count": cp.zeros(Mn, cp.uint32)}
        if layout in ("pairs", "segments"):
            buffers["ws"] = cp.empty((Mn, P, split_ws_pairs(design, k), 2), cp.uint32)
            poison = {"indices": topk_model.POISON, "ws": poison_u32}
            args = lambda b: (scores, b["indices"], b["ws"], b["count"], np.int32(C), np.int32(k))  # noqa: E731
        else:
            buffers["ws_key"] = cp.empty((Mn, P, kp), cp.uint32)
            buffers["ws_idx"] = cp.empty((Mn, P, kp), cp.int32)
            poison = {"indices": topk_model.POISON, "ws_key": poison_u32, "ws_idx": topk_model.POISON}
            args = lambda b: (scores, b["indices"], b["ws_key"], b["ws_idx"], b["count"], np.int32(C),  # noqa: E731
                              np.int32(k))
        zero = cp.zeros(Mn, cp.uint32)
    kernels = [KernelCall(fn, (P, Mn), onecta_define("ONE_THREADS"), ring, args)]
    step = KernelStep(backend, kernels, buffers, {"count": zero}, poison,
                      lambda b: {"indices": backend.to_host(b["indices"])}, dependent=False)
    hand_on = (f"{P * kp} candidates" if layout != "segments" else
               f"P segments of {split_define('SHR_SEG', design)} pairs (the keys above each slice's share bound first)")
    step.note = (f"{symbol}: {P} CTAs a row ({Mn * P} CTAs, no cluster), slices of "
                 f"{topk_model.split_slices(C, P)[0][1]} keys, {hand_on} for the row's last CTA")
    return step.ready()


UNION_SOURCE = topk_model.UNION.source
UNION_HALF_SOURCE = topk_model.UNION_HALF.source


def union_define(name: str, source: str = UNION_SOURCE) -> int:
    """A ``#define`` of a union source (keys a CTA, the union's pairs, dynamic shared memory, threads)."""
    return source_define(str(HERE / source), name)


def _supports_union_for(geo: topk_model.UnionGeometry):
    """The rows a union source's clusters hold (topk_model.pick_union at ``geo``)."""
    def supports(geometry, point) -> str | None:
        C = spec.n_candidates(geometry, point)
        if topk_model.pick_union(int(point["M"]), C, H200_SMS, geo) is None:
            keys = union_define("UNI_KEYS", geo.source)
            return (f"{geo.source} holds {keys} keys a CTA and at most {geo.sizes[-1]} CTAs a row "
                    f"({geo.sizes[-1] * keys} candidates); this row has {C}")
        return _supports_radix(geometry, point)
    return supports


_supports_union = _supports_union_for(topk_model.UNION)
_supports_union_half = _supports_union_for(topk_model.UNION_HALF)


def _make_union_build(design: str):
    """A form of radix_union (UNION_FORMS) alone: topk_launch's kernel on the scores, the indices poisoned."""
    return lambda geometry, point, inputs, backend: _union_build(geometry, point, inputs, backend, design)


_SUPPORTS_UNION = {UNION_SOURCE: _supports_union, UNION_HALF_SOURCE: _supports_union_half}   # by source


def _union_variant(design: str, why: str) -> Variant:
    """The CUDA variant of a form of radix_union: its build, the rows its source's clusters hold and
    the source it compiles, all from its UNION_FORMS entry's geometry."""
    geo = UNION_FORMS[design].geo
    return Variant(design, "cuda", _make_union_build(design), why=why, supports=_SUPPORTS_UNION[geo.source],
                   sources=(geo.source,))


def _union_build(geometry, point, inputs, backend, design: str) -> KernelStep:
    cp = backend.cp
    Mn, C, k = int(point["M"]), spec.n_candidates(geometry, point), spec.k_selected(geometry, point)
    tk = topk_launch(backend, design, Mn, C, k)
    scores = backend.to_device(inputs["scores"])
    with backend.stream:
        buffers = {"scores": scores, "indices": cp.empty((Mn, k), cp.int32)}
    step = KernelStep(backend, [tk.call(Mn, C, k, "scores", "indices")], buffers, {}, {"indices": topk_model.POISON},
                      lambda b: {"indices": backend.to_host(b["indices"])}, dependent=False)
    step.note = (f"{tk.note} ({Mn * tk.ctas} CTAs of {tk.threads} threads), "
                 f"{topk_model.split_slices(C, tk.ctas)[0][1]} keys a CTA held on chip, a union of "
                 f"{union_define('UNI_CAP', UNION_FORMS[design].geo.source)} pairs at most in rank 0")
    return step.ready()


class UnionForm(NamedTuple):
    """A form of radix_union: its kernel's name prefix, its dynamic shared memory's #define and its
    source's CTA shape (topk_model.UnionGeometry: the source, threads, cluster sizes)."""

    prefix: str
    dyn: str
    geo: topk_model.UnionGeometry


# radix_union's forms (the load, the bound, the CTA's size)
UNION_FORMS = {"radix_union": UnionForm("dsa_topk_union", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_bulk": UnionForm("dsa_topk_union_bulk", "UNI_BULK_DYN_BYTES", topk_model.UNION),
               "radix_union_own": UnionForm("dsa_topk_union_own", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_own_wfind": UnionForm("dsa_topk_union_ownw", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_own_wfind_late": UnionForm("dsa_topk_union_ownwl", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_own_regions": UnionForm("dsa_topk_union_owns", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_early3": UnionForm("dsa_topk_union_early3", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_early4": UnionForm("dsa_topk_union_early4", "UNI_DYN_BYTES", topk_model.UNION),
               "radix_union_half": UnionForm("dsa_topk_union_half", "UNI_DYN_BYTES", topk_model.UNION_HALF),
               "radix_union_half_own": UnionForm("dsa_topk_union_half_own", "UNI_DYN_BYTES", topk_model.UNION_HALF)}
# The top-k designs a multi-kernel step embeds (indexer_select's unfused pairs, the DSA layer) ->
# their source; topk_launch builds any of them.
STEP_DESIGNS = {"radix_split2": SPLIT2_SOURCE, "radix_sample": SPLIT2_SOURCE, "radix_share": SPLIT2_SOURCE,
                **{design: form.geo.source for design, form in UNION_FORMS.items()}}


@dataclasses.dataclass
class TopkLaunch:
    """A top-k design's kernel as a step embeds it, for M rows of C scores choosing k: grid (ctas,
    M), and beside the scores and the indices, for the split designs a (key, index) pair workspace
    [M, ctas, ws_pairs, 2] uint32 and [M] uint32 row counters that must be zero before every launch
    (the kernel leaves them so); radix_union needs neither (ws_pairs 0). The step's buffers are
    named ``topk_ws`` and ``topk_count``."""

    fn: object
    ctas: int
    threads: int
    dyn: int
    ws_pairs: int
    note: str

    def buffers(self, cp, M: int) -> tuple[dict, dict, dict]:
        """(buffers, restore, poison) for the step: the workspace and counters, or nothing."""
        if not self.ws_pairs:
            return {}, {}, {}
        return ({"topk_ws": cp.empty((M, self.ctas, self.ws_pairs, 2), cp.uint32), "topk_count": cp.zeros(M, cp.uint32)},
                {"topk_count": cp.zeros(M, cp.uint32)}, {"topk_ws": topk_model.POISON.view(np.uint32)})

    def call(self, M: int, C: int, k: int, scores: str, indices: str) -> KernelCall:
        """The step's KernelCall, reading its scores and writing its indices from buffers so named."""
        if self.ws_pairs:
            args = lambda b: (b[scores], b[indices], b["topk_ws"], b["topk_count"], np.int32(C), np.int32(k))  # noqa: E731
        else:
            args = lambda b: (b[scores], b[indices], np.int32(C), np.int32(k))  # noqa: E731
        return KernelCall(self.fn, (self.ctas, M), self.threads, self.dyn, args)


def topk_launch(backend, design: str, M: int, C: int, k: int) -> TopkLaunch:
    """``design`` (one of STEP_DESIGNS) launched for M rows of C scores: its own launcher's
    geometry (topk_model.pick_split's P, or pick_union's cluster)."""
    if design not in STEP_DESIGNS:
        raise ValueError(f"design: {design!r}; allowed: {sorted(STEP_DESIGNS)}")
    threads = onecta_define("ONE_THREADS")
    if design in UNION_FORMS:
        prefix, dyn_define, geo = UNION_FORMS[design]
        cs = topk_model.pick_union(M, C, int(backend.props["multiProcessorCount"]), geo)
        if cs is None:
            raise ValueError(f"{prefix}: {C} candidates a row; allowed: at most "
                             f"{geo.sizes[-1] * union_define('UNI_KEYS', geo.source)}")
        dyn = union_define(dyn_define, geo.source)
        fn = get_kernel(backend, HERE / geo.source, f"{prefix}_c{cs}", dyn_smem=dyn)
        if geo.ctas_per_sm > 1 and hasattr(type(fn), "preferred_shared_memory_carveout"):
            # the most shared memory an SM, so that ctas_per_sm CTAs (and the clusters the pick
            # counted on) fit at once
            fn.preferred_shared_memory_carveout = 100
        return TopkLaunch(fn, cs, union_define("ONE_THREADS", geo.source), dyn, 0,
                          f"{prefix}_c{cs}: {design}, a cluster of {cs} CTAs a row")
    split = design.removeprefix("radix_")
    fn, P, _, dyn, _ = split_launch(backend, M, C, k, split)
    return TopkLaunch(fn, P, threads, dyn, split_ws_pairs(split, k), f"{design}: {P} CTAs a row")


def _torch_ready() -> str | None:
    try:
        import torch

        return None if torch.cuda.is_available() else "torch sees no CUDA device"
    except Exception as exc:
        return f"torch not importable: {type(exc).__name__}: {exc}"


class _TorchRows(Launch):
    """The scores on the device as a torch tensor on our stream, and an int32 output a peer's
    indices are copied into, non-finite picks as -1 (what a caller of a values + indices top-k
    does to get this op's contract)."""

    def __init__(self, geometry, point, inputs, backend):
        import torch

        self.torch, self.backend = torch, backend
        self.k = spec.k_selected(geometry, point)
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)
        dev = torch.device("cuda", backend.device_id)
        with torch.cuda.stream(self.ext):
            self.x = torch.from_numpy(inputs["scores"]).to(dev)
            self.out = torch.empty((self.x.shape[0], self.k), dtype=torch.int32, device=dev)
        backend.stream.synchronize()

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.out.fill_(int(topk_model.POISON))

    def _select(self):
        raise NotImplementedError

    def __call__(self) -> None:
        torch = self.torch
        with torch.cuda.stream(self.ext):
            values, idx = self._select()
            self.out.copy_(torch.where(torch.isfinite(values), idx, -1))

    def outputs(self) -> dict[str, np.ndarray]:
        self.backend.stream.synchronize()
        with self.torch.cuda.stream(self.ext):
            return {"indices": self.out.cpu().numpy()}


class _TorchTopk(_TorchRows):
    note = "torch.topk(largest=True, sorted=False), non-finite picks -> -1"

    def _select(self):
        return self.torch.topk(self.x, self.k, dim=1, largest=True, sorted=False)


# FlashInfer's TopKTieBreak: NONE = 0 (no tie rule), SMALL = 1 (prefer smaller indices)
FI_TIE_NONE, FI_TIE_SMALL = 0, 1


class _FlashInferTopk(_TorchRows):
    """``flashinfer.top_k(x, k, tie_break=...)``, unsorted, on our stream."""

    def __init__(self, geometry, point, inputs, backend, tie_break: int):
        reason = prepare_flashinfer()
        if reason:
            raise RuntimeError(reason)
        super().__init__(geometry, point, inputs, backend)
        import flashinfer

        self.flashinfer, self.tie_break = flashinfer, tie_break
        self.note = (f"FlashInfer {flashinfer.__version__} top_k(tie_break={tie_break}, sorted=False): "
                     f"{self._dispatch()}; non-finite picks -> -1")

    def _dispatch(self) -> str:
        """Which backend FlashInfer's own dispatch picks for this call, eager and under a graph
        capture (its functions, asked with our arguments)."""
        try:
            from flashinfer import topk as fi

            algo = os.environ.get("FLASHINFER_TOPK_ALGO")
            M, C = self.x.shape
            clusters = fi.can_use_clusters_topk(algo, self.x.device, False, self.tie_break, False)
            cub = fi.can_use_cub_topk(algo, self.x, self.tie_break, False, False)

            def pick(graph: bool) -> str:
                if cub and fi.is_cub_topk_beneficial(algo, M, C, self.k, self.x.dtype, self.tie_break, graph,
                                                     clusters):
                    return "CUB DeviceBatchedTopK"
                return "clusters" if clusters and not graph else "radix"
            return f"eager {pick(False)}, graph {pick(True)}" + (f", FLASHINFER_TOPK_ALGO={algo}" if algo else "")
        except Exception as exc:
            return f"dispatch unknown ({type(exc).__name__}: {exc})"[:200]

    def _select(self):
        return self.flashinfer.top_k(self.x, self.k, tie_break=self.tie_break)


def _supports_flashinfer(geometry, point) -> str | None:
    """A reason unless torch sees a Hopper GPU and FlashInfer imports with its prebuilt modules."""
    try:
        reason = _torch_ready()
        if reason:
            return reason
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return f"the FlashInfer top-k modules carried here are prebuilt for sm_90a; this device is sm_{major}{minor}"
        return prepare_flashinfer()
    except Exception as exc:
        return f"flashinfer top-k support check failed: {type(exc).__name__}: {exc}"[:500]


def _supports_flashinfer_no_tie(geometry, point) -> str | None:
    if point["score_rows"] == "ties":
        return ("flashinfer.top_k's default tie_break=NONE promises no rule among equal scores; "
                "flashinfer_topk_lower (tie_break=SMALL) runs the ties rows")
    return _supports_flashinfer(geometry, point)


class _HostTopk(Launch):
    """CPU backend: a NumPy selection of every row."""

    def __init__(self, select, geometry, point, inputs):
        self.select, self.scores = select, inputs["scores"]
        self.k = spec.k_selected(geometry, point)

    def poison(self) -> None:
        self.out = np.full((len(self.scores), self.k), topk_model.POISON, np.int32)

    def __call__(self) -> None:
        self.out = self.select(self.scores, self.k)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"indices": self.out.copy()}


def _reference_rows(scores: np.ndarray, k: int) -> np.ndarray:
    return np.stack([reference.topk(row, k) for row in scores])


def _model_rows(scores: np.ndarray, k: int) -> np.ndarray:
    return topk_model.select(scores, k, pick_cluster(len(scores), H200_SMS), radix_define("DSA_TOPK_CAP"))


def _model_bound_rows(scores: np.ndarray, k: int) -> np.ndarray:
    cs = pick_cluster_len(len(scores), scores.shape[1], H200_SMS)
    return topk_model.select(scores, k, cs, radix_define("DSA_TOPK_CAP"), bound=True)


def _model_onecta_rows(scores: np.ndarray, k: int) -> np.ndarray:
    return topk_model.select_onecta(scores, k, onecta_define("ONE_CAP"))


def _model_split_rows(scores: np.ndarray, k: int) -> np.ndarray:
    P = topk_model.pick_split(len(scores), scores.shape[1], k, H200_SMS)
    return topk_model.select_split(scores, k, P, onecta_define("ONE_CAP"))


def _model_sample_rows(scores: np.ndarray, k: int) -> np.ndarray:
    P = topk_model.pick_split(len(scores), scores.shape[1], k, H200_SMS)
    return topk_model.select_sample(scores, k, P, onecta_define("ONE_CAP"), split_define("SMP_CAP", "sample"))


def _model_share_rows(scores: np.ndarray, k: int) -> np.ndarray:
    P = topk_model.pick_split(len(scores), scores.shape[1], k, H200_SMS)
    return topk_model.select_share(scores, k, P, onecta_define("ONE_CAP"), split_define("SMP_CAP", "share"),
                                   split_define("SMP_DYN_BYTES", "share") // 8)


def _model_union_rows(scores: np.ndarray, k: int, own: bool = False, early: int = 0,
                      geo: topk_model.UnionGeometry = topk_model.UNION, regions: bool = False) -> np.ndarray:
    return topk_model.select_union(scores, k, union_define("UNI_CAP", geo.source), onecta_define("ONE_CAP"), H200_SMS,
                                   own, early, geo, regions)


def _model_resident_rows(scores: np.ndarray, k: int) -> np.ndarray:
    return topk_model.select_resident(scores, k, pick_resident(scores.shape[1]))


TOPK_VARIANTS = (
    Variant("radix_cluster", "cuda", _make_radix_build(None),
            why="radix threshold select, 11/11/10-bit digits, one thread-block cluster per row (1-8 CTAs "
                "so that M x CTAs fills the SMs) merging shared-memory histograms through distributed "
                "shared memory; two reads of the row (the second from L2), the ties at the threshold "
                "split over CTAs in index order",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_cluster4", "cuda", _make_radix_build(4),
            why="radix_cluster at 4 CTAs a row whatever M: at M = 32 one CTA an SM (128 CTAs), where "
                "the pick's 8 needs 2 CTAs an SM and 4 clusters of 8 in every GPC to run in one wave",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_cluster_len", "cuda", _make_radix_build(None, by_length=True),
            why="radix_cluster with the cluster size picked by row length too: at most 4 CTAs a row below "
                "262144 candidates, where the H200 measured clusters of 4 faster than 8 (25.09 against "
                "31.10 us for 512 of 65536 at M = 32)",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_lean", "cuda", _make_radix_build(None, by_length=True, kernel="lean"),
            why="radix_cluster_len's logic and counts with the two row passes batched: 16 keys a thread, "
                "one warp vote a batch and plain shared atomics in pass 1 (no shuffle and vote a key), "
                "one buffer claim a warp a batch in pass 2; the measured slope (~1.2-1.5 SM cycles a key) "
                "is these passes' per-key work, not the reads",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_lean4", "cuda", _make_radix_build(4, kernel="lean"),
            why="radix_lean at 4 CTAs a row whatever M: with the per-key cost cut, clusters of 4 may win "
                "at 262144 too (the cluster of 8's fixed cost is ~8 us more)",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_bound", "cuda", _make_radix_build(None, by_length=True, kernel="bound"),
            why="pass 1 with no histogram: each thread keeps its two largest keys (HBM read, max / min "
                "only), lane groups give a lower bound tlb <= T (at least k keys >= it); pass 2 (L2) counts "
                "digit 0 and buffers only the keys >= tlb (~9.2 k / 2 of them on iid rows: ~4% of 262144), "
                "so shared atomics fall from C to ~0.04 C a row; then radix_cluster's digits and quota",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("radix_bound4", "cuda", _make_radix_build(4, kernel="bound"),
            why="radix_bound at 4 CTAs a row whatever M (the cluster of 4's lower fixed cost at 262144; "
                "~2.4k buffered keys a CTA at 2048 of 262144, under the 3072 entries)",
            supports=_supports_radix, sources=(RADIX_SOURCE,)),
    Variant("resident", "cuda", _make_resident_build(False),
            why="the row read once and held on chip (24 keys a thread in registers, 40 in shared memory, "
                "1024 threads: 65536 a CTA), the three digit passes over it with shared histograms, a "
                "packed block scan for the index-order ties; one CTA a row up to 65536 (no cluster "
                "barrier), clusters of 2 / 4 to 262144 (one barrier a digit)",
            supports=_supports_resident, sources=(RESIDENT_SOURCE,)),
    Variant("resident_wide", "cuda", _make_resident_build(True),
            why="resident at half a CTA's keys a slice: 2 CTAs (a cluster) for 65536, twice the SMs "
                "streaming the row for three cluster barriers; prices one CTA against two at 65536",
            supports=_supports_resident, sources=(RESIDENT_SOURCE,)),
    Variant("radix_onecta", "cuda", _onecta_build,
            why="one CTA of 1024 threads a row, no cluster barrier or DSMEM: digit 0 on 12 bits over the "
                "row from HBM (prefetched 3 batches ahead into L2), then (L2) every key above the threshold "
                "bin written straight out and the bin's keys (~0.6% of the row) kept in shared memory, "
                "digits 1 and 2 from that buffer only; loops instead of unrolled rows, so little machine "
                "code to fetch after the L2 flush",
            supports=_supports_radix, sources=(ONECTA_SOURCE,)),
    Variant("radix_split", "cuda", make_split_build(),
            why="P CTAs a row (M x P <= the SMs: one wave; P near sqrt(C / k)) in one launch with no cluster "
                "and no grid-wide wait: each CTA runs radix_onecta's select over its slice (16-B cp.async "
                "into a 128 KiB ring, 96-128 KiB in flight, slices up to 32768 keys held there for pass 2) "
                "and writes its top k as (key, index) candidates; the row's last CTA (a counter) selects "
                "the final k from the P k candidates; deadlock-free in any number of waves",
            supports=_supports_radix, sources=(SPLIT_SOURCE,)),
    Variant("radix_split2", "cuda", make_split_build(design="split2"),
            why="radix_split with its two measured costs cut (eb63d69's timeline): pass 2 classifies each key "
                "and loops over a lane's hits only (members and threshold-bin keys, re-read from the ring), "
                "not eight unrolled branch regions a batch (~0.25 ns a key whether the slice came from shared "
                "memory or L2); a held slice's keys converted once; candidates as (key, index) pairs so the "
                "final CTA's members need no dependent L2 load; bin searches of 2 block barriers, not 5",
            supports=_supports_radix, sources=(SPLIT2_SOURCE,)),
    Variant("radix_sample", "cuda", make_split_build(design="sample"),
            why="radix_split2 with stage 1 read once: a sample (64 blocks of 128 keys spread over the slice) "
                "gives a bound t_est with ~1.25 k of the slice's keys expected above it, one pass streams the "
                "slice with no histogram and buffers the keys >= t_est, the select runs over that buffer; "
                "where the sample missed (fewer than k keys above it, or more than the buffer) split2's "
                "stage 1 over the slice; stage 2 unchanged",
            supports=_supports_radix, sources=(SPLIT2_SOURCE,)),
    Variant("radix_share", "cuda", make_split_build(design="share"),
            why="radix_sample with no select in stage 1: a second bound from the same sample (the slice's "
                "share k n / C of the row's k) splits the buffer, and each slice writes it as two groups; the "
                "row's last CTA selects from the groups above the share bounds (~k / P keys a slice, not k) "
                "and keeps the result when its k-th key is at or above every slice's share bound, else "
                "selects again from both groups (each holds its slice's k best)",
            supports=_supports_share, sources=(SPLIT2_SOURCE,)),
    _union_variant("radix_union",
        "one cluster a row with no workspace and no hand-off through global memory (radix_split2's "
        "fixed chain at 512 of 65536): the slice read once and held on chip with every load in "
        "flight, each CTA's bound (its ceil(k / CS)-th thread max) exchanged through DSMEM, the least "
        "a lower bound on the row's k-th key (~800 keys above it at 512 of 65536), those keys pushed "
        "to rank 0's shared memory, rank 0's select over them; the row itself when the union does "
        "not serve"),
    _union_variant("radix_union_bulk",
        "radix_union with the slice copied whole into shared memory by the bulk (TMA) engine (8 copies "
        "of 16 KiB from one thread on one mbarrier) instead of 8 loads a thread into registers and "
        "cp.async slots: its timelines read ~23 GB/s an SM whether 64 or 128 SMs read, a per-SM rate "
        "the copy engine, which tracks its own bytes in flight, may not share"),
    _union_variant("radix_union_own",
        "radix_union with no cluster barrier and no exchange between the local bound and the push "
        "(0.51 + 0.27 us of its H200 timeline at M = 32): each CTA pushes its keys above its own bound "
        "and counts them in a window fixed by that bound, then stores the bound in every rank; where "
        "the bounds differ the ranks above the least push the rest in a second round and rank 0 runs "
        "s2_select. The padding slots past a short slice (a quarter of a thread's keys at clusters "
        "of 3) are no longer stored, read or compared"),
    _union_variant("radix_union_own_wfind",
        "radix_union_own with both bin searches on its critical path (the CTA's bound over 4096 bins, "
        "rank 0's window over 1024) by one warp and one block barrier instead of 1024 threads and two: "
        "0.59 and 0.78 us of the own form's H200 timeline at M = 32, for a few thousand counts"),
    _union_variant("radix_union_own_wfind_late",
        "radix_union_own_wfind with the cluster arrive after the read's barrier instead of under the loads' "
        "flight: the own form's read phase runs 0.15-0.56 us longer than radix_union's over the same loads, "
        "and the arrive's release (MEMBAR.ALL.GPU) is what it adds there"),
    _union_variant("radix_union_own_regions",
        "radix_union_own with each rank pushing into its own region of rank 0's union (UNI_CAP / CS "
        "pairs), its slots claimed on a counter in its own shared memory: no warp waits for the return of "
        "a remote atomic, where the own form's 32 warps a rank each wait for one on rank 0's one counter "
        "(the push, 1.41 us of its H200 timeline at M = 32, the largest phase after the read). Rank 0 reads "
        "the regions in place (no compaction on the window path)"),
    *(_union_variant(f"radix_union_early{ev}",
          f"radix_union with each CTA's bound from its first {ev} float4 slots of 8 (the register loads, "
          "now issued first, and the first cp.async group), found and exchanged through the cluster "
          "while the rest of the slice lands: the local bound, the cluster barrier and the exchange "
          "(~1.4 us of the H100 timeline at M = 32) under the read, for a larger union (the CPU model at "
          "512 of 65536, clusters of 3: ~1000-1500 keys against ~800); the window fixed by the bound as "
          "the own form's") for ev in (3, 4)),
    _union_variant("radix_union_half",
        "radix_union in CTAs of half an SM (512 threads, two an SM) so that more SMs read at M = 32: its "
        "read runs at a rate an SM, and clusters of 3 one-SM CTAs read with 96 SMs, while 32 clusters of 7 "
        "half-SM CTAs fit at once (~112 SMs; 30 of 8); the same union_body, 24 keys a thread"),
    _union_variant("radix_union_half_own",
        "radix_union_own (no exchange before the push; the M = 32 design in clusters of 3) in the half-SM "
        "CTAs of radix_union_half: 7 ranks' bounds agree in ~96 % of N(0, 1) rows at 512 of 65536 (the CPU "
        "model), else the second round"),
    Variant("torch_topk", "cuda", lambda g, p, i, b: _TorchTopk(g, p, i, b),
            why="torch.topk(k, sorted=False) on our stream, non-finite picks mapped to -1",
            supports=lambda g, p: _torch_ready(), peer=True),
    Variant("flashinfer_topk", "cuda", lambda g, p, i, b: _FlashInferTopk(g, p, i, b, FI_TIE_NONE),
            why="flashinfer.top_k(x, k) as engines call it (tie_break NONE, unsorted); the note names "
                "the backend FlashInfer dispatched to",
            supports=_supports_flashinfer_no_tie, peer=True, packages=("flashinfer-python",)),
    Variant("flashinfer_topk_lower", "cuda", lambda g, p, i, b: _FlashInferTopk(g, p, i, b, FI_TIE_SMALL),
            why="flashinfer.top_k(x, k, tie_break=SMALL): smaller indices win among equal scores, our "
                "contract",
            supports=_supports_flashinfer, peer=True, packages=("flashinfer-python",)),
    Variant("ref_topk", "cpu", lambda g, p, i, b: _HostTopk(_reference_rows, g, p, i),
            why="reference.topk row by row on the host (a float64 lexsort)"),
    Variant("model_radix", "cpu", lambda g, p, i, b: _HostTopk(_model_rows, g, p, i),
            why="topk_radix.cu's logic emulated in NumPy (topk_model): histograms, merges, quota split",
            sources=("topk_model.py",)),
    Variant("model_bound", "cpu", lambda g, p, i, b: _HostTopk(_model_bound_rows, g, p, i),
            why="dsa_topk_bound's logic emulated in NumPy (topk_model, bound=True) at radix_bound's "
                "cluster pick: the lower bound from lane groups' second largest keys, counts above it",
            sources=("topk_model.py",)),
    Variant("model_onecta", "cpu", lambda g, p, i, b: _HostTopk(_model_onecta_rows, g, p, i),
            why="topk_onecta.cu's logic emulated in NumPy (topk_model.select_row_onecta): 12-bit digit 0, "
                "the direct writes above the threshold bin, the bin's buffer and its overflow, the ties",
            sources=("topk_model.py",)),
    Variant("model_split", "cpu", lambda g, p, i, b: _HostTopk(_model_split_rows, g, p, i),
            why="topk_split.cu's logic emulated in NumPy (topk_model.select_row_split) at radix_split's P: "
                "each slice's candidates (+inf kept), the final select over them, the row's index-order ties",
            sources=("topk_model.py",)),
    Variant("model_sample", "cpu", lambda g, p, i, b: _HostTopk(_model_sample_rows, g, p, i),
            why="dsa_topk_sample's logic emulated in NumPy (topk_model.select_row_sample) at radix_sample's P: "
                "the sample's units, the bound t_est, the buffer or the fallback, then select_row_split's stage 2",
            sources=("topk_model.py",)),
    Variant("model_share", "cpu", lambda g, p, i, b: _HostTopk(_model_share_rows, g, p, i),
            why="dsa_topk_share's logic emulated in NumPy (topk_model.select_row_share) at radix_share's P: "
                "both bounds, the two groups or the slice's k best, the final's levels and its test",
            sources=("topk_model.py",)),
    Variant("model_union", "cpu", lambda g, p, i, b: _HostTopk(_model_union_rows, g, p, i),
            why="dsa_topk_union's logic emulated in NumPy (topk_model.select_row_union) at radix_union's "
                "cluster pick: the thread maxes, the bound, the union or the row, the select's tie takes",
            supports=_supports_union, sources=("topk_model.py",)),
    Variant("model_union_own", "cpu", lambda g, p, i, b: _HostTopk(lambda s, k: _model_union_rows(s, k, True), g, p, i),
            why="dsa_topk_union_own's logic emulated in NumPy (topk_model.select_row_union, own=True): "
                "model_union with each rank's own bound and window, the agreement test and the second round",
            supports=_supports_union, sources=("topk_model.py",)),
    Variant("model_union_own_regions", "cpu",
            lambda g, p, i, b: _HostTopk(lambda s, k: _model_union_rows(s, k, True, regions=True), g, p, i),
            why="dsa_topk_union_owns's logic emulated in NumPy (topk_model.select_row_union, own=True, "
                "regions=True): model_union_own, served only where every rank's keys above the bound fit its region",
            supports=_supports_union, sources=("topk_model.py",)),
    *(Variant(f"model_union_early{ev}", "cpu",
              lambda g, p, i, b, ev=ev: _HostTopk(lambda s, k: _model_union_rows(s, k, early=ev), g, p, i),
              why=f"dsa_topk_union_early{ev}'s logic emulated in NumPy (topk_model.select_row_union, early={ev}): "
                  f"model_union with each rank's bound from its first {ev} float4 slots and the own form's window",
              supports=_supports_union, sources=("topk_model.py",)) for ev in (3, 4)),
    Variant("model_union_half", "cpu",
            lambda g, p, i, b: _HostTopk(lambda s, k: _model_union_rows(s, k, geo=topk_model.UNION_HALF), g, p, i),
            why="dsa_topk_union_half's logic emulated in NumPy (topk_model.select_row_union, geo=UNION_HALF): "
                "model_union with 512 threads a CTA, 6 float4 slots a thread and pick_union's half-SM sizes",
            supports=_supports_union_half, sources=("topk_model.py",)),
    Variant("model_union_half_own", "cpu",
            lambda g, p, i, b: _HostTopk(lambda s, k: _model_union_rows(s, k, True, geo=topk_model.UNION_HALF),
                                         g, p, i),
            why="dsa_topk_union_half_own's logic emulated in NumPy (topk_model.select_row_union, own=True, "
                "geo=UNION_HALF)",
            supports=_supports_union_half, sources=("topk_model.py",)),
    Variant("model_resident", "cpu", lambda g, p, i, b: _HostTopk(_model_resident_rows, g, p, i),
            why="topk_resident.cu's logic emulated in NumPy (topk_model.select_row_resident) at resident's "
                "CTA pick: the (j, t, s) element mapping, the packed tie scan, the counter claims",
            supports=_supports_resident, sources=("topk_model.py",)),
)
