"""Launchers and declarations of the indexer scan's variants and of its stream-only floor.

- ``scan_fma`` (CUDA cores): ``scan_fma.cu``, both layouts, bf16 and fp8; FP32-FMA bound.
- ``scan_mma`` (tensor cores): ``scan_mma.cu``, keys straight from global memory into the MMA A
  fragments through a dim permutation; cand_dim only.
- ``scan_mma_fp8x2`` / ``scan_mma_fp8x2_w8`` (FP8 keys): scan_mma with warp tiles of 32 keys, twice
  the key bytes in flight a warp (12 warps an SM with a few spilled bytes / 8 warps without).
- ``scan_mma_e4m3`` (FP8 keys and FP8 queries): the e4m3 tensor-core form (mma.sync m16n8k32
  e4m3 x e4m3, FP32 accumulate) over the codes as loaded, w x q_scale folded per head, warp tiles
  of 32 keys; the only design here that takes query_dtype fp8 besides torch and the host.
- ``scan_wgmma_e4m3`` (FP8 keys and FP8 queries, sm_90a): ``scan_wgmma.cu``, wgmma m64n32k32 e4m3 with
  both operands in 128-byte-swizzled shared tiles (keys by a cp.async pipeline), one warpgroup a CTA;
  compiled with ``-arch=sm_90a`` through ``get_kernel``'s options.
- ``torch_bmm`` (peer): bmm(keys, q^T) in BF16, relu, x w, the head sum in FP32, masked_fill -inf
  (fp8 queries dequantized to BF16 first).
- ``ref_scan`` (CPU backend): float32 NumPy on the host, every stream.
- ``stream_xor`` (component ``indexer_stream``): ``scan_stream.cu``, the same key bytes read once
  and XORed per key: the family's floor. ``numpy_stream``: the same on the host.

Nothing here imports cupy or torch.cuda at import time.
"""

from __future__ import annotations

import pathlib

import numpy as np

from harness.cuda import KernelCall, KernelStep, ctas_per_sm, get_kernel
from harness.registry import Launch, Variant
from kernels import fp8 as fp8_rows
from kernels.sparse_mla.variants import source_define
from kernels.wgmma import require_wgmma_device, wgmma_options

from . import scan_spec as spec

HERE = pathlib.Path(__file__).resolve().parent


def define(source: str, name: str) -> int:
    """``#define NAME <integer>`` of one of this folder's .cu files (sparse_mla's reader, given
    an absolute path): what a launcher must agree with the kernel on, declared once there."""
    return source_define(str(HERE / source), name)


def _supports_cuda(geometry, point) -> str | None:
    H, D = spec.dims(geometry)
    if (H, D) != (32, 128):
        return f"the scan kernels are written for 32 heads x 128; got {H} x {D}"
    return None


def _refuse_fp8_queries(name: str, point) -> str | None:
    """The BF16-query designs (and the fused select built on scan_mma) refuse fp8 queries: an e4m3
    code x an FP32 scale is in general not a BF16 value, so no BF16 q gives the point's scores."""
    if spec.query_dtype(point) == "fp8":
        return (f"{name} reads q as BF16; an e4m3 query x its FP32 scale is not a BF16 value in general "
                f"(query_dtype fp8 runs on scan_mma_e4m3, torch_bmm and the host)")
    return None


def _supports_mma(geometry, point) -> str | None:
    if point["key_layout"] == "dim_cand":
        return ("scan_mma reads keys straight into A fragments (a key's dims contiguous); with dim_cand the "
                "two dims of one fragment register sit in different rows, which needs a shared-memory "
                "transpose (ldmatrix.trans) that this design does not have")
    return _refuse_fp8_queries("scan_mma", point) or _supports_cuda(geometry, point)


def _supports_fma(geometry, point) -> str | None:
    return _refuse_fp8_queries("scan_fma", point) or _supports_cuda(geometry, point)


class _Device:
    """The host inputs on the device (q, or q_codes and q_scales for fp8 queries; w, eligible);
    the keys and scales are resident."""

    def __init__(self, backend, inputs):
        if "q" in inputs:
            self.q = backend.to_device(inputs["q"])
        else:
            self.q = backend.to_device(inputs["q_codes"])
            self.q_scales = backend.to_device(inputs["q_scales"])
        self.w = backend.to_device(inputs["w"])
        self.eligible = backend.to_device(inputs["eligible"])
        self.keys = inputs.resident["keys"]
        scales = inputs.resident["key_scales"]
        # bf16 keys have no scales (an empty array); a kernel that never reads the pointer gets the keys'
        self.scales = scales if scales.size else self.keys


