"""The programmatic-dependent-launch path (cuLaunchKernelEx through ctypes), checked without a GPU:
the constants and struct layouts against the local toolkit's cuda.h, and the call it makes against
a recording stand-in for libcuda."""

from __future__ import annotations

import ctypes
import os
import pathlib
import re
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends


def _cuda_h() -> pathlib.Path | None:
    roots = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.insert(0, str(pathlib.Path(nvcc).resolve().parent.parent))
    for root in filter(None, roots):
        header = pathlib.Path(root) / "include" / "cuda.h"
        if header.is_file():
            return header
    return None


def test_launch_constants_and_layouts_match_cuda_h():
    header = _cuda_h()
    if header is None:
        pytest.skip("no CUDA toolkit header (cuda.h) on this machine")
    text = header.read_text(errors="replace")
    m = re.search(r"CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION\s*=\s*(\d+)", text)
    assert m and int(m.group(1)) == backends._CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    config = re.search(r"typedef struct CUlaunchConfig_st \{(.*?)\} CUlaunchConfig;", text, re.S).group(1)
    names = re.findall(r"^\s*[\w\s\*]+?\**\s*(\w+);", config, re.M)
    Attribute, Config = backends.launch_structs()
    assert names == [f[0] for f in Config._fields_]
    attribute = re.search(r"typedef struct CUlaunchAttribute_st \{(.*?)\} CUlaunchAttribute;", text, re.S).group(1)
    assert "char pad[8 - sizeof(CUlaunchAttributeID)]" in attribute
    union = re.search(r"typedef union CUlaunchAttributeValue_union \{(.*?)\} CUlaunchAttributeValue;", text, re.S)
    assert union and "char pad[64]" in union.group(1)
    assert ctypes.sizeof(Attribute) == 8 + 64 and Attribute.value.offset == 8
    assert ctypes.sizeof(Config) == 56 and Config.hStream.offset == 32 and Config.numAttrs.offset == 48


class _RecordingDriver:
    def __init__(self, result: int = 0):
        self.result, self.calls = result, []

    def cuLaunchKernelEx(self, config_ref, function, params, extra):
        config = ctypes.cast(config_ref, ctypes.POINTER(backends.launch_structs()[1])).contents
        attr = config.attrs[0]
        self.calls.append({
            "grid": (config.gridDimX, config.gridDimY, config.gridDimZ),
            "block": (config.blockDimX, config.blockDimY, config.blockDimZ),
            "smem": config.sharedMemBytes, "stream": config.hStream, "attrs": config.numAttrs,
            "attr": (attr.id, attr.value), "function": function.value, "params": params, "extra": extra,
        })
        return self.result

    def cuGetErrorString(self, err, out):
        ctypes.cast(out, ctypes.POINTER(ctypes.c_char_p))[0] = b"invalid argument"
        return 0


class _Array:
    """Stands in for a CuPy array: only ``.data.ptr`` is read."""

    def __init__(self, ptr: int):
        self.data = SimpleNamespace(ptr=ptr)


def test_programmatic_launch_passes_config_function_and_arguments(monkeypatch):
    driver = _RecordingDriver()
    monkeypatch.setattr(backends, "_libcuda", lambda: driver)
    kernel = SimpleNamespace(kernel=SimpleNamespace(ptr=0xF00D))  # CuPy RawKernel -> Function
    args = (_Array(0x1000), np.int32(-7), np.float32(0.25), np.uint64(1 << 40))
    backends._launch_programmatic(kernel, (396,), (128,), args, 70144, 0xABC)
    (call,) = driver.calls
    assert call["grid"] == (396, 1, 1) and call["block"] == (128, 1, 1) and call["smem"] == 70144
    assert call["stream"] == 0xABC and call["function"] == 0xF00D and call["extra"] is None
    assert call["attrs"] == 1 and call["attr"] == (backends._CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)
    p = call["params"]
    assert ctypes.cast(p[0], ctypes.POINTER(ctypes.c_void_p))[0] == 0x1000
    assert ctypes.cast(p[1], ctypes.POINTER(ctypes.c_int32))[0] == -7
    assert ctypes.cast(p[2], ctypes.POINTER(ctypes.c_float))[0] == 0.25
    assert ctypes.cast(p[3], ctypes.POINTER(ctypes.c_uint64))[0] == 1 << 40


def test_programmatic_launch_failure_and_ambiguous_argument_are_errors(monkeypatch):
    monkeypatch.setattr(backends, "_libcuda", lambda: _RecordingDriver(result=1))
    kernel = SimpleNamespace(ptr=0x1)  # a bare Function works too
    with pytest.raises(RuntimeError, match="failed: 1 b'invalid argument'"):
        backends._launch_programmatic(kernel, (1,), (32,), (np.int32(1),), 0, 0)
    with pytest.raises(TypeError, match="NumPy scalar"):
        backends._launch_programmatic(kernel, (1,), (32,), (5,), 0, 0)


def test_a_cooperative_kernel_call_launches_cooperatively():
    """KernelCall(cooperative=True) reaches the RawKernel's Function with enable_cooperative_groups
    (CuPy's RawKernel refuses that keyword per call: it fixes it at construction); a plain call goes
    to the RawKernel without it; both kinds of launch together are refused in one line."""
    from harness.cuda import KernelCall, KernelStep

    calls = []

    class Function:          # cupy.cuda.function.Function: takes the flag per call
        def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
            calls.append(("function", grid, enable_cooperative_groups))

    class RawKernel:         # cupy.RawKernel: no such keyword per call (raw.pyx passes its own)
        kernel = Function()

        def __call__(self, grid, block, args, shared_mem=0, stream=None):
            calls.append(("raw", grid, False))

    cuda = object.__new__(backends.CudaBackend)
    cuda.stream = None
    kernel = RawKernel()
    step = KernelStep(cuda, [KernelCall(kernel, (4, 32), 256, 0, lambda b: ()),
                             KernelCall(kernel, 8, 128, 0, lambda b: (), cooperative=True)],
                      {}, {}, {}, lambda b: {}, dependent=False)
    step()
    assert calls == [("raw", (4, 32), False), ("function", (8,), True)]
    with pytest.raises(ValueError, match="programmatic and cooperative together"):
        backends.CudaBackend.launch(cuda, kernel, (1,), (32,), (), 0, True, cooperative=True)
