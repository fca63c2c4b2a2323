"""Launchers and declarations of indexer_select's variants (the scan fused with the top-k).

- ``fused_mma`` (ours): ``select_fused.cu``: the tensor-core scan's tiles scored into a shared
  threshold buffer per CTA (S slices a stream), each CTA's top-k (64-bit keys) to memory, then
  ``select_merge``: one CTA a stream picks the k of its S x k candidates. cand_dim only.
- ``scan_then_topk`` (the unfused baseline, same rows): scan_mma.cu's kernel writing scores [M, C]
  then topk_radix.cu's radix_cluster kernel on them, with the launch geometry of their own
  variants (scan_variants.build_mma's persistent grid, recomputed here the same way;
  topk_variants.pick_cluster), as one step.
- ``scan_then_share``: the same with topk_split2.cu's radix_share (dsa_select's fastest top-k at
  the goal point) in place of radix_cluster: what a fused kernel has to beat.
- ``scan_then_union``: the same with topk_union.cu's radix_union (one cluster a row; rows of at most
  262144 candidates, topk_model.pick_union).
- ``ref_select`` (CPU): scan_variants' float32 host scan, then reference.topk row by row.
- ``model_fused`` (CPU): the same host scores through select_model (the kernels' logic in NumPy,
  with the H200's plan: 132 SMs, 3 CTAs an SM).

Nothing here imports cupy at import time.
"""

from __future__ import annotations

import pathlib

import numpy as np

from harness.cuda import STATIC_SMEM_LIMIT, KernelCall, KernelStep, ctas_per_sm, get_kernel
from harness.registry import Launch, Variant

from . import reference, scan_variants, select_model, topk_model, topk_variants
from . import select_spec as spec

HERE = pathlib.Path(__file__).resolve().parent
FUSED_SOURCE = "select_fused.cu"
H200_SMS, FUSED_CTAS_PER_SM = 132, 3        # the CPU model's plan (select_fused's __launch_bounds__)
KEY_POISON = np.uint64(0xAAAAAAAAAAAAAAAA)  # candidate keys never written


def _kernel(backend, source: str, symbol: str, dyn_smem: int):
    """get_kernel, and the dynamic shared-memory opt-in also when static + dynamic pass 48 KiB."""
    fn = get_kernel(backend, HERE / source, symbol, dyn_smem)
    if dyn_smem <= STATIC_SMEM_LIMIT < dyn_smem + int(fn.shared_size_bytes):
        fn.max_dynamic_shared_size_bytes = dyn_smem
    return fn


def _supports_fused(geometry, point) -> str | None:
    k = spec.k_selected(geometry, point)
    if k > select_model.KMAX:
        return f"select_fused keeps at most SEL_KMAX = {select_model.KMAX} candidates a CTA; this point selects {k}"
    return scan_variants._supports_mma(geometry, point)


def _supports_unfused(geometry, point, topk: str = "radix_cluster") -> str | None:
    if spec.k_selected(geometry, point) > spec.n_candidates(geometry, point):
        return "the top-k kernels are built for k <= C (dsa_axes.check_point refuses more for dsa_topk)"
    # the top-k's rules at the top-k's own point: this component's point has no topk axis (it
    # selects the fuel's index_topk)
    topk_point = {**point, "topk": int(geometry.indexer.index_topk)}
    rules = {"radix_cluster": topk_variants._supports_radix, "radix_share": topk_variants._supports_share,
             "radix_union": topk_variants._supports_union}[topk]
    return scan_variants._supports_mma(geometry, point) or rules(geometry, topk_point)


def _indices_step(backend, kernels, buffers, poison, k_note: str) -> KernelStep:
    step = KernelStep(backend, kernels, buffers, {}, {"indices": topk_model.POISON, **poison},
                      lambda b: {"indices": backend.to_host(b["indices"])}, dependent=False)
    step.note = k_note
    return step.ready()


def make_fused_build(tag: str = "", round_tiles: int = select_model.ROUND_TILES):
    """The launcher of select_fused_mma<tag>_{bf16,fp8} (select_fused<FP8, round_tiles>)."""
    name = f"fused_mma{tag}"

    def build(geometry, point, inputs, backend) -> KernelStep:
        return _build_fused(name, tag, round_tiles, geometry, point, inputs, backend)

    build.__name__ = f"build_{name}"
    return build


def _step_inputs(name: str, reason: str | None, geometry, point, inputs, backend):
    """What every CUDA step here starts from: ``(cupy, the scan's device inputs, M, C, k, fp8)``;
    a point its variant does not support raises ValueError naming the variant."""
    if reason:
        raise ValueError(f"{name}: {reason}")
    Mn, C, k = int(point["M"]), spec.n_candidates(geometry, point), spec.k_selected(geometry, point)
    return backend.cp, scan_variants._Device(backend, inputs), Mn, C, k, point["key_dtype"] == "fp8"


