"""Launchers and declarations of the kpool compress and expand variants.

kpool_compress:
- ``compress_cuda``: ``kpool_compress.cu`` (a thread per pool and 8 channels, streaming).
- ``torch_compress`` (peer): what an engineer writes in torch: view [M, P, 4, 128], add ape,
  softmax over the slot axis in FP32, weighted sum, to BF16, incomplete pools zeroed.
- ``ref_compress`` (CPU backend): the same formulation in float32 NumPy, every stream.

dsa_expand:
- ``expand_cuda``: ``expand.cu`` (one CTA a stream, 16-byte chunks of one pool each).
- ``ref_expand`` (CPU backend): NumPy over every stream at once, the kernel's chunk formula
  (an emulation of its index math, independent of the reference's row-by-row construction).

Nothing here imports cupy or torch.cuda at import time.
"""

from __future__ import annotations

import pathlib

import numpy as np

from harness.cuda import KernelCall, KernelStep, get_kernel, persistent_grid
from harness.registry import Launch, Variant
from harness.verify import INDEX_POISON_BYTE
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16

from . import expand_spec, kpool_spec

HERE = pathlib.Path(__file__).resolve().parent
COMPRESS_THREADS = 256
EXPAND_THREADS = 256
GROUPS = 16                       # 16-byte channel groups a 128-wide row: work items per pool
# The torch peer's FP32 temporaries (the keys and gates widened, the logits, the weights, their
# product: ~5 of [M, context, 128] FP32 at once) must fit beside the resident inputs on the device.
TORCH_TEMPORARY_LIMIT = 64 << 30
# 0xAA bytes as one int32: what an index output is poisoned with (harness.verify)
INDEX_POISON = int(np.frombuffer(bytes([INDEX_POISON_BYTE]) * 4, np.int32)[0])


def compress_outputs(geometry, point, bits: np.ndarray) -> dict[str, np.ndarray]:
    """The checked outputs from the pooled rows' BF16 bits [M, P, D] (every variant's read)."""
    return {"pooled": bf16_to_float(bits), "incomplete": kpool_spec.incomplete_bits(geometry, point, bits)}


def _supports_compress_kernel(geometry, point) -> str | None:
    kpool, D = kpool_spec.dims(geometry)
    if (kpool, D) != (4, 128):
        return f"kpool_compress.cu is written for pools of 4 and 128 channels; got {kpool} x {D}"
    if int(point["M"]) * kpool_spec.pools(geometry, point) * GROUPS >= 2 ** 31 - 2 ** 26:
        return ("2^31 - 2^26 or more work items (pools x 16 channel groups): the kernel's item index "
                "and stride are int32")
    return None


