"""Launchers and declarations of the DSA layer's variants (component ``dsa_layer``).

- ``chained`` (ours): one ``harness.cuda.KernelStep`` of the families' best kernels (the designs
  spec.SCAN_DESIGNS, TOPK_DESIGNS and MLA_DESIGN name) on shared device buffers, get_kernel'd from
  the families' own .cu files with their own launch geometry: [compress_cuda (kpool_compress.cu)]
  -> scan_mma (scan_mma.cu; index_dtype fp8: scan_wgmma_e4m3, scan_wgmma.cu, sm_90a) -> radix_split2
  (pooled scores) / radix_share (per token; both topk_split2.cu, through topk_variants.topk_launch)
  -> [expand_cuda (expand.cu)] -> split_wgmma_lean_coop_1wave
  (sparse_mla/split_wgmma.cu, sm_90a: the split and its combine in one cooperative launch). Plain stream
  order (dependent=False): the scans, the top-k and the sparse MLA do not griddepcontrol.wait before
  reading their predecessor's output (only kpool_compress and expand do), so a programmatic launch of
  them could read a buffer still being written.
- ``ref_layer`` (CPU backend): the families' CPU formulations composed in float32 / NumPy
  (compress_numpy, the scan's float32 product, reference.topk, expand_numpy, attend in float32).

Nothing here imports cupy or torch at import time.
"""

from __future__ import annotations

import numpy as np

from harness.cuda import KernelCall, KernelStep, get_kernel
from harness.registry import Launch, Variant
from kernels.dsa_indexer import kpool_variants, scan_variants, topk_model, topk_variants
from kernels.dsa_indexer import reference as rules
from kernels.dsa_indexer.kpool_variants import INDEX_POISON
from kernels.kda_decode.reference import bf16_to_float
from kernels.sparse_mla import spec as mla
from kernels.sparse_mla import variants as mla_variants

from . import spec

# The sparse MLA design (spec.MLA_DESIGN): one of sparse_mla's cooperative designs, launched by its
# own sparse_mla/variants.coop_kernel (one-wave splits, the combine inside the kernel).
assert spec.MLA_DESIGN in mla_variants.COOP_DESIGNS, "the step launches a cooperative sparse MLA design"
# the top-k (spec.topk_design, by the scores' pooling): topk_variants.topk_launch's geometry, workspace
# and counters, as dsa_topk's own variant launches it
assert set(spec.TOPK_DESIGNS.values()) <= set(topk_variants.STEP_DESIGNS), "a design a step can embed"
TOPK_SOURCES = sorted({topk_variants.STEP_DESIGNS[d] for d in spec.TOPK_DESIGNS.values()})
SOURCES = {
    "compress": kpool_variants.HERE / "kpool_compress.cu",
    "scan": scan_variants.HERE / "scan_mma.cu",
    "expand": kpool_variants.HERE / "expand.cu",
    "split": mla_variants.HERE / mla_variants.COOP_DESIGNS[spec.MLA_DESIGN][0],
}


def supports_chained(geometry, point) -> str | None:
    problem = spec.strategy_problem(point)
    if problem:
        return problem
    Hi, Di = spec.index_dims(geometry)
    if (Hi, Di) != (32, 128):
        return f"scan_mma is written for 32 heads x 128; got {Hi} x {Di}"
    H, D, _ = mla.dims(geometry)
    if (H, D) != (64, 512):
        return f"{spec.MLA_DESIGN} is written for 64 heads x 512; got {H} x {D}"
    if spec.kpool(geometry) != 4:
        return f"kpool_compress.cu and expand.cu are written for pools of 4; got {spec.kpool(geometry)}"
    W = spec.width(geometry, point)
    if W % 64:
        return f"selection width {W} is not a multiple of 64 (the sparse MLA's tiles)"
    if point["key_caching"] == "compress":
        P = int(point["context"]) // 4
        if int(point["M"]) * P * kpool_variants.GROUPS >= 2 ** 31 - 2 ** 26:
            return "2^31 - 2^26 or more compress work items: kpool_compress's item index is int32"
    return mla_variants.coop_grid_problem(spec.MLA_DESIGN, int(point["M"]), W, mla_variants.current_device_sms())


