"""kernels/tma.py on the CPU: the arguments cuTensorMapEncodeTiled gets for a 2-D tensor map, its
documented limits checked before the driver is called, and a failing CUresult as one line."""

from __future__ import annotations

import ctypes

import pytest

from kernels import tma


class FakeEncoder:
    """Records one call as the driver would see it and fills the descriptor with a pattern."""

    def __init__(self, rc: int = 0):
        self.rc, self.call = rc, None

    def __call__(self, desc, dtype, rank, address, dims, strides, box, elem_strides, interleave, swizzle, l2, oob):
        self.call = dict(dtype=dtype, rank=rank, address=address.value, dims=list(dims[:2]), strides=list(strides[:1]),
                         box=list(box[:2]), elem_strides=list(elem_strides[:2]), interleave=interleave,
                         swizzle=swizzle, l2=l2, oob=oob)
        ctypes.memmove(desc, bytes(range(tma.DESCRIPTOR_BYTES)), tma.DESCRIPTOR_BYTES)
        return self.rc


def test_the_sparse_gather_map_is_rows_of_512_two_byte_elements_in_128_byte_swizzled_segments():
    enc = FakeEncoder()
    desc = tma.encode_2d(0x7F0000001000, 8_388_608, 512, 2, 1024, (64, 1), "128B", encode=enc)
    assert desc == bytes(range(128))
    assert enc.call == dict(dtype=tma.DTYPE_UINT16, rank=2, address=0x7F0000001000, dims=[512, 8_388_608],
                            strides=[1024], box=[64, 1], elem_strides=[1, 1], interleave=0, swizzle=3, l2=2, oob=0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(elem_bytes=4), "elem_bytes: 4; allowed: 1, 2"),
    (dict(swizzle="256B"), "swizzle: '256B'; allowed: none, 32B, 64B, 128B"),
    (dict(address=0x1008), "multiples of 16 bytes"),
    (dict(row_stride_bytes=1000), "multiples of 16 bytes"),
    (dict(box=(0, 1)), "each side must be 1..256"),
    (dict(box=(64, 257)), "each side must be 1..256"),
    (dict(box=(128, 1)), r"inner side \(256 B\) must not pass the 128B swizzle"),
])
def test_limits_are_one_line_before_the_driver_is_called(kwargs, match):
    args = dict(address=0x1000, rows=64, row_elems=512, elem_bytes=2, row_stride_bytes=1024, box=(64, 1),
                swizzle="128B")
    args.update(kwargs)
    enc = FakeEncoder()
    with pytest.raises(ValueError, match=match):
        tma.encode_2d(encode=enc, **args)
    assert enc.call is None


def test_a_driver_error_is_one_line_naming_the_map():
    with pytest.raises(RuntimeError, match=r"CUresult 1 for 64 x 512 elements of 2 B, box \(64, 1\), swizzle 128B"):
        tma.encode_2d(0x1000, 64, 512, 2, 1024, (64, 1), "128B", encode=FakeEncoder(rc=1))