def compress_grid(backend, fn, M: int, P: int) -> int:
    """kpool_compress_v1's CTAs (of COMPRESS_THREADS) for M streams of P pools: a persistent grid
    over the M x P x 16 work items (the DSA layer's step launches it too)."""
    return persistent_grid(backend, fn, COMPRESS_THREADS, 0, -(-(M * P * GROUPS) // COMPRESS_THREADS))


def build_compress(geometry, point, inputs, backend) -> KernelStep:
    reason = _supports_compress_kernel(geometry, point)
    if reason:
        raise ValueError(f"compress_cuda: {reason}")
    cp = backend.cp
    Mn, P = int(point["M"]), kpool_spec.pools(geometry, point)
    _, D = kpool_spec.dims(geometry)
    ape, lengths = backend.to_device(inputs["ape"]), backend.to_device(inputs["lengths"])
    keys, gates = inputs.resident["keys"], inputs.resident["gates"]
    fn = get_kernel(backend, HERE / "kpool_compress.cu", "kpool_compress_v1")
    grid = compress_grid(backend, fn, Mn, P)
    with backend.stream:
        buffers = {"pooled": cp.empty((Mn, P, D), cp.uint16)}
    kernels = [KernelCall(fn, grid, COMPRESS_THREADS, 0, lambda b: (
        keys, gates, ape, lengths, b["pooled"], np.int32(Mn), np.int32(P)))]
    step = KernelStep(backend, kernels, buffers, {}, {"pooled": np.uint16(0xFFFF)},   # BF16 NaN
                      lambda b: compress_outputs(geometry, point, backend.to_host(b["pooled"])),
                      dependent=False)
    step.note = f"{grid} CTAs of {COMPRESS_THREADS} (persistent, grid-stride)"
    return step.ready()


def torch_compress(keys, gates, ape, incomplete):
    """The torch peer's math (any device): keys, gates [M, P, kpool, D] bfloat16, ape [kpool, D]
    float32, incomplete [M, P] bool -> [M, P, D] float32 (the caller rounds it to BF16)."""
    import torch

    w = torch.softmax(gates.float() + ape, dim=2)
    return (w * keys.float()).sum(dim=2).masked_fill_(incomplete[:, :, None], 0.0)


class _TorchCompress(Launch):
    """torch, as an engineer writes it, on our stream: the [M, context, 128] keys and gates viewed
    as [M, P, 4, 128], widened to FP32, ape added, softmax over the slot axis, the weighted sum,
    rounded to BF16, incomplete pools zeroed."""

    def __init__(self, geometry, point, inputs, backend):
        import torch

        self.torch, self.backend, self.geometry, self.point = torch, backend, geometry, point
        kpool, D = kpool_spec.dims(geometry)
        Mn, P = int(point["M"]), kpool_spec.pools(geometry, point)
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)
        dev = torch.device("cuda", backend.device_id)
        with torch.cuda.stream(self.ext):
            self.keys = torch.from_dlpack(inputs.resident["keys"]).view(torch.bfloat16).view(Mn, P, kpool, D)
            self.gates = torch.from_dlpack(inputs.resident["gates"]).view(torch.bfloat16).view(Mn, P, kpool, D)
            self.ape = torch.from_numpy(inputs["ape"]).to(dev)
            complete = torch.from_numpy(kpool_spec.complete(geometry, point)).to(dev)
            self.incomplete = torch.arange(P, device=dev)[None, :] >= complete[:, None]   # [M, P]
            self.out = torch.empty((Mn, P, D), dtype=torch.bfloat16, device=dev)
        backend.stream.synchronize()

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.out.view(self.torch.int16).fill_(-1)                                    # BF16 NaN bits

    def __call__(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.out.copy_(torch_compress(self.keys, self.gates, self.ape, self.incomplete))

    def outputs(self) -> dict[str, np.ndarray]:
        self.backend.stream.synchronize()
        with self.torch.cuda.stream(self.ext):
            bits = self.out.view(self.torch.int16).cpu().numpy().view(np.uint16)
        return compress_outputs(self.geometry, self.point, bits)


def _supports_torch_compress(geometry, point) -> str | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
    except Exception as exc:
        return f"torch not importable: {type(exc).__name__}: {exc}"
    return torch_temporaries_reason(geometry, point)


def torch_temporaries_reason(geometry, point) -> str | None:
    """Why the torch peer's FP32 temporaries would not fit, or None."""
    _, D = kpool_spec.dims(geometry)
    need = 5 * int(point["M"]) * int(point["context"]) * D * 4
    if need > TORCH_TEMPORARY_LIMIT:
        return (f"torch's FP32 temporaries (~5 x M x context x {D} x 4 B = {need >> 30} GiB) exceed "
                f"{TORCH_TEMPORARY_LIMIT >> 30} GiB beside the resident keys and gates")
    return None


def compress_numpy(keys: np.ndarray, gates: np.ndarray, ape: np.ndarray, complete: np.ndarray) -> np.ndarray:
    """keys, gates [M, n, D] uint16 BF16 bits, ape [kpool, D] float32, complete [M] -> the pooled
    BF16 bits [M, n / kpool, D]: float32 throughout, the slot softmax max-subtracted, incomplete
    pools 0, rounded to nearest even (the CUDA kernel's formulation, on the host)."""
    Mn, n, D = keys.shape
    kpool = ape.shape[0]
    P = n // kpool
    k = bf16_to_float(keys).reshape(Mn, P, kpool, D)
    logits = bf16_to_float(gates).reshape(Mn, P, kpool, D) + ape.astype(np.float32)
    e = np.exp(logits - logits.max(axis=2, keepdims=True))
    pooled = (e * k).sum(axis=2) / e.sum(axis=2)
    pooled[np.arange(P)[None, :] >= np.asarray(complete)[:, None]] = 0.0
    return float_to_bf16(pooled)


class _HostCompress(Launch):
    """CPU reference backend: ``compress_numpy`` over every stream, reading the resident inputs in place."""

    def __init__(self, geometry, point, inputs):
        self.geometry, self.point = geometry, point
        self.keys, self.gates = inputs.resident["keys"], inputs.resident["gates"]
        self.ape, self.complete = inputs["ape"], kpool_spec.complete(geometry, point)

    def poison(self) -> None:
        self.bits = np.full((int(self.point["M"]), kpool_spec.pools(self.geometry, self.point),
                             kpool_spec.dims(self.geometry)[1]), 0xFFFF, np.uint16)

    def __call__(self) -> None:
        self.bits = compress_numpy(self.keys, self.gates, self.ape, self.complete)

    def outputs(self) -> dict[str, np.ndarray]:
        return compress_outputs(self.geometry, self.point, self.bits)


def _supports_expand_kernel(geometry, point) -> str | None:
    kp, W, k = expand_spec.kpool(geometry), expand_spec.width(geometry, point), expand_spec.k_pools(geometry, point)
    if kp != 4:
        return f"expand.cu writes one pool as one 16-byte chunk of 4 slots; got kpool {kp}"
    if W % 4 or W < 4 * k + 4:
        return f"selection width {W} must be a multiple of 4 and hold the {4 * k} pool slots and a tail chunk"
    return None


def build_expand(geometry, point, inputs, backend) -> KernelStep:
    reason = _supports_expand_kernel(geometry, point)
    if reason:
        raise ValueError(f"expand_cuda: {reason}")
    cp = backend.cp
    Mn, k, W = int(point["M"]), expand_spec.k_pools(geometry, point), expand_spec.width(geometry, point)
    pools, pos = backend.to_device(inputs["pools"]), backend.to_device(inputs["positions"])
    fn = get_kernel(backend, HERE / "expand.cu", "expand_v1")
    with backend.stream:
        buffers = {"selection": cp.empty((Mn, W), cp.int32)}
    kernels = [KernelCall(fn, Mn, EXPAND_THREADS, 0, lambda b: (
        pools, pos, b["selection"], np.int32(Mn), np.int32(k), np.int32(W)))]
    return KernelStep(backend, kernels, buffers, {}, {"selection": np.int32(INDEX_POISON)},
                      lambda b: {"selection": backend.to_host(b["selection"])}, dependent=False).ready()


def expand_numpy(pools: np.ndarray, positions: np.ndarray, kpool: int, width: int) -> np.ndarray:
    """pools [M, k] int32, positions [M] -> selection [M, width] int32, every stream at once by the
    CUDA kernel's per-chunk formula (chunk c = slots kpool c .. + kpool - 1)."""
    Mn, k = pools.shape
    n = np.asarray(positions, np.int64)[:, None] + 1                     # [M, 1] tokens visible
    slot = np.arange(width, dtype=np.int64)[None, :]                      # [1, W]
    c, r = slot // kpool, slot % kpool
    pool = np.take_along_axis(pools.astype(np.int64), np.minimum(c, k - 1).repeat(Mn, 0), axis=1)
    base = n // kpool * kpool
    sparse = np.where(c < k, np.where(pool >= 0, kpool * pool + r, -1),
                      np.where((c == k) & (r < n - base), base + r, -1))
    dense = np.where(slot < n, slot, -1)
    return np.where(n <= kpool * k, dense, sparse).astype(np.int32)


class _HostExpand(Launch):
    """CPU reference backend: ``expand_numpy``."""

    def __init__(self, geometry, point, inputs):
        self.pools, self.positions = inputs["pools"], inputs["positions"]
        self.kpool, self.width = expand_spec.kpool(geometry), expand_spec.width(geometry, point)

    def poison(self) -> None:
        self.selection = np.full((len(self.pools), self.width), INDEX_POISON, np.int32)

    def __call__(self) -> None:
        self.selection = expand_numpy(self.pools, self.positions, self.kpool, self.width)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"selection": self.selection.copy()}


COMPRESS_VARIANTS = (
    Variant("compress_cuda", "cuda", build_compress,
            why="first design, memory-bound streaming: a thread per (pool, 8 channels), 8 independent "
                "16-byte read-only loads before any math, FP32 max-subtracted softmax (__expf), one "
                "16-byte store; persistent grid-stride with ape in registers",
            supports=_supports_compress_kernel, sources=("kpool_compress.cu",)),
    Variant("torch_compress", "cuda", lambda g, p, i, b: _TorchCompress(g, p, i, b),
            why="torch: view [M, P, 4, 128], + ape, softmax over the slots in FP32, weighted sum, to BF16",
            supports=_supports_torch_compress, peer=True),
    Variant("ref_compress", "cpu", lambda g, p, i, b: _HostCompress(g, p, i),
            why="float32 NumPy on the host, every stream, the kernel's formulation", sources=("kpool_variants.py",)),
)

EXPAND_VARIANTS = (
    Variant("expand_cuda", "cuda", build_expand,
            why="one CTA a stream; each 16-byte chunk of 4 slots is one pool (or the tail, or -1) "
                "computed directly, so every slot is written once with no barrier",
            supports=_supports_expand_kernel, sources=("expand.cu",)),
    Variant("ref_expand", "cpu", lambda g, p, i, b: _HostExpand(g, p, i),
            why="NumPy over every stream at once, the kernel's per-chunk formula", sources=("kpool_variants.py",)),
)