def build_chained(geometry, point, inputs, backend) -> KernelStep:
    reason = supports_chained(geometry, point)
    if reason:
        raise ValueError(f"chained: {reason}")
    cp = backend.cp
    caching = point["key_caching"]
    Mn, ctx = int(point["M"]), int(point["context"])
    _, Di = spec.index_dims(geometry)
    H, D, scale = mla.dims(geometry)
    C, k, W = spec.n_candidates(geometry, point), spec.k_selected(geometry, point), spec.width(geometry, point)
    mp = spec.mla_point(point)
    fp8_index = spec.index_dtype(point) == "fp8"
    queries = ("iq_codes", "iq_scales") if fp8_index else ("iq",)
    d = {name: backend.to_device(inputs[name]) for name in
         (*queries, "iw", "q", "page_table", "ape", "eligible", "lengths", "positions")}
    keys, key_scales, gates, arena = (inputs.resident[n] for n in
                                      ("index_keys", "index_key_scales", "index_gates", "arena"))

    if fp8_index:
        scan_fn = scan_variants.wgmma_kernel(backend)
        scan_threads, scan_ctas, tpw = scan_variants.wgmma_launch(backend, scan_fn, Mn, C)
    else:
        scan_fn = get_kernel(backend, SOURCES["scan"], "scan_mma_bf16")
        scan_threads, scan_ctas, tpw = scan_variants.mma_launch(backend, scan_fn, Mn, C)
    topk = topk_variants.topk_launch(backend, spec.topk_design(point), Mn, C, k)
    sel_name = "indices" if caching == "per_token" else "selection"   # per_token: the top-k's [M, 2048] output
    pps, ps = np.int32(mla.pages_per_stream(mp)), np.int32(mp["page_size"])
    mla_call, splits = mla_variants.coop_kernel(backend, spec.MLA_DESIGN, Mn, W, lambda b: (
        d["q"], arena, d["page_table"], b[sel_name], b["part_acc"], b["part_ml"], b["out"], b["lse"],
        b["mla_rows"], np.int32(Mn), np.int32(W), pps, ps, np.int32(splits), np.float32(scale)))

    with backend.stream:
        b0 = {"scores": cp.empty((Mn, C), cp.float32), "indices": cp.empty((Mn, k), cp.int32),
              "part_acc": cp.empty((Mn, splits, H, D), cp.float32),
              "part_ml": cp.empty((Mn, splits, H, 2), cp.float32),
              "out": cp.empty((Mn, H, D), cp.uint16), "lse": cp.empty((Mn, H), cp.float32),
              "mla_rows": mla_variants.coop_row_tickets(cp, Mn)}   # the sparse MLA's row tickets
        # the split designs' workspace and row counters (put back by poison: the kernel leaves them 0)
        topk_buffers, topk_restore, topk_poison = topk.buffers(cp, Mn)
        b0.update(topk_buffers)
        if caching == "compress":
            b0["pooled"] = cp.empty((Mn, ctx // 4, Di), cp.uint16)
        if caching != "per_token":
            b0["selection"] = cp.empty((Mn, W), cp.int32)
    kernels = []
    notes = []
    if caching == "compress":
        compress_fn = get_kernel(backend, SOURCES["compress"], "kpool_compress_v1")
        grid = kpool_variants.compress_grid(backend, compress_fn, Mn, ctx // 4)
        kernels.append(KernelCall(compress_fn, grid, kpool_variants.COMPRESS_THREADS, 0, lambda b: (
            keys, gates, d["ape"], d["lengths"], b["pooled"], np.int32(Mn), np.int32(ctx // 4))))
        notes.append(f"compress {grid} CTAs")
    if fp8_index:
        kernels.append(KernelCall(scan_fn, scan_ctas, scan_threads, 0, lambda b: (
            d["iq_codes"], d["iq_scales"], d["iw"], keys, key_scales, d["eligible"], b["scores"], np.int32(Mn),
            np.int32(C), np.int32(tpw))))
    else:
        scan_keys = (lambda b: b["pooled"]) if caching == "compress" else (lambda b: keys)
        kernels.append(KernelCall(scan_fn, scan_ctas, scan_threads, 0, lambda b: (
            d["iq"], d["iw"], scan_keys(b), d["eligible"], b["scores"], np.int32(Mn), np.int32(C), np.int32(tpw))))
    kernels.append(topk.call(Mn, C, k, "scores", "indices"))
    if caching != "per_token":
        expand_fn = get_kernel(backend, SOURCES["expand"], "expand_v1")
        kernels.append(KernelCall(expand_fn, Mn, kpool_variants.EXPAND_THREADS, 0, lambda b: (
            b["indices"], d["positions"], b["selection"], np.int32(Mn), np.int32(k), np.int32(W))))
    kernels.append(mla_call)

    poison = {"scores": np.float32(np.nan), "indices": np.int32(INDEX_POISON), "part_acc": np.float32(np.nan),
              "part_ml": np.float32(np.nan), "out": np.uint16(0xFFFF), "lse": np.float32(np.nan),
              **topk_poison}                                   # the top-k's own workspace poison
    if caching == "compress":
        poison["pooled"] = np.uint16(0xFFFF)             # BF16 NaN
    if caching != "per_token":
        poison["selection"] = np.int32(INDEX_POISON)

    def read(b):
        return {"out": bf16_to_float(backend.to_host(b["out"])).astype(np.float64),
                "lse": backend.to_host(b["lse"]).astype(np.float64),
                "selection": backend.to_host(b[sel_name])}

    step = KernelStep(backend, kernels, b0, topk_restore, poison, read, dependent=False)
    scan_note = f"scan_wgmma_e4m3 {scan_ctas} CTAs x {tpw} tiles a CTA" if fp8_index else \
        f"scan_mma {scan_ctas} CTAs x {tpw} tiles a warp"
    notes += [scan_note, topk.note, f"{spec.MLA_DESIGN} {splits} splits"]
    step.note = ", ".join(notes)
    return step.ready()


class _HostLayer(Launch):
    """CPU backend: the families' CPU formulations composed, float32 / NumPy, every stream."""

    def __init__(self, geometry, point, inputs):
        self.geometry, self.point, self.inputs = geometry, point, inputs

    def poison(self) -> None:
        self.result = None

    def __call__(self) -> None:
        g, p, inp = self.geometry, self.point, self.inputs
        caching, kp = p["key_caching"], spec.kpool(g)
        keys = inp.resident["index_keys"]
        if caching == "compress":           # BF16 only (check_point)
            complete = inp["lengths"].astype(np.int64) // kp
            keys = kpool_variants.compress_numpy(keys, inp.resident["index_gates"], inp["ape"], complete)
        scales = inp.resident["index_key_scales"] if spec.index_dtype(p) == "fp8" else None
        cand = spec.key_values(p, keys, scales)                             # [M, C, 128] float32
        k, W = spec.k_selected(g, p), spec.width(g, p)
        picks = []
        for m in range(int(p["M"])):
            dots = np.maximum(cand[m] @ spec.index_queries(p, inp, m).T, np.float32(0))
            s = dots @ inp["iw"][m]                                          # float32 scores
            s[int(inp["eligible"][m]):] = -np.inf
            picks.append(rules.topk(s, k))                                   # ref_topk's rule
        picks = np.stack(picks)
        sel = picks if caching == "per_token" else kpool_variants.expand_numpy(picks, inp["positions"], kp, W)
        _, _, scale = mla.dims(g)
        rows = mla.arena_rows(spec.mla_point(p), inp["page_table"], sel)
        out, lse = [], []
        for m in range(int(p["M"])):
            c = bf16_to_float(inp.resident["arena"][rows[m][rows[m] >= 0]])
            o, l = mla.attend(bf16_to_float(inp["q"][m]), c, scale)          # float32 throughout
            out.append(o)
            lse.append(l)
        self.result = {"out": np.stack(out).astype(np.float64), "lse": np.stack(lse).astype(np.float64),
                       "selection": sel.astype(np.int32)}

    def outputs(self) -> dict[str, np.ndarray]:
        return dict(self.result)


LAYER_VARIANTS = (
    Variant("chained", "cuda", build_chained,
            why="the families' best kernels as one step on shared buffers: [compress_cuda] -> scan_mma (fp8: "
                "scan_wgmma_e4m3) -> radix_split2 (pooled scores) or radix_share (per token) -> [expand_cuda] -> "
                "split_wgmma_lean_coop_1wave (the combine inside it), in plain stream "
                "order (not every kernel waits on griddepcontrol, so no PDL)",
            supports=supports_chained,
            sources=("../dsa_indexer/kpool_compress.cu", "../dsa_indexer/scan_mma.cu", "../dsa_indexer/scan_wgmma.cu",
                     *("../dsa_indexer/" + s for s in TOPK_SOURCES), "../dsa_indexer/expand.cu",
                     f"../sparse_mla/{mla_variants.COOP_DESIGNS[spec.MLA_DESIGN][0]}")),
    Variant("ref_layer", "cpu", lambda g, p, i, b: _HostLayer(g, p, i), supports=lambda g, p: spec.strategy_problem(p),
            why="float32 NumPy on the host: compress_numpy, the scan's product, reference.topk, "
                "expand_numpy, attend", sources=("variants.py",)),
)
