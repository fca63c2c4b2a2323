"""Roofline family: the device copy every GB/s figure is compared against, and the in-place
read-modify-write shape of a recurrent-state update.

Two components share this folder: ``roofline`` (dst = src) and ``roofline_rmw`` (x ^= pattern in
place). Both are byte-exact against the host reference and are counted as bytes read + written.
"""

from __future__ import annotations

import pathlib

import numpy as np

from harness.registry import Component, Variant, register

FOLDER = pathlib.Path(__file__).parent
SOURCE = FOLDER / "copy.cu"
MIB = 1 << 20
THREADS = 256
UNROLL = 4          # matches UNROLL in copy.cu: words each thread has in flight
XOR_PATTERN = 0x5A5A5A5A


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
    # Enough blocks to fill every SM several times over, never more than the work needs:
    # the kernels are grid-stride, so the grid size only sets the bytes in flight.
    need = -(-words // (THREADS * UNROLL))
    return max(1, min(need, backend.props["multiProcessorCount"] * 16))


class _CudaMove:
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
        self.graph = None

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


class _HostMove:
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


COPY_VARIANTS = (
    Variant("copy_v16", "cuda", lambda g, p, i, b: _CudaMove(b, "copy_v16", i, 16, False),
            why="16-byte loads and stores, 4 in flight per thread: the copy roofline",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("copy_v4", "cuda", lambda g, p, i, b: _CudaMove(b, "copy_v4", i, 4, False),
            why="4-byte words: 4x the instructions per byte, to show what vectorisation buys",
            sources=("copy.cu",)),
    Variant("numpy_copy", "cpu", lambda g, p, i, b: _HostMove(i, False),
            why="NumPy copyto on the host: the CPU reference backend's copy"),
)

RMW_VARIANTS = (
    Variant("rmw_v16", "cuda", lambda g, p, i, b: _CudaMove(b, "rmw_v16", i, 16, True),
            why="in-place 16-byte read-modify-write: a state update's access pattern",
            supports=_needs_16_byte_words, sources=("copy.cu",)),
    Variant("numpy_xor", "cpu", lambda g, p, i, b: _HostMove(i, True),
            why="NumPy in-place XOR on the host"),
)

_common = dict(
    axes=("copy_mib",),
    layers=lambda geometry: 1,
    make_inputs=make_inputs,
    bytes_moved=bytes_moved,
    flops=lambda geometry, point: 0,
    tolerance=lambda point, name: 0.0,  # byte-exact
    cpu_max_bytes=1 << 30,
    folder=str(FOLDER),
)

register(Component(name="roofline", reference=ref_copy, variants=COPY_VARIANTS,
                   summary="device copy, bytes read + written", **_common))
register(Component(name="roofline_rmw", reference=ref_rmw, variants=RMW_VARIANTS,
                   summary="in-place read-modify-write, bytes read + written", **_common))
