"""FP8 rows (beyond the seeds): e4m3 codes with one FP32 scale per row, shared by the DSA families:
the sparse MLA latent (512 + 4 = 516 bytes a token instead of 1024 in BF16) and the indexer keys
(128 + 4 = 132 bytes a key instead of 256).

e4m3 (the OCP FP8 "e4m3fn" format, torch.float8_e4m3fn): 1 sign bit, 4 exponent bits (bias 7),
3 mantissa bits; exponent 0 is subnormal (m / 8 x 2^-6); exponent 15 with mantissa 7 is NaN; there
is no infinity; the largest finite value is 448. Encoding rounds to nearest, ties to the even
code, and saturates to +-448 (what a kernel's ``cvt.rn.satfinite.e4m3x2.f32`` does).

A row's scale is max|row| / 448, so its largest element encodes as exactly +-448 and nothing
saturates; an all-zero row gets scale 1. The reference and the kernels both see
``dequantize_rows(codes, scale)``: an FP8 variant is checked against the float64 reference over the
dequantized rows, not over the BF16 ones.
"""

from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0
E4M3_NAN = 0x7F


def _table() -> np.ndarray:
    """The value of every code 0..255 (float64; NaN for the two NaN codes)."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp, man = (codes >> 3) & 0xF, codes & 0x7
    value = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    value = sign * value
    value[(exp == 15) & (man == 7)] = np.nan
    return value


TABLE = _table()
_POSITIVE = TABLE[:127]          # codes 0..126: 0, the subnormals, the normals up to 448, increasing


def decode_e4m3(codes: np.ndarray) -> np.ndarray:
    """e4m3 codes (uint8) -> float32."""
    return TABLE[np.asarray(codes, dtype=np.uint8)].astype(np.float32)


def encode_e4m3(x: np.ndarray) -> np.ndarray:
    """float -> e4m3 codes (uint8): round to nearest, ties to the even code, saturating at +-448;
    NaN -> 0x7F."""
    x = np.asarray(x, dtype=np.float64)
    mag = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.clip(np.searchsorted(_POSITIVE, mag, side="left"), 0, 126)   # first value >= mag
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - _POSITIVE[lo], _POSITIVE[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code)  # -0 and negatives that round to 0 keep the sign
    return np.where(np.isnan(x), np.uint8(E4M3_NAN), code).astype(np.uint8)


def quantize_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n, D] float -> (codes uint8 [n, D], scale float32 [n]) with scale = max|row| / 448."""
    rows = np.asarray(rows, dtype=np.float64)
    peak = np.abs(rows).max(axis=-1) if rows.size else np.zeros(rows.shape[:-1])
    scale = np.where(peak > 0, peak / E4M3_MAX, 1.0).astype(np.float32)
    return encode_e4m3(rows / scale.astype(np.float64)[..., None]), scale


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(codes [n, D], scale [n]) -> float32 [n, D]: what the FP8 kernels attend over."""
    return decode_e4m3(codes) * np.asarray(scale, dtype=np.float32)[..., None]


def bytes_per_token(dim: int) -> int:
    """One code a channel and one FP32 scale a token."""
    return dim + 4