def _build_fused(name, tag, round_tiles, geometry, point, inputs, backend) -> KernelStep:
    cp, d, Mn, C, k, fp8 = _step_inputs(name, _supports_fused(geometry, point), geometry, point, inputs, backend)
    threads, mthreads = select_model.define("SEL_THREADS"), select_model.define("MERGE_THREADS")
    cap = select_model.capacity(k, round_tiles)
    fn = _kernel(backend, FUSED_SOURCE, f"select_fused_mma{tag}_{point['key_dtype']}", 8 * cap)
    merge0 = get_kernel(backend, HERE / FUSED_SOURCE, "select_merge")
    optin = int(backend.props.get("sharedMemPerBlockOptin", 232448))
    merge_room = min(select_model.MERGE_SMEM_MAX, optin - int(merge0.shared_size_bytes))
    S, tiles = select_model.plan(Mn, C, k, int(backend.props["multiProcessorCount"]),
                                 ctas_per_sm(fn, backend.props, threads, 8 * cap), merge_room)
    mfn = _kernel(backend, FUSED_SOURCE, "select_merge", 8 * S * k)
    with backend.stream:
        buffers = {"cand_keys": cp.empty((Mn, S, k), cp.uint64), "cand_counts": cp.empty((Mn, S), cp.int32),
                   "indices": cp.empty((Mn, k), cp.int32)}
    head = (d.q, d.w, d.keys, d.scales) if fp8 else (d.q, d.w, d.keys)
    kernels = [
        KernelCall(fn, (S, Mn), threads, 8 * cap, lambda b: (
            *head, d.eligible, b["cand_keys"], b["cand_counts"], np.int32(C), np.int32(k), np.int32(cap),
            np.int32(tiles))),
        KernelCall(mfn, Mn, mthreads, 8 * S * k, lambda b: (
            b["cand_keys"], b["cand_counts"], b["indices"], np.int32(S), np.int32(k))),
    ]
    poison = {"cand_keys": KEY_POISON, "cand_counts": topk_model.POISON}
    return _indices_step(backend, kernels, buffers, poison,
                         f"{S} slices a stream ({S * Mn} CTAs, {tiles} tiles of 16 keys each), buffer {cap} keys "
                         f"a CTA; {S * k} candidates a stream merged")


# the unfused pair's top-k -> the step's variant name
UNFUSED_NAMES = {"radix_cluster": "scan_then_topk", "radix_share": "scan_then_share", "radix_union": "scan_then_union"}


def make_unfused_build(topk: str = "radix_cluster"):
    """The unfused pair as one step: scan_mma's kernel writes scores [M, C], then the top-k variant
    ``topk`` selects from them with its own launch geometry: "radix_cluster" (topk_radix.cu at
    topk_variants.pick_cluster), "radix_share" (dsa_topk_share at topk_model.pick_split, with its
    segments and row counters) or "radix_union" (dsa_topk_union at topk_model.pick_union)."""
    if topk not in UNFUSED_NAMES:
        raise ValueError(f"topk: {topk!r}; allowed: {sorted(UNFUSED_NAMES)}")
    name = UNFUSED_NAMES[topk]

    def build(geometry, point, inputs, backend) -> KernelStep:
        cp, d, Mn, C, k, fp8 = _step_inputs(name, _supports_unfused(geometry, point, topk), geometry, point, inputs,
                                            backend)
        scan = get_kernel(backend, HERE / "scan_mma.cu", f"scan_mma_{point['key_dtype']}")
        _, ctas, tpw = scan_variants.mma_launch(backend, scan, Mn, C)
        with backend.stream:
            buffers = {"scores": cp.empty((Mn, C), cp.float32), "indices": cp.empty((Mn, k), cp.int32)}
        head = (d.q, d.w, d.keys, d.scales) if fp8 else (d.q, d.w, d.keys)
        kernels = [KernelCall(scan, ctas, scan_variants.define("scan_mma.cu", "SCAN_MMA_THREADS"), 0, lambda b: (
            *head, d.eligible, b["scores"], np.int32(Mn), np.int32(C), np.int32(tpw)))]
        restore, topk_poison = {}, {}
        if topk == "radix_cluster":
            cs = topk_variants.pick_cluster(Mn, int(backend.props["multiProcessorCount"]))
            fn = get_kernel(backend, HERE / topk_variants.RADIX_SOURCE, f"dsa_topk_radix_c{cs}")
            kernels.append(KernelCall(fn, (cs, Mn), topk_variants.radix_define("DSA_TOPK_THREADS"), 0, lambda b: (
                b["scores"], b["indices"], np.int32(C), np.int32(k))))
            note = f"radix_cluster: {cs} CTAs a row"
        else:
            tk = topk_variants.topk_launch(backend, topk, Mn, C, k)
            with backend.stream:
                extra, restore, topk_poison = tk.buffers(cp, Mn)
            buffers.update(extra)
            kernels.append(tk.call(Mn, C, k, "scores", "indices"))
            note = tk.note
        step = KernelStep(backend, kernels, buffers, restore,
                          {"indices": topk_model.POISON, "scores": np.float32(np.nan), **topk_poison},
                          lambda b: {"indices": backend.to_host(b["indices"])}, dependent=False)
        step.note = f"scan_mma: {ctas} persistent CTAs, {tpw} tiles a warp; {note}"
        return step.ready()

    build.__name__ = f"build_{name}"
    return build