def _scores_step(backend, point, kernels, C: int) -> KernelStep:
    """A step writing scores [M, C] FP32, poisoned with NaN (every element must be written)."""
    cp = backend.cp
    with backend.stream:
        buffers = {"scores": cp.empty((int(point["M"]), C), cp.float32)}
    return KernelStep(backend, kernels, buffers, {}, {"scores": np.float32(np.nan)},
                      lambda b: {"scores": backend.to_host(b["scores"]).astype(np.float64)}, dependent=False)


def build_fma(geometry, point, inputs, backend) -> KernelStep:
    reason = _supports_fma(geometry, point)
    if reason:
        raise ValueError(f"scan_fma: {reason}")
    d = _Device(backend, inputs)
    Mn, C, Cp = int(point["M"]), spec.n_candidates(geometry, point), spec.padded_candidates(geometry, point)
    per_cta = define("scan_fma.cu", "SCAN_FMA_PER_CTA")
    threads = define("scan_fma.cu", "SCAN_FMA_THREADS")
    fn = get_kernel(backend, HERE / "scan_fma.cu", f"scan_fma_{point['key_layout']}_{point['key_dtype']}")
    kernels = [KernelCall(fn, (-(-C // per_cta), Mn), threads, 0, lambda b: (
        d.q, d.w, d.keys, d.scales, d.eligible, b["scores"], np.int32(Mn), np.int32(C), np.int32(Cp)))]
    step = _scores_step(backend, point, kernels, C)
    return step.ready()


def mma_tiles_per_warp(total_tiles: int, ctas: int, warps: int) -> int:
    """Tiles a warp streams when ``ctas`` persistent CTAs of ``warps`` warps share ``total_tiles``:
    the fewest that cover them all."""
    return max(1, -(-total_tiles // (ctas * warps)))


def mma_launch(backend, fn, M: int, C: int, sub: int = 1) -> tuple[int, int, int]:
    """scan_mma's launch for M streams of C keys in warp tiles of ``sub`` x 16 keys: (threads,
    CTAs, tiles a warp). Persistent: as many CTAs as fit at once, never more than give each warp
    one tile, then as few as cover the tiles at that many tiles a warp (the DSA layer's step and
    the fused select's baseline launch it too)."""
    threads, warps = define("scan_mma.cu", "SCAN_MMA_THREADS"), define("scan_mma.cu", "SCAN_MMA_WARPS")
    total = M * -(-C // (define("scan_mma.cu", "SCAN_MMA_TILE") * sub))
    ctas = min(int(backend.props["multiProcessorCount"]) * ctas_per_sm(fn, backend.props, threads, 0),
               -(-total // warps))
    tpw = mma_tiles_per_warp(total, ctas, warps)
    return threads, -(-total // (tpw * warps)), tpw


def build_mma(geometry, point, inputs, backend, kernel: str | None = None, sub: int = 1) -> KernelStep:
    """scan_mma_<key_dtype>, or (fp8 only) ``kernel`` with warp tiles of ``sub`` m-tiles of 16 keys."""
    reason = _supports_mma(geometry, point)
    if reason:
        raise ValueError(f"scan_mma: {reason}")
    d = _Device(backend, inputs)
    Mn, C = int(point["M"]), spec.n_candidates(geometry, point)
    fp8 = point["key_dtype"] == "fp8"
    fn = get_kernel(backend, HERE / "scan_mma.cu", kernel or f"scan_mma_{point['key_dtype']}")
    threads, ctas, tpw = mma_launch(backend, fn, Mn, C, sub)
    if fp8:
        args = lambda b: (d.q, d.w, d.keys, d.scales, d.eligible, b["scores"], np.int32(Mn), np.int32(C),  # noqa: E731
                          np.int32(tpw))
    else:
        args = lambda b: (d.q, d.w, d.keys, d.eligible, b["scores"], np.int32(Mn), np.int32(C), np.int32(tpw))  # noqa: E731
    step = _scores_step(backend, point, [KernelCall(fn, ctas, threads, 0, args)], C)
    step.note = f"{ctas} persistent CTAs, {tpw} tiles of {define('scan_mma.cu', 'SCAN_MMA_TILE') * sub} keys a warp"
    return step.ready()


def _supports_fp8x2(geometry, point) -> str | None:
    if point["key_dtype"] != "fp8":
        return "scan_mma_fp8x2 is the FP8 keys' design (bf16 tiles are 8 KiB in flight a warp already: scan_mma)"
    return _supports_mma(geometry, point)


def _supports_e4m3_queries(name: str, how: str, why_cand_dim: str):
    """supports of a design that multiplies e4m3 keys by e4m3 queries (``how``: on which MMA) and reads
    whole key rows (``why_cand_dim``: why that needs the cand_dim layout)."""
    def supports(geometry, point) -> str | None:
        if point["key_dtype"] != "fp8" or spec.query_dtype(point) != "fp8":
            return (f"{name} multiplies e4m3 keys by e4m3 queries{how} (key_dtype fp8 and query_dtype fp8); "
                    f"got key_dtype {point['key_dtype']}, query_dtype {spec.query_dtype(point)}")
        if point["key_layout"] == "dim_cand":
            return f"{name} {why_cand_dim}: cand_dim only"
        return _supports_cuda(geometry, point)
    return supports


_supports_e4m3 = _supports_e4m3_queries("scan_mma_e4m3", "", "reads keys straight into A fragments (a key's codes "
                                        "contiguous)")


def build_e4m3(geometry, point, inputs, backend) -> KernelStep:
    """scan_mma_e4m3: FP8 keys x FP8 queries on the e4m3 MMA, warp tiles of SCAN_MMA_E4M3_SUB x 16 keys."""
    reason = _supports_e4m3(geometry, point)
    if reason:
        raise ValueError(f"scan_mma_e4m3: {reason}")
    d = _Device(backend, inputs)
    Mn, C = int(point["M"]), spec.n_candidates(geometry, point)
    fn = get_kernel(backend, HERE / "scan_mma.cu", "scan_mma_e4m3")
    sub = define("scan_mma.cu", "SCAN_MMA_E4M3_SUB")
    threads, ctas, tpw = mma_launch(backend, fn, Mn, C, sub)
    args = lambda b: (d.q, d.q_scales, d.w, d.keys, d.scales, d.eligible, b["scores"], np.int32(Mn),  # noqa: E731
                      np.int32(C), np.int32(tpw))
    step = _scores_step(backend, point, [KernelCall(fn, ctas, threads, 0, args)], C)
    step.note = f"{ctas} persistent CTAs, {tpw} tiles of {define('scan_mma.cu', 'SCAN_MMA_TILE') * sub} keys a warp"
    return step.ready()


_supports_wgmma = _supports_e4m3_queries("scan_wgmma_e4m3", " on wgmma", "copies whole key rows (a key's 128 "
                                         "codes contiguous) into K-major shared tiles")


# scan_wgmma.cu's NVRTC options: sm_90a and the define that switches its wgmma body on (kernels/wgmma.py)
WGMMA_OPTIONS = wgmma_options("SCAN_WGMMA_SM90A")


def wgmma_launch(backend, fn, M: int, C: int) -> tuple[int, int, int]:
    """scan_wgmma_e4m3's launch for M streams of C keys in CTA tiles of SCAN_WGMMA_TILE keys: (threads,
    CTAs, tiles a CTA). Persistent: as many CTAs as fit at once (registers and the static shared
    memory), never more than tiles, then as few as cover the tiles at that many tiles a CTA."""
    threads, tile = define("scan_wgmma.cu", "SCAN_WGMMA_THREADS"), define("scan_wgmma.cu", "SCAN_WGMMA_TILE")
    total = M * -(-C // tile)
    ctas = min(int(backend.props["multiProcessorCount"]) * ctas_per_sm(fn, backend.props, threads, 0), total)
    tpc = mma_tiles_per_warp(total, ctas, 1)
    return threads, -(-total // tpc), tpc


def wgmma_kernel(backend):
    """scan_wgmma_e4m3 compiled for sm_90a (refused on any other device), with the largest
    shared-memory carveout: 5 CTAs of 38 KiB static shared memory an SM (the persistent grid counts
    them), so the driver's choice cannot leave fewer CTAs resident than the grid assumes (a CuPy
    Function without the attribute leaves it to the driver). The DSA layer's step calls it too."""
    require_wgmma_device("scan_wgmma_e4m3", backend)
    fn = get_kernel(backend, HERE / "scan_wgmma.cu", "scan_wgmma_e4m3", options=WGMMA_OPTIONS)
    if hasattr(type(fn), "preferred_shared_memory_carveout"):
        fn.preferred_shared_memory_carveout = 100
    return fn


def build_wgmma(geometry, point, inputs, backend) -> KernelStep:
    """scan_wgmma_e4m3: FP8 keys x FP8 queries on wgmma m64n32k32 e4m3 (sm_90a), 64-key CTA tiles."""
    reason = _supports_wgmma(geometry, point)
    if reason:
        raise ValueError(f"scan_wgmma_e4m3: {reason}")
    d = _Device(backend, inputs)
    Mn, C = int(point["M"]), spec.n_candidates(geometry, point)
    fn = wgmma_kernel(backend)
    threads, ctas, tpc = wgmma_launch(backend, fn, Mn, C)
    args = lambda b: (d.q, d.q_scales, d.w, d.keys, d.scales, d.eligible, b["scores"], np.int32(Mn),  # noqa: E731
                      np.int32(C), np.int32(tpc))
    step = _scores_step(backend, point, [KernelCall(fn, ctas, threads, 0, args)], C)
    step.note = f"{ctas} persistent CTAs, {tpc} tiles of {define('scan_wgmma.cu', 'SCAN_WGMMA_TILE')} keys a CTA"
    return step.ready()


def _build_fp8x2(kernel: str):
    def build(geometry, point, inputs, backend) -> KernelStep:
        reason = _supports_fp8x2(geometry, point)
        if reason:
            raise ValueError(f"{kernel}: {reason}")
        return build_mma(geometry, point, inputs, backend, kernel=kernel, sub=2)
    return build


def build_stream(geometry, point, inputs, backend) -> KernelStep:
    reason = _supports_cuda(geometry, point)
    if reason:
        raise ValueError(f"stream_xor: {reason}")
    cp = backend.cp
    d = _Device(backend, inputs)
    Mn, C, Cp = int(point["M"]), spec.n_candidates(geometry, point), spec.padded_candidates(geometry, point)
    layout, dtype = point["key_layout"], point["key_dtype"]
    fp8 = dtype == "fp8"
    fn = get_kernel(backend, HERE / "scan_stream.cu", f"scan_stream_{layout}_{dtype}")
    tag = dtype.upper()
    if layout == "cand_dim":
        per_cta, threads = define("scan_stream.cu", f"STREAM_CD_KEYS_PER_CTA_{tag}"), define("scan_stream.cu", "STREAM_THREADS")
        tail = (np.int32(Mn), np.int32(C))
    else:
        per_cta, threads = define("scan_stream.cu", f"STREAM_DC_CANDS_PER_CTA_{tag}"), define("scan_stream.cu", "STREAM_DC_THREADS")
        tail = (np.int32(Mn), np.int32(C), np.int32(Cp))
    head = (d.keys, d.scales) if fp8 else (d.keys,)
    kernels = [KernelCall(fn, (-(-C // per_cta), Mn), threads, 0, lambda b: (*head, d.eligible, b["checksum"], *tail))]
    with backend.stream:
        buffers = {"checksum": cp.empty((Mn, C), cp.uint32)}
    # A checksum never written keeps this pattern (a real key's XOR equals it with odds 2^-32).
    step = KernelStep(backend, kernels, buffers, {}, {"checksum": np.uint32(0xA5A5A5A5)},
                      lambda b: {"checksum": backend.to_host(b["checksum"])}, dependent=False)
    return step.ready()


class _TorchBmm(Launch):
    """torch, as an engineer writes it: bmm(keys, q^T) in BF16, relu, x w and the head sum in FP32,
    masked_fill -inf; FP8 keys dequantized to BF16 in the step first; on our stream."""

    def __init__(self, geometry, point, inputs, backend):
        import torch

        self.torch, self.backend = torch, backend
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)
        self.by_dim = point["key_layout"] == "dim_cand"
        self.fp8 = point["key_dtype"] == "fp8"
        self.C = spec.n_candidates(geometry, point)
        Mn, (H, D) = int(point["M"]), spec.dims(geometry)
        dev = torch.device("cuda", backend.device_id)
        with torch.cuda.stream(self.ext):
            keys = torch.from_dlpack(inputs.resident["keys"])
            self.keys = keys.view(torch.float8_e4m3fn) if self.fp8 else keys.view(torch.bfloat16)
            self.scales = torch.from_dlpack(inputs.resident["key_scales"]) if self.fp8 else None
            if spec.query_dtype(point) == "fp8":   # dequantized to BF16 once (2^-9 per element: its 1e-2)
                q = torch.from_numpy(fp8_rows.dequantize_rows(inputs["q_codes"].reshape(Mn * H, D),
                                                              inputs["q_scales"].reshape(Mn * H)).reshape(Mn, H, D))
                self.q = q.to(dev).to(torch.bfloat16)
            else:
                self.q = torch.from_numpy(inputs["q"].view(np.int16)).to(dev).view(torch.bfloat16)  # [M, H, D]
            self.w = torch.from_numpy(inputs["w"]).to(dev)                                       # [M, H]
            cand = torch.arange(self.C, device=dev)
            self.mask = cand[None, :] >= torch.from_numpy(inputs["eligible"]).to(dev)[:, None]  # [M, C]
            self.scores = torch.empty((len(self.q), self.C), dtype=torch.float32, device=dev)
        backend.stream.synchronize()

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.scores.fill_(float("nan"))

    def __call__(self) -> None:
        torch = self.torch
        with torch.cuda.stream(self.ext):
            k = self.keys
            if self.by_dim:                                   # [M, D, Cpad]
                if self.fp8:
                    k = k[:, :, :self.C].to(torch.bfloat16) * self.scales[:, None, :].to(torch.bfloat16)
                dots = torch.bmm(self.q, k)                   # [M, H, C(pad)] bf16
                s = torch.bmm(self.w[:, None, :], torch.relu(dots.float()))[:, 0, :self.C]
            else:                                             # [M, C, D]
                if self.fp8:
                    k = k.to(torch.bfloat16) * self.scales[:, :, None].to(torch.bfloat16)
                dots = torch.bmm(k, self.q.transpose(1, 2))   # [M, C, H] bf16
                s = torch.bmm(torch.relu(dots.float()), self.w[:, :, None])[:, :, 0]
            self.scores.copy_(s.masked_fill(self.mask, float("-inf")))

    def outputs(self) -> dict[str, np.ndarray]:
        torch = self.torch
        self.backend.stream.synchronize()
        with torch.cuda.stream(self.ext):
            return {"scores": self.scores.double().cpu().numpy()}


def _supports_torch(geometry, point) -> str | None:
    try:
        import torch

        return None if torch.cuda.is_available() else "torch sees no CUDA device"
    except Exception as exc:
        return f"torch not importable: {type(exc).__name__}: {exc}"


class _HostScan(Launch):
    """CPU reference backend: float32 NumPy over every stream, the keys read in place."""

    def __init__(self, geometry, point, inputs):
        self.geometry, self.point, self.inputs = geometry, point, inputs

    def poison(self) -> None:
        self.scores = None

    def __call__(self) -> None:
        rows = []
        for m in range(int(self.point["M"])):
            raw, scales = spec.stream_keys(self.geometry, self.point, self.inputs, m)
            keys = spec.key_values(raw, scales)                                      # float32 [C, D]
            dots = np.maximum(keys @ spec.query_values(self.point, self.inputs, m).T, np.float32(0))
            s = dots @ self.inputs["w"][m]
            s[int(self.inputs["eligible"][m]):] = -np.inf
            rows.append(s)
        self.scores = np.stack(rows)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"scores": np.asarray(self.scores, dtype=np.float64)}


class _HostStream(Launch):
    """CPU reference backend: every stream's key checksums on the host."""

    def __init__(self, geometry, point, inputs):
        self.geometry, self.point, self.inputs = geometry, point, inputs

    def poison(self) -> None:
        self.checksum = None

    def __call__(self) -> None:
        rows = []
        for m in range(int(self.point["M"])):
            xor = spec.key_checksums(*spec.stream_keys(self.geometry, self.point, self.inputs, m))
            xor[int(self.inputs["eligible"][m]):] = 0
            rows.append(xor)
        self.checksum = np.stack(rows)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"checksum": self.checksum.copy()}


SCAN_VARIANTS = (
    Variant("scan_fma", "cuda", build_fma,
            why="CUDA cores: q staged once per CTA in shared memory as [dim][head] floats (broadcast "
                "LDS.128), two keys a thread, 2 x 32 FP32 accumulators; FP32-FMA bound (~1 ms at M = 32, "
                "262144 per-token keys, against ~490 us of key reads)",
            supports=_supports_fma, sources=("scan_fma.cu",)),
    Variant("scan_mma", "cuda", build_mma,
            why="tensor cores (mma.sync m16n8k16, bf16 / f16 from e4m3): keys straight from global memory "
                "into A fragments by a dim permutation (16-byte loads of whole sectors), q's B fragments in "
                "registers, the next tile's loads before this tile's MMAs, a persistent grid over the "
                "flattened (stream, tile) work",
            supports=_supports_mma, sources=("scan_mma.cu",)),
    Variant("scan_mma_fp8x2", "cuda", _build_fp8x2("scan_mma_fp8x2"),
            why="scan_mma for FP8 keys with warp tiles of 32 keys (2 m-tiles): 8 KiB of keys in flight a "
                "warp, 96 KiB an SM at 12 warps, as bf16 has, against scan_mma_fp8's 48 KiB (fp8 ran at 77% "
                "of its floor, bf16 at 91%); 168 registers with 40 B spilled",
            supports=_supports_fp8x2, sources=("scan_mma.cu",)),
    Variant("scan_mma_fp8x2_w8", "cuda", _build_fp8x2("scan_mma_fp8x2_w8"),
            why="scan_mma_fp8x2 at launch bounds (128, 2): no spills (246 registers), 8 warps an SM, 64 KiB "
                "in flight an SM",
            supports=_supports_fp8x2, sources=("scan_mma.cu",)),
    Variant("scan_mma_e4m3", "cuda", build_e4m3,
            why="FP8 keys x FP8 queries (q in e4m3, one FP32 scale a head, as serving engines feed their "
                "fp8 index kernel): mma.sync m16n8k32 e4m3 x e4m3 with FP32 accumulate over the codes as "
                "loaded (no per-byte cvt in the source; on sm_90 ptxas lowers it to F2FP + HMMA: "
                "SCAN_NOTES), w x q_scale folded per head after the relu, x the key scale after the head "
                "sum, warp tiles of 32 keys",
            supports=_supports_e4m3, sources=("scan_mma.cu",)),
    Variant("scan_wgmma_e4m3", "cuda", build_wgmma,
            why="FP8 keys x FP8 queries on Hopper's native FP8 tensor cores: wgmma m64n32k32 e4m3 x e4m3 "
                "(sm_90a), one warpgroup a CTA, 64-key tiles copied by cp.async into 128-byte-swizzled "
                "K-major shared tiles (4 stages, 3 in flight) and q's 4 KiB beside them, both read by "
                "descriptor; nothing converted per byte; the scan_mma epilogue (w x q_scale folded after "
                "the relu, x the key scale); FP8 accumulation inside wgmma is not FP32 (SCAN_NOTES)",
            supports=_supports_wgmma, sources=("scan_wgmma.cu",)),
    Variant("torch_bmm", "cuda", lambda g, p, i, b: _TorchBmm(g, p, i, b),
            why="torch: bmm(keys, q^T) in BF16, relu, x w and the head sum in FP32, masked_fill -inf "
                "(FP8 keys dequantized to BF16 in the step; FP8 queries dequantized to BF16 once)",
            supports=_supports_torch, peer=True),
    Variant("ref_scan", "cpu", lambda g, p, i, b: _HostScan(g, p, i),
            why="float32 NumPy on the host, every stream", sources=("scan_spec.py",)),
)

STREAM_VARIANTS = (
    Variant("stream_xor", "cuda", build_stream,
            why="reads exactly the scan's key bytes (eligible keys, same layout and dtype, fp8 scales) with "
                "16-byte loads, 8 a lane in flight, and writes each key's XOR: the scan's floor",
            supports=_supports_cuda, sources=("scan_stream.cu",)),
    Variant("numpy_stream", "cpu", lambda g, p, i, b: _HostStream(g, p, i),
            why="NumPy on the host: every key's XOR", sources=("scan_spec.py",)),
)
