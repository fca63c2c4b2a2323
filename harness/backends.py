"""Backends: where a variant runs.

``cuda``: CuPy on the first visible GPU. Kernels are compiled from the component's ``.cu`` files by
NVRTC through ``cupy.RawModule`` for whatever GPU is present (``sm_90`` on the H200), cached per
(source, options); a kernel that names its own ``-arch=`` (sm_90a for wgmma) is compiled by NVRTC
directly with that one arch and loaded as a cubin. Every launch goes on ``backend.stream``; timing
records its events there.

``cpu``: the float64 references at small sizes, timed with the host clock. Every figure a CPU
backend produces carries ``backend=cpu`` and is labelled "CPU reference backend" in reports.

``auto`` picks ``cuda`` when CuPy sees a GPU, else ``cpu``.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any, Callable

import numpy as np

BACKENDS = ("auto", "cuda", "cpu")


def gpu_visible() -> bool:
    """True when CuPy imports and the CUDA driver reports at least one device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device: all mean "no GPU here"
        return False


def resolve(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"backend.name: unknown value {name!r}; allowed: {', '.join(BACKENDS)}")
    if name == "auto":
        return "cuda" if gpu_visible() else "cpu"
    return name


class CpuBackend:
    """Host execution of the float64 references; timed with ``time.perf_counter``."""

    name = "cpu"
    label = "CPU reference backend"
    xp = np
    stream = None
    device_id = 0

    def synchronize(self) -> None:
        pass

    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True)

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def l2_bytes(self) -> int:
        return 0


class CudaBackend:
    """CuPy on one GPU, one non-blocking stream for every launch and every timing event."""

    name = "cuda"
    label = "CUDA (CuPy)"

    def __init__(self, device: int = 0):
        import cupy

        self.cp = cupy
        self.xp = cupy
        self.device_id = device
        self.device = cupy.cuda.Device(device)
        self.device.use()
        self.props = cupy.cuda.runtime.getDeviceProperties(device)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._modules: dict[tuple, Any] = {}

    # -- memory ----------------------------------------------------------------------------
    def synchronize(self) -> None:
        self.stream.synchronize()

    def to_device(self, array: np.ndarray):
        with self.stream:
            out = self.cp.asarray(np.ascontiguousarray(array))
        self.stream.synchronize()
        return out

    def to_host(self, array: Any) -> np.ndarray:
        self.stream.synchronize()
        return self.cp.asnumpy(array)

    def l2_bytes(self) -> int:
        return int(self.props["l2CacheSize"])

    def arch(self) -> str:
        return f"sm_{self.props['major']}{self.props['minor']}"

    # -- kernels ---------------------------------------------------------------------------
    def module(self, source: pathlib.Path, options: tuple[str, ...] = ()):
        """Compile ``source`` with NVRTC for this device, with its folder on the include path
        (cached by the content of every file it compiles, and the options)."""
        from harness.sources import sources_sha

        source = pathlib.Path(source)
        code = source.read_text()
        sha = sources_sha([source], length=64)
        key = (sha, tuple(options))
        if key not in self._modules:
            # CuPy's on-disk kernel cache keys on the code string and the options only, not on
            # the headers NVRTC reads: the hash of every compiled file, as a macro, is in the key.
            # An ``-arch=`` among the options (a kernel that needs an arch-specific target such as
            # sm_90a's wgmma) replaces the device's; the other options are appended.
            override = [o for o in options if o.startswith("-arch=")]
            arch = override[-1] if override else f"-arch={self.arch()}"
            opts = ("-std=c++17", "--use_fast_math", arch, f"-I{source.resolve().parent}",
                    f"-DATTNBENCH_SOURCES_SHA={sha[:16]}", *(o for o in options if not o.startswith("-arch=")))
            if override:
                # CuPy's RawModule appends its own -arch=sm_<device> after the options (cupy 14,
                # cupy/cuda/compiler.py), so an arch-specific target is compiled here with NVRTC
                # directly, with exactly that one arch flag, and the cubin loaded by path.
                self._modules[key] = self._nvrtc_cubin_module(code, source, opts, sha)
            else:
                self._modules[key] = self.cp.RawModule(code=code, options=opts, backend="nvrtc")
        return self._modules[key]

    def _nvrtc_cubin_module(self, code: str, source: pathlib.Path, opts: tuple[str, ...], sha: str):
        """``code`` compiled by NVRTC with exactly ``opts`` into a cubin (kept under the system temp
        folder, named by the sources' hash and the options), loaded as a ``cupy.RawModule``."""
        import hashlib
        import tempfile

        from cupy_backends.cuda.libs import nvrtc

        folder = pathlib.Path(tempfile.gettempdir()) / "attnbench-cubins"
        folder.mkdir(exist_ok=True)
        path = folder / f"{source.stem}-{hashlib.sha256((sha + repr(opts)).encode()).hexdigest()[:32]}.cubin"
        if not path.is_file():
            prog = nvrtc.createProgram(code, source.name, (), ())
            try:
                try:
                    # the one option CuPy's own NVRTC path adds for NVRTC >= 12 (sm_90a needs 12+),
                    # so a source compiles here exactly as it would through RawModule
                    nvrtc.compileProgram(prog, [*opts, "--device-as-default-execution-space"])
                except nvrtc.NVRTCError as exc:
                    raise RuntimeError(f"NVRTC failed on {source.name} with {' '.join(opts)}:\n"
                                       f"{nvrtc.getProgramLog(prog)}") from exc
                cubin = nvrtc.getCUBIN(prog)
            finally:
                nvrtc.destroyProgram(prog)
            tmp = path.with_suffix(f".{id(self)}.tmp")
            tmp.write_bytes(cubin)
            tmp.replace(path)   # atomic: a concurrent reader never sees half a file
        return self.cp.RawModule(path=str(path))

    def launch(self, kernel, grid: tuple[int, ...], block: tuple[int, ...], args: tuple,
               shared_mem: int = 0, programmatic: bool = False, cooperative: bool = False) -> None:
        """Enqueue ``kernel`` on this stream. ``programmatic``: as a programmatic dependent of the
        kernel before it (sm_90 PDL): it may launch once every CTA of that kernel has executed
        griddepcontrol.launch_dependents, and must griddepcontrol.wait before reading its outputs.
        CuPy has no launch attributes, so that path calls cuLaunchKernelEx itself. ``cooperative``:
        a cooperative launch (every CTA resident at once, or an error), for kernels whose CTAs wait
        on each other; not with ``programmatic``."""
        if programmatic and cooperative:
            raise ValueError("launch: programmatic and cooperative together; allowed: one of the two")
        if programmatic:
            _launch_programmatic(kernel, grid, block, args, shared_mem, self.stream.ptr)
        elif cooperative:
            # a RawKernel fixes its cooperative flag when it is made and refuses it per call; its
            # Function (.kernel, which carries the shared-memory attribute set on the RawKernel) takes it
            getattr(kernel, "kernel", kernel)(grid, block, args, shared_mem=shared_mem, stream=self.stream,
                                              enable_cooperative_groups=True)
        else:
            kernel(grid, block, args, shared_mem=shared_mem, stream=self.stream)

    def capture(self, step: Callable[[], None]) -> Callable[[], None]:
        """Capture one ``step`` on this stream into a CUDA graph; return its replay."""
        self.stream.synchronize()
        self.stream.begin_capture()
        try:
            step()
        except BaseException:
            try:  # end the capture, but report what broke it, not what ending it says
                self.stream.end_capture()
            except Exception:
                pass
            raise
        graph = self.stream.end_capture()
        graph.upload(self.stream)
        return functools.partial(graph.launch, self.stream)


