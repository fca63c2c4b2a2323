"""A 2-D TMA tensor map (CUtensorMap) for a kernel's bulk tensor copies, encoded by the CUDA driver.

The bulk-copy engine reads a tensor through a 128-byte descriptor that only the driver's
``cuTensorMapEncodeTiled`` writes; CuPy does not wrap it, so it is called through ctypes from
``libcuda.so.1`` (the driver every CUDA process has loaded). The descriptor is copied to device
memory (64-byte aligned) and the kernel takes its generic address (``cp.async.bulk.tensor``
accepts a tensor map in .global space). The encoder is a parameter so the argument building and
the error line are tested on the CPU; nothing here imports cupy.
"""

from __future__ import annotations

import ctypes
from typing import Callable

# CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
# CUtensorMapFloatOOBfill (cuda.h): the values this project uses.
DTYPE_UINT8, DTYPE_UINT16 = 0, 1
INTERLEAVE_NONE = 0
SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
L2_PROMOTION_128B = 2
OOB_FILL_NONE = 0
DESCRIPTOR_BYTES = 128

_ENCODE_ARGTYPES = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                    ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                    ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]


def driver_encoder() -> Callable:
    """libcuda's cuTensorMapEncodeTiled, typed."""
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = _ENCODE_ARGTYPES
    return fn


def encode_2d(address: int, rows: int, row_elems: int, elem_bytes: int, row_stride_bytes: int,
              box: tuple[int, int], swizzle: str = "none", encode: Callable | None = None) -> bytes:
    """The 128-byte descriptor of a [rows][row_elems] tensor of ``elem_bytes``-byte elements at
    ``address`` (rows ``row_stride_bytes`` apart), copied in boxes of ``box`` = (elements, rows).
    Checks the encoder's documented limits first, in one line each; a non-zero CUresult is one
    line too."""
    if elem_bytes not in (1, 2):
        raise ValueError(f"tma: elem_bytes: {elem_bytes}; allowed: 1, 2")
    if swizzle not in SWIZZLE:
        raise ValueError(f"tma: swizzle: {swizzle!r}; allowed: {', '.join(SWIZZLE)}")
    if address % 16 or row_stride_bytes % 16:
        raise ValueError(f"tma: the address ({address:#x}) and the row stride ({row_stride_bytes}) must be "
                         "multiples of 16 bytes")
    e, r = box
    if not (1 <= e <= 256 and 1 <= r <= 256):
        raise ValueError(f"tma: box {box}: each side must be 1..256")
    if swizzle != "none" and e * elem_bytes > int(swizzle[:-1]):
        raise ValueError(f"tma: box {box}: its inner side ({e * elem_bytes} B) must not pass the {swizzle} swizzle")
    encode = encode or driver_encoder()
    desc = (ctypes.c_uint64 * (DESCRIPTOR_BYTES // 8))()
    dims = (ctypes.c_uint64 * 2)(row_elems, rows)
    strides = (ctypes.c_uint64 * 1)(row_stride_bytes)
    boxdim = (ctypes.c_uint32 * 2)(e, r)
    elem_strides = (ctypes.c_uint32 * 2)(1, 1)
    rc = encode(ctypes.addressof(desc), DTYPE_UINT16 if elem_bytes == 2 else DTYPE_UINT8, 2, ctypes.c_void_p(address),
                dims, strides, boxdim, elem_strides, INTERLEAVE_NONE, SWIZZLE[swizzle], L2_PROMOTION_128B,
                OOB_FILL_NONE)
    if rc != 0:
        raise RuntimeError(f"tma: cuTensorMapEncodeTiled returned CUresult {rc} for {rows} x {row_elems} "
                           f"elements of {elem_bytes} B, box {box}, swizzle {swizzle}")
    return bytes(desc)
