"""Roofline family: the device copy every GB/s figure is compared against, and the in-place
read-modify-write shape of a recurrent-state update.

Two components share this folder: ``roofline`` (dst = src) and ``roofline_rmw`` (x ^= pattern in
place). Both are byte-exact against the host reference and are counted as bytes read + written.
"""

from __future__ import annotations

import pathlib

import numpy as np

from harness.axes import Axis
from harness.registry import Component, Launch, Variant, register
from harness.verify import Exact

FOLDER = pathlib.Path(__file__).parent
SOURCE = FOLDER / "copy.cu"
MIB = 1 << 20
THREADS = 256
UNROLL = 8          # matches UNROLL in copy.cu: words each thread has in flight
RESIDENT_BLOCKS_PER_SM = 2048 // THREADS   # threads per SM / threads per block
XOR_PATTERN = 0x5A5A5A5A
COPY_MIB = Axis("copy_mib", int, 1024, "MiB copied (read, and written again)", low=1, high=65536)


def _size_bytes(point) -> int:
    return int(point["copy_mib"]) * MIB


def make_inputs(geometry, point, rng) -> dict[str, np.ndarray]:
    """src: [copy_mib MiB] random uint32 words (never zeros: unwritten output must show)."""
    return {"src": rng.integers(1, 2**32, size=_size_bytes(point) // 4, dtype=np.uint32)}


def ref_copy(geometry, point, inputs) -> dict[str, np.ndarray]:
    return {"dst": inputs["src"]}


def ref_rmw(geometry, point, inputs) -> dict[str, np.ndarray]:
    return {"x": inputs["src"] ^ np.uint32(XOR_PATTERN)}


def bytes_moved(geometry, point) -> int:
    return 2 * _size_bytes(point)  # every byte read once and written once


def _grid(backend, words: int) -> int:
    # One wave of resident blocks (grid-stride over tiles after that), never more than the work
    # needs: the grid size sets the bytes in flight, the tiles set the access order.
    need = -(-words // (THREADS * UNROLL))
    return max(1, min(need, backend.props["multiProcessorCount"] * RESIDENT_BLOCKS_PER_SM))


class _CudaMove(Launch):
    """Launch for the CUDA copy / rmw kernels; poison fills the destination with 0xFF bytes."""

    def __init__(self, backend, kernel_name: str, inputs, word_bytes: int, in_place: bool):
        cp = backend.cp
        self.backend = backend
        self.kernel = backend.module(SOURCE).get_function(kernel_name)
        self.src = backend.to_device(inputs["src"])
        self.in_place = in_place
        self.initial = self.src if in_place else None
        self.dst = cp.empty_like(self.src)
        self.words = self.src.nbytes // word_bytes
        self.grid = _grid(backend, self.words)

    def poison(self) -> None:
        with self.backend.stream:
            if self.in_place:
                self.dst[...] = self.initial  # the in-place buffer restarts from the input
            else:
                self.dst.fill(np.uint32(0xFFFFFFFF))

    def __call__(self) -> None:
        cp = self.backend.cp
        if self.in_place:
            args = (self.dst, cp.uint64(self.words), cp.uint32(XOR_PATTERN))
        else:
            args = (self.src, self.dst, cp.uint64(self.words))
        self.backend.launch(self.kernel, (self.grid,), (THREADS,), args)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"x" if self.in_place else "dst": self.backend.to_host(self.dst)}


class _HostMove(Launch):
    """CPU reference backend: NumPy copy / in-place XOR."""

    def __init__(self, inputs, in_place: bool):
        self.src = inputs["src"]
        self.in_place = in_place
        self.dst = np.empty_like(self.src)

    def poison(self) -> None:
        if self.in_place:
            np.copyto(self.dst, self.src)
        else:
            self.dst.fill(np.uint32(0xFFFFFFFF))

    def __call__(self) -> None:
        if self.in_place:
            np.bitwise_xor(self.dst, np.uint32(XOR_PATTERN), out=self.dst)
        else:
            np.copyto(self.dst, self.src)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"x" if self.in_place else "dst": self.dst.copy()}


def _needs_16_byte_words(geometry, point) -> str | None:
    return None if _size_bytes(point) % 16 == 0 else "copy size must be a multiple of 16 bytes"


class _TorchCopy(Launch):
    """Peer: torch's device copy (``Tensor.copy_``) on our stream, over the same CuPy buffers."""

    def __init__(self, backend, inputs):
        import torch

        self.torch, self.backend = torch, backend
        self.src_cp = backend.to_device(inputs["src"])
        self.dst_cp = backend.cp.empty_like(self.src_cp)
        self.src, self.dst = torch.from_dlpack(self.src_cp), torch.from_dlpack(self.dst_cp)
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)

    def poison(self) -> None:
        with self.backend.stream:
            self.dst_cp.fill(np.uint32(0xFFFFFFFF))

    def __call__(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.dst.copy_(self.src)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"dst": self.backend.to_host(self.dst_cp)}


def _torch_importable(geometry, point) -> str | None:
    try:
        import torch

        return None if torch.cuda.is_available() else "torch sees no CUDA device"
    except Exception as exc:
        return f"torch not importable: {type(exc).__name__}: {exc}"


def _cuda(name: str, word_bytes: int, in_place: bool = False):
    return lambda g, p, i, b: _CudaMove(b, name, i, word_bytes, in_place)


COPY_VARIANTS = (
    Variant("copy_v16", "cuda", _cuda("copy_v16", 16),
            why="block-contiguous 16-byte tiles, 8 loads in flight per thread, one resident wave",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("copy_v16_cs", "cuda", _cuda("copy_v16_cs", 16),
            why="copy_v16 with evict-first (.cs) loads and stores: what the streaming hint buys",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("copy_v16_strided", "cuda", _cuda("copy_v16_strided", 16),
            why="textbook grid-stride, unrolled words a grid apart: the cost of poor DRAM locality",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("copy_v4", "cuda", _cuda("copy_v4", 4),
            why="4-byte words in copy_v16's layout: 4x the instructions per byte",
            sources=("copy.cu",)),
    Variant("torch_copy", "cuda", lambda g, p, i, b: _TorchCopy(b, i),
            why="torch Tensor.copy_ on the same stream and buffers: an outside copy to check ours against",
            supports=_torch_importable, peer=True),
    Variant("numpy_copy", "cpu", lambda g, p, i, b: _HostMove(i, False),
            why="NumPy copyto on the host: the CPU reference backend's copy"),
)

RMW_VARIANTS = (
    Variant("rmw_v16", "cuda", _cuda("rmw_v16", 16, in_place=True),
            why="in-place 16-byte read-modify-write: a state update's access pattern",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("numpy_xor", "cpu", lambda g, p, i, b: _HostMove(i, True),
            why="NumPy in-place XOR on the host"),
)

_common = dict(
    axes=(COPY_MIB,),
    layers=lambda geometry: 1,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=lambda geometry, point: 0,
    cpu_max_bytes=1 << 30,
    folder=str(FOLDER),
)

register(Component(name="roofline", reference=ref_copy, checks=lambda point: {"dst": Exact()},
                   variants=COPY_VARIANTS,
                   summary="device copy, bytes read + written", **_common))
register(Component(name="roofline_rmw", reference=ref_rmw, checks=lambda point: {"x": Exact()},
                   variants=RMW_VARIANTS,
                   footprint=lambda geometry, point: _size_bytes(point),  # one buffer, in place
                   summary="in-place read-modify-write, bytes read + written", **_common))