# -- programmatic dependent launch through the driver API (ctypes; layouts from cuda.h, CUDA 12+) --
# CUlaunchAttributeID in cuda.h; 3 is CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, a stream attribute
# that cuLaunchKernelEx refuses as an invalid argument (the H200 run at d93f24f).
# tests/test_backends checks this against the cuda.h of the local toolkit.
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


@functools.lru_cache(maxsize=None)
def launch_structs():
    """ctypes mirrors of cuda.h's CUlaunchAttribute and CUlaunchConfig (checked by the tests)."""
    import ctypes

    class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, 64-byte value union
        _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                    ("value_rest", ctypes.c_char * 60)]

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                    ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                    ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]

    return LaunchAttribute, LaunchConfig


@functools.lru_cache(maxsize=None)
def _libcuda():
    import ctypes

    LaunchAttribute, LaunchConfig = launch_structs()
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def _kernel_arg(ctypes, value):
    """One kernel argument as the ctypes value its parameter expects (device arrays by pointer,
    NumPy scalars by their own width); a bare Python number is refused: its width is ambiguous."""
    if hasattr(value, "data") and hasattr(value.data, "ptr"):  # a CuPy array
        return ctypes.c_void_p(value.data.ptr)
    kinds = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
             np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
             np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}
    kind = kinds.get(getattr(value, "dtype", None))
    if kind is None:
        raise TypeError(f"programmatic launch: argument {value!r} must be a CuPy array or a NumPy "
                        f"scalar of {', '.join(sorted(d.name for d in kinds))}")
    return kind(value.item())


def _launch_programmatic(kernel, grid, block, args, shared_mem: int, stream_ptr: int) -> None:
    import ctypes

    LaunchAttribute, LaunchConfig = launch_structs()
    lib = _libcuda()
    grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    attr = LaunchAttribute(id=_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    config = LaunchConfig(*grid, *block, shared_mem, ctypes.c_void_p(stream_ptr), ctypes.pointer(attr), 1)
    values = [_kernel_arg(ctypes, a) for a in args]
    params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    function = getattr(kernel, "kernel", kernel)  # a CuPy RawKernel holds its loaded Function (.ptr)
    err = lib.cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function.ptr), params, None)
    if err:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(err, ctypes.byref(msg))
        raise RuntimeError(f"cuLaunchKernelEx (programmatic) failed: {err} {msg.value!r}")


@functools.lru_cache(maxsize=None)
def _cuda_backend(device: int) -> CudaBackend:
    return CudaBackend(device)


def get(name: str, device: int = 0):
    """The backend object for ``name`` (``auto`` resolved); one CUDA backend per device."""
    resolved = resolve(name)
    if resolved == "cuda":
        if not gpu_visible():
            raise RuntimeError("backend.name: 'cuda' requested but no GPU is visible; use backend=cpu")
        return _cuda_backend(device)
    return CpuBackend()