class _HostSelect(Launch):
    """CPU backend: scan_variants' float32 host scan, then a selection of every row."""

    def __init__(self, select, geometry, point, inputs):
        self.select, self.inputs = select, inputs
        self.scan = scan_variants._HostScan(geometry, point, inputs)
        self.k = spec.k_selected(geometry, point)

    def poison(self) -> None:
        self.out = np.full((int(self.scan.point["M"]), self.k), topk_model.POISON, np.int32)

    def __call__(self) -> None:
        self.scan()
        scores = self.scan.outputs()["scores"].astype(np.float32)
        self.out = self.select(scores, self.inputs["eligible"], self.k)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"indices": self.out.copy()}


def _reference_rows(scores, eligible, k):
    return np.stack([reference.topk(row, k) for row in scores])


def _model_rows(scores, eligible, k, round_tiles=select_model.ROUND_TILES):
    return select_model.select(scores, eligible, k, H200_SMS, FUSED_CTAS_PER_SM, rng=np.random.default_rng(0),
                               round_tiles=round_tiles)


SELECT_VARIANTS = (
    Variant("fused_mma", "cuda", make_fused_build(),
            why="the scan's tensor-core tiles (scan_mma's fragments and pipeline) scored straight into a "
                "shared-memory threshold buffer of 64-bit (score, lower-index-first) keys per CTA, shrunk "
                "to its top k by a radix select whenever it fills; S x k candidates a stream reach memory "
                "instead of C scores, and one CTA a stream merges them",
            supports=_supports_fused, sources=(FUSED_SOURCE,)),
    # Issue 14, the fused design's tuning: its measured 1.46x the scan (SELECT_NOTES.md).
    Variant("fused_mma_r16", "cuda", make_fused_build("_r16", select_model.ROUND_TILES_LONG),
            why="fused_mma with rounds of 16 tiles a warp between the buffer's count checks instead of 2: "
                "the two block barriers a round, which hold the 4 warps in lockstep on the slowest "
                "warp's loads, 8x less often (headroom 1024 keys, cap 2k + 1024)",
            supports=_supports_fused, sources=(FUSED_SOURCE,)),
    Variant("scan_then_topk", "cuda", make_unfused_build("radix_cluster"),
            why="the unfused pair in one step: scan_mma writes scores [M, C], then radix_cluster selects "
                "(each with its own variant's launch geometry)",
            supports=_supports_unfused, sources=("scan_mma.cu", topk_variants.RADIX_SOURCE)),
    Variant("scan_then_share", "cuda", make_unfused_build("radix_share"),
            why="the unfused pair with dsa_select's fastest top-k: scan_mma writes scores [M, C], then "
                "radix_share selects (its own P, segments and row counters): the time a fused kernel must beat",
            supports=lambda g, p: _supports_unfused(g, p, "radix_share"),
            sources=("scan_mma.cu", topk_variants.SPLIT2_SOURCE)),
    Variant("scan_then_union", "cuda", make_unfused_build("radix_union"),
            why="the unfused pair with radix_union (dsa_select's one-cluster top-k, no hand-off through "
                "memory): scan_mma writes scores [M, C], then a cluster a row selects from them",
            supports=lambda g, p: _supports_unfused(g, p, "radix_union"),
            sources=("scan_mma.cu", topk_variants.UNION_SOURCE)),
    Variant("ref_select", "cpu", lambda g, p, i, b: _HostSelect(_reference_rows, g, p, i),
            why="float32 NumPy scan on the host, then reference.topk row by row", sources=("select_spec.py",)),
    Variant("model_fused", "cpu", lambda g, p, i, b: _HostSelect(_model_rows, g, p, i),
            why="the host scores through select_model: fused_mma's buffers, shrinks and merge in NumPy "
                "(the H200's plan)", sources=("select_model.py",)),
)
