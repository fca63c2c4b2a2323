"""The kernel-agnostic CUDA launch layer every family's launchers use.

- ``get_kernel``: a kernel from a source file through the backend's module cache
  (``CudaBackend.module``: NVRTC, cached by the content of every compiled file), with the dynamic
  shared-memory opt-in above 48 KiB refused when the device cannot give it.
- ``ctas_per_sm`` / ``persistent_grid``: occupancy from a kernel's registers and shared memory,
  and a persistent grid of as many CTAs as fit at once (never more than there are tiles).
- ``KernelCall`` / ``KernelStep``: one decode step made of several kernels (a convolution then a
  step; an indexer's compress -> score -> select -> expand), each after the first launched as a
  programmatic dependent of the one before (sm_90 PDL) when the step says so, and a chain of steps
  (``timing.chain``) likewise, through ``CudaBackend.launch``.

Nothing here imports CuPy at import time, and nothing here knows a family.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from harness.registry import Launch

STATIC_SMEM_LIMIT = 48 * 1024  # above this, dynamic shared memory needs an opt-in


def get_kernel(backend, source: str | pathlib.Path, symbol: str, dyn_smem: int = 0, options: tuple[str, ...] = ()):
    """``symbol`` from ``source``, allowed ``dyn_smem`` bytes of dynamic shared memory (above
    48 KiB that needs an opt-in, refused when the device cannot give it). ``options``: extra NVRTC
    options for this source (an ``-arch=`` one replaces the device's: ``CudaBackend.module``)."""
    path = pathlib.Path(source)
    kernel = (backend.module(path, tuple(options)) if options else backend.module(path)).get_function(symbol)
    if dyn_smem > STATIC_SMEM_LIMIT:
        optin = int(backend.props.get("sharedMemPerBlockOptin", 0))
        if dyn_smem + int(kernel.shared_size_bytes) > optin:
            raise RuntimeError(f"{symbol}: needs {dyn_smem} B dynamic + {kernel.shared_size_bytes} B "
                               f"static shared memory per block; the device allows {optin}")
        kernel.max_dynamic_shared_size_bytes = dyn_smem
    return kernel


def ctas_per_sm(kernel, props: Mapping[str, Any], threads: int, dyn_smem: int) -> int:
    """Resident CTAs per SM, from the kernel's registers and shared memory (the limits the
    occupancy calculator applies; allocation granularity 256 registers per warp)."""
    warps = threads // 32
    regs_per_warp = -(-int(kernel.num_regs) * 32 // 256) * 256
    by_regs = int(props.get("regsPerMultiprocessor", 65536)) // max(1, regs_per_warp * warps)
    smem = int(kernel.shared_size_bytes) + dyn_smem + int(props.get("reservedSharedMemPerBlock", 1024))
    by_smem = int(props.get("sharedMemPerMultiprocessor", 233472)) // smem
    by_threads = int(props.get("maxThreadsPerMultiProcessor", 2048)) // threads
    by_blocks = int(props.get("maxBlocksPerMultiProcessor", 32))
    return max(1, min(by_regs, by_smem, by_threads, by_blocks))


def persistent_grid(backend, kernel, threads: int, dyn_smem: int, tiles: int) -> int:
    """As many CTAs as fit on the device at once, but no more than there are tiles (every CTA
    beyond the tile count would exit at once; launching it costs for nothing)."""
    sms = int(backend.props["multiProcessorCount"])
    return min(sms * ctas_per_sm(kernel, backend.props, threads, dyn_smem), tiles)


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """One kernel of a step: its function, grid, block, dynamic shared memory, and its arguments,
    read from the step's device buffers at every call (a test may rewire a buffer)."""

    fn: Any
    grid: int | tuple[int, ...]   # CTAs, or (x, y[, z])
    threads: int
    smem: int
    args: Callable[[dict], tuple]
    cooperative: bool = False     # every CTA resident at once (the launch fails where they cannot be)


class KernelStep(Launch):
    """One decode step of several kernels over one set of device buffers.

    buffers:   name -> device array, everything the kernels read and write.
    restore:   name -> device array holding the initial value of an in-place buffer (copied back
               by ``poison``).
    poison:    name -> fill value for outputs and intermediates (NaN bits), so nothing a kernel
               skipped can pass.
    read:      ``read(buffers) -> {output: host array}`` (decoding dtypes as the reference has them).
    dependent: every kernel after the first is a programmatic dependent of the one before, and in
               a chain every step after the first too: the kernels must ``griddepcontrol.wait``
               before reading what an earlier launch wrote (without the attribute both PDL
               instructions are no-ops, so a plain launch of such a kernel is correct).
    """

    def __init__(self, backend, kernels: Sequence[KernelCall], buffers: dict, restore: Mapping[str, Any],
                 poison: Mapping[str, Any], read: Callable[[dict], dict], dependent: bool = True):
        self.backend, self.kernels, self.dev = backend, list(kernels), buffers
        self.restore, self.fills, self.read, self.dependent = dict(restore), dict(poison), read, dependent

    @property
    def grid(self) -> int:
        """The last kernel's grid (the timeline tool sizes its probe rows by it)."""
        return self.kernels[-1].grid

    def poison(self) -> None:
        with self.backend.stream:
            for name, value in self.restore.items():
                self.backend.cp.copyto(self.dev[name], value)
            for name, fill in self.fills.items():
                self.dev[name].fill(fill)

    def launch_kernel(self, i: int, programmatic: bool = False) -> None:
        """Kernel i of the step alone, as the step launches it (a probe may put events between)."""
        k = self.kernels[i]
        grid = k.grid if isinstance(k.grid, tuple) else (k.grid,)
        coop = {"cooperative": True} if k.cooperative else {}   # only then: backends without it stay valid
        self.backend.launch(k.fn, grid, (k.threads,), k.args(self.dev), shared_mem=k.smem,
                            programmatic=self.dependent and (programmatic or i > 0), **coop)

    def __call__(self, programmatic: bool = False) -> None:
        for i in range(len(self.kernels)):
            self.launch_kernel(i, programmatic)

    @classmethod
    def run_many(cls, launches: Sequence["KernelStep"]) -> Callable[[], None]:
        def chain() -> None:
            for i, launch in enumerate(launches):
                launch(programmatic=i > 0)
        return chain

    def outputs(self) -> dict[str, np.ndarray]:
        self.backend.stream.synchronize()
        return self.read(self.dev)

    def ready(self) -> "KernelStep":
        """Poisoned and synchronised: what a build returns."""
        self.poison()
        self.backend.stream.synchronize()
        return self
