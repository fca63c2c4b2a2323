"""The FP8 latent format (kernels/fp8.py) against torch's own float8_e4m3fn, an
independent implementation: every code's value, the rounding of random, tied, tiny, huge and NaN
inputs, and the per-token scaled round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernels import fp8


def _torch_encode(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x.astype(np.float32)).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def test_every_code_decodes_as_torch_does():
    codes = np.arange(256, dtype=np.uint8)
    ours = fp8.decode_e4m3(codes)
    theirs = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(np.isnan(ours), np.isnan(theirs)) and np.isnan(ours).sum() == 2
    ok = ~np.isnan(ours)
    assert np.array_equal(ours[ok], theirs[ok]) and np.array_equal(np.signbit(ours[ok]), np.signbit(theirs[ok]))
    assert ours[126] == fp8.E4M3_MAX == 448.0


def test_encoding_rounds_as_torch_does():
    rng = np.random.default_rng(0)
    values = fp8.TABLE[~np.isnan(fp8.TABLE)]
    mids = (np.sort(values)[1:] + np.sort(values)[:-1]) / 2                   # exact ties
    x = np.concatenate([rng.standard_normal(20000) * 50, rng.standard_normal(2000) * 1e-3, mids,
                        values, [0.0, -0.0, 447.9, 448.0, 464.0, 500.0, -1e6, 1e-12, -1e-12]])
    x = x.astype(np.float32).astype(np.float64)  # what torch sees
    ours, theirs = fp8.encode_e4m3(x), _torch_encode(x)
    bad = np.nonzero(ours != theirs)[0]
    assert len(bad) == 0, [(x[i], ours[i], theirs[i]) for i in bad[:5]]
    assert fp8.encode_e4m3(np.array([np.nan]))[0] == fp8.E4M3_NAN


def test_scaled_round_trip_keeps_each_rows_peak_and_three_mantissa_bits():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((64, 512)) * rng.uniform(0.01, 10, (64, 1))
    rows[5] = 0.0
    codes, scale = fp8.quantize_rows(rows)
    back = fp8.dequantize_rows(codes, scale).astype(np.float64)
    assert codes.dtype == np.uint8 and scale.dtype == np.float32 and scale[5] == 1 and (back[5] == 0).all()
    peaks = np.abs(rows).argmax(axis=1)
    got = np.abs(back[np.arange(64), peaks])
    assert np.allclose(got, np.abs(rows).max(axis=1), rtol=1e-6), "a row's peak encodes as 448 x scale"
    # Normal-range e4m3 keeps 3 mantissa bits: relative error at most 2^-4 (half an ulp of 2^-3);
    # below 2^-6 x scale the subnormal step 2^-9 x scale bounds the absolute error instead.
    s = scale.astype(np.float64)[:, None]
    normal = np.abs(rows) >= 2.0 ** -6 * s
    assert (np.abs(back - rows)[normal] <= 2.0 ** -4 * np.abs(rows)[normal] + 1e-12).all()
    assert (np.abs(back - rows)[~normal] <= 2.0 ** -10 * s.repeat(512, 1)[~normal] + 1e-12).all()
    assert fp8.bytes_per_token(512) == 516
