"""The lightning indexer scan as a component (seed 003 §5.2, §8.5; seed 001 index_scores), and its
stream-only floor: axes, the resident keys, inputs, the float64 reference over a sample of
streams, bytes, FLOPs, checks.

Per stream m (one query token; the sparse MLA convention: n_m = context - (m % kpool) tokens
visible, the query at t_m = n_m - 1, so the streams' tails cover 0..kpool-1 tokens):

    q[m]        [H = 32, D = 128] BF16           the index queries (query_dtype bf16: input ``q``)
                or e4m3 codes + one FP32 scale a head   (query_dtype fp8: inputs ``q_codes`` [M, H, D] uint8,
                                                  ``q_scales`` [M, H]; q[m, j] = codes x q_scales[m, j], > 0)
    w[m]        [H] FP32                          head weights, N(0, 1) x head_weight_scale (1/64), signed
    keys of m   C candidates x D                  C = dsa_axes.candidates(context, pooling): context / kpool
                                                  pooled keys or context per-token keys; every stream its own
    eligible_m  pooled: complete_pools(t_m, kpool) = n_m // kpool; per token: n_m
    I[m, c]     = sum_j w[m, j] relu(q[m, j] . key[m, c])   for c < eligible_m, else -inf
    scores      [M, C] FP32

Key layouts (axis ``key_layout``), resident on the device:

    cand_dim    [M][C][D]     a key's 256 bytes (BF16) / 128 codes (FP8) contiguous
    dim_cand    [M][D][Cpad]  one row per dim, Cpad = C rounded up to a multiple of 64, so every dim
                              row starts 128-byte aligned (BF16: 64 candidates = one 128-byte line; FP8:
                              64 B) and a kernel's 16-byte loads of 8 (BF16) or 16 (FP8) candidates never
                              straddle two rows; the pad columns are zeros, never scored.

Key dtypes (axis ``key_dtype``): bf16 (raw uint16 bits); fp8 (kernels/fp8.py): e4m3 codes (uint8,
the same layout) and one FP32 scale per key ([M][C], resident ``key_scales``; empty for bf16);
a key is codes x scale, and every scale is > 0 (so relu(s x) = s relu(x): a kernel may apply it
after the head sum).

Query dtypes (axis ``query_dtype``): bf16, or fp8 as serving engines quantize the index query
before their FP8 index kernel (DeepSeek-V3.2-Exp inference/model.py: ``q_fp8, q_scale =
act_quant(q, block_size)`` with block_size = the head dim 128, then ``weights * q_scale`` folded
into the head weights, and kernel.py's ``fp8_index``): q[m, j, :] quantized per (stream, head) with
fp8.quantize_rows on the host in make_inputs, so the float64 reference and every variant at a
point see the same quantized q. An e4m3 code times an FP32 scale is in general not a BF16 value,
so a variant that reads BF16 q cannot take it: those refuse fp8 queries (``supports``).

The stream-only floor (component ``indexer_stream``) reads exactly the eligible keys (same layout,
same dtype) and writes one uint32 per candidate: ``checksum[m, c]`` = the XOR of the key's 32-bit
words in the cand_dim packing (BF16: the low half is the XOR of the even dims, the high half of the
odd dims; FP8: byte b is the XOR of the codes of the dims d with d % 4 == b), XOR the bits of the
key's FP32 scale for fp8; 0 for an ineligible candidate. It is the same number in either layout.
"""

from __future__ import annotations

import numpy as np

from harness.axes import Axis
from harness.registry import ResidentInput
from harness.verify import Exact, RelErr
from kernels import dsa_axes, fp8
from kernels.axes import M
from kernels.dsa_indexer import reference as dsa_ref
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16

KEY_LAYOUTS = ("cand_dim", "dim_cand")
KEY_LAYOUT = Axis("key_layout", str, "cand_dim",
                  "indexer keys in memory: [stream][candidate][dim] (a key contiguous) or "
                  "[stream][dim][candidate padded to 64] (seed 000: a 4.4x bank-conflict effect between them)",
                  choices=KEY_LAYOUTS)
QUERY_DTYPES = ("bf16", "fp8")
QUERY_DTYPE = Axis("query_dtype", str, "bf16",
                   "dtype of the index queries: BF16, or e4m3 codes with one FP32 scale per (stream, head) "
                   "(what serving engines feed their FP8 index kernel)",
                   choices=QUERY_DTYPES)
AXES = (M, dsa_axes.CONTEXT, dsa_axes.POOLING, dsa_axes.KEY_DTYPE, KEY_LAYOUT, QUERY_DTYPE)

CAND_PAD = 64                 # dim_cand: candidates per row rounded up to this (module doc)
BUILD_ROWS = 1 << 18          # keys generated per chunk on the device (32 Mi values, 128 MiB of FP32)
REFERENCE_STREAMS = 4         # the float64 reference's sample when M is larger
MAX_KEY_BYTES = 64 << 30      # resident keys above this are refused (check_point), never an OOM
# The keys are a resident input, shared by every L2-rotation set, so rotating sets cannot evict
# them: the footprint declared below is at least this (above half of the H200's 60 MiB L2), so
# the timing always flushes the L2 between samples instead.
FLUSH_FOOTPRINT = 128 << 20


def dims(geometry) -> tuple[int, int]:
    return int(geometry.indexer.heads), int(geometry.indexer.head_dim)


def query_dtype(point) -> str:
    """The point's query dtype; bf16 where the point has no such axis (dsa_layer's part points)."""
    return point.get("query_dtype", QUERY_DTYPE.default)


def n_candidates(geometry, point) -> int:
    return dsa_axes.candidates(geometry, int(point["context"]), point["pooling"])


def padded_candidates(geometry, point) -> int:
    """Candidates a dim_cand row holds (C rounded up to CAND_PAD); C itself for cand_dim."""
    C = n_candidates(geometry, point)
    return -(-C // CAND_PAD) * CAND_PAD if point["key_layout"] == "dim_cand" else C


def visible(geometry, point, m: int) -> int:
    return int(point["context"]) - (m % int(geometry.indexer.kpool))


def eligible(geometry, point) -> np.ndarray:
    """Eligible candidates of every stream ([M] int32): complete pools (pooled) or every visible
    token (per token)."""
    kpool = int(geometry.indexer.kpool)
    out = []
    for m in range(int(point["M"])):
        n = visible(geometry, point, m)
        out.append(dsa_ref.complete_pools(n - 1, kpool) if point["pooling"] == "pooled" else n)
    return np.asarray(out, dtype=np.int32)


def key_bytes(geometry, point) -> int:
    """Bytes of one key: 2 a dim (BF16), or one code a dim plus its FP32 scale (FP8)."""
    _, D = dims(geometry)
    return fp8.bytes_per_token(D) if point["key_dtype"] == "fp8" else 2 * D


def keys_nbytes(geometry, point) -> int:
    _, D = dims(geometry)
    per = 1 if point["key_dtype"] == "fp8" else 2
    return int(point["M"]) * D * padded_candidates(geometry, point) * per


def scales_nbytes(geometry, point) -> int:
    return int(point["M"]) * n_candidates(geometry, point) * 4 if point["key_dtype"] == "fp8" else 0


def check_point(geometry, point) -> str | None:
    problem = dsa_axes.check_point(geometry, point)
    if problem:
        return problem
    if point["context"] < int(geometry.indexer.kpool):
        return f"context: {point['context']} leaves no complete pool; allowed: context >= {geometry.indexer.kpool}"
    total = keys_nbytes(geometry, point) + scales_nbytes(geometry, point)
    if total > MAX_KEY_BYTES:
        return (f"M: {point['M']} streams x context {point['context']} make {total / 2**30:.1f} GiB of resident "
                f"keys; allowed: at most {MAX_KEY_BYTES >> 30} GiB (fewer streams or a shorter context)")
    if int(point["M"]) * padded_candidates(geometry, point) >= 2 ** 31:
        return f"M: {point['M']} x context {point['context']} make 2^31 or more scores; allowed: fewer"
    return None


# -- inputs ----------------------------------------------------------------------------------------


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """q N(0, 1): in BF16 (``q``), or for query_dtype fp8 quantized per (stream, head) row with
    fp8.quantize_rows (``q_codes`` [M, H, D] uint8, ``q_scales`` [M, H] FP32, every scale > 0; no
    ``q``, so nothing can read an unquantized query by mistake); w N(0, 1) x head_weight_scale in
    FP32 (signed, as weights_proj gives); eligible, the per-stream counts every kernel is given
    (declared once, here). Never zeros."""
    Mn, (H, D) = int(point["M"]), dims(geometry)
    scale = float(geometry.indexer.head_weight_scale)
    draw = rng.standard_normal((Mn, H, D))
    if query_dtype(point) == "fp8":
        codes, q_scales = fp8.quantize_rows(draw.reshape(Mn * H, D))
        q = {"q_codes": codes.reshape(Mn, H, D), "q_scales": q_scales.reshape(Mn, H)}
    else:
        q = {"q": float_to_bf16(draw)}
    return {
        **q,
        "w": (rng.standard_normal((Mn, H)) * scale).astype(np.float32),
        "eligible": eligible(geometry, point),
    }


def query_values(point, inputs, m: int) -> np.ndarray:
    """[H, D] float32 values of stream m's queries: BF16 bits widened, or e4m3 codes x their
    head's scale (fp8.dequantize_rows: FP32 products, as for the keys)."""
    if query_dtype(point) == "fp8":
        return fp8.dequantize_rows(inputs["q_codes"][m], inputs["q_scales"][m])
    return bf16_to_float(inputs["q"][m])


def _bf16_bits(xp, values):
    """float32 -> BF16 bits, round to nearest even (a normal draw has no NaN to keep)."""
    bits = values.view(xp.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(xp.uint16)


def _e4m3_codes(xp, y):
    """float32 with |y| <= 448 -> e4m3 codes, rounding toward zero and flushing what would be
    subnormal (|y| < 2^-6) to a signed zero: any rounding will do, the reference decodes the codes
    themselves (fp8.decode_e4m3), and |y| <= 448 never reaches the NaN code 0x7F."""
    bits = xp.clip(y, -fp8.E4M3_MAX, fp8.E4M3_MAX).astype(xp.float32).view(xp.uint32)
    sign = ((bits >> 24) & 0x80).astype(xp.uint8)
    exp = ((bits >> 23) & 0xFF).astype(xp.int32) - 120          # e4m3's biased exponent (bias 7)
    mant = ((bits >> 20) & 0x7).astype(xp.int32)
    code = xp.where(exp >= 1, (exp << 3) | mant, 0).astype(xp.uint8)
    return code | sign


def build_keys(geometry, point, backend, seed: int):
    """The keys on the backend's device in the point's layout and dtype, generated there in chunks
    of one stream's candidates (no host copy, no FP32 copy of the whole set): BF16: N(0, 1)
    rounded to BF16; FP8: each row of a normal draw scaled to a peak of 448 and encoded (the
    key's magnitude lives in its scale, ``build_scales``). dim_cand pad columns are zeros."""
    xp = backend.xp
    Mn, (_, D) = int(point["M"]), dims(geometry)
    C, Cp = n_candidates(geometry, point), padded_candidates(geometry, point)
    is_fp8, by_dim = point["key_dtype"] == "fp8", point["key_layout"] == "dim_cand"
    dtype = xp.uint8 if is_fp8 else xp.uint16
    keys = xp.empty((Mn, D, Cp) if by_dim else (Mn, Cp, D), dtype=dtype)
    if by_dim and Cp > C:
        keys[:, :, C:] = 0
    rng = xp.random.default_rng(seed)
    for m in range(Mn):
        for start in range(0, C, BUILD_ROWS):
            stop = min(C, start + BUILD_ROWS)
            chunk = rng.standard_normal((stop - start, D), dtype=xp.float32)
            if is_fp8:
                mag = xp.abs(chunk)
                peak = mag.max(axis=1, keepdims=True)
                # the peak itself exactly +-448 (the FP32 product may land a hair below it)
                y = xp.where(mag == peak, xp.copysign(xp.float32(fp8.E4M3_MAX), chunk), chunk * (fp8.E4M3_MAX / peak))
                block = _e4m3_codes(xp, y)
            else:
                block = _bf16_bits(xp, chunk)
            if by_dim:
                keys[m, :, start:stop] = block.T
            else:
                keys[m, start:stop] = block
    return keys


def build_scales(geometry, point, backend, seed: int):
    """FP8 keys' scales [M, C] FP32: 3 / 448 x 2^u, u uniform in [-1/2, 1/2) (keys of about unit
    size from codes peaking at 448; every scale > 0). BF16: an empty array."""
    xp = backend.xp
    if point["key_dtype"] != "fp8":
        return xp.zeros(0, dtype=xp.float32)
    rng = xp.random.default_rng(seed)
    shape = (int(point["M"]), n_candidates(geometry, point))
    u = rng.random(shape, dtype=xp.float32) - 0.5
    return ((3.0 / fp8.E4M3_MAX) * xp.exp2(u)).astype(xp.float32)


KEYS = ResidentInput("keys", build_keys, keys_nbytes)
KEY_SCALES = ResidentInput("key_scales", build_scales, scales_nbytes)
RESIDENT = (KEYS, KEY_SCALES)


def stream_keys(geometry, point, inputs, m: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Stream m's raw keys read back from the device as [C, D] (uint16 BF16 bits or uint8 codes,
    whatever the layout) and its scales [C] (None for BF16)."""
    C = n_candidates(geometry, point)
    raw = inputs.resident_rows("keys", slice(m, m + 1))[0]
    raw = np.ascontiguousarray(raw[:, :C].T) if point["key_layout"] == "dim_cand" else raw
    scales = inputs.resident_rows("key_scales", slice(m, m + 1))[0] if point["key_dtype"] == "fp8" else None
    return raw, scales


def key_values(raw: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """[C, D] float32 values of the keys: BF16 bits widened, or FP8 codes x scale (fp8.dequantize_rows)."""
    return bf16_to_float(raw) if scales is None else fp8.dequantize_rows(raw, scales)


def key_checksums(raw: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """[C] uint32: XOR of each key's 32-bit words in the cand_dim packing, XOR its scale's bits."""
    words = np.ascontiguousarray(raw).view(np.uint32)             # [C, D * itemsize / 4]
    xor = np.bitwise_xor.reduce(words, axis=1)
    if scales is not None:
        xor = xor ^ np.ascontiguousarray(scales, dtype=np.float32).view(np.uint32)
    return xor.astype(np.uint32)


def reference_streams(geometry, point):
    Mn = int(point["M"])
    if Mn <= REFERENCE_STREAMS:
        return None
    return sorted({0, Mn // 3, (2 * Mn) // 3, Mn - 1})   # at M = 8, 32, 64: every m % 4 (every tail)


def _streams(geometry, point):
    return reference_streams(geometry, point) or range(int(point["M"]))


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """scores [streams, C] float64 for the sampled streams: reference.index_scores (the rule) over
    the keys read back from the device and the point's queries (FP8 keys and / or queries:
    dequantized as the kernels see them)."""
    out = []
    for m in _streams(geometry, point):
        raw, scales = stream_keys(geometry, point, inputs, m)
        q = query_values(point, inputs, m).astype(np.float64)
        out.append(dsa_ref.index_scores(q, inputs["w"][m], key_values(raw, scales),
                                        int(inputs["eligible"][m])))
    return {"scores": np.stack(out)}


def stream_reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """checksum [streams, C] uint32: each eligible key's checksum, 0 past the eligible ones."""
    out = []
    for m in _streams(geometry, point):
        raw, scales = stream_keys(geometry, point, inputs, m)
        xor = key_checksums(raw, scales)
        xor[int(inputs["eligible"][m]):] = 0
        out.append(xor)
    return {"checksum": np.stack(out)}


# Tolerance (module-level so the tests read the same number).
SCORES_TOLERANCE = 1e-2


def checks(point) -> dict:
    """scores: our kernels accumulate exact BF16 x BF16 (FP8: e4m3 x f16-exact q) products in FP32,
    about 1e-7 relative (seed 000: 1.8e-7 CUDA cores, 2.95e-7 tensor cores; the FP8 path adds
    nothing: codes are exact in f16, BF16 q is exact in f16 in its normal range, the scale is one
    FP32 multiply). The torch peer rounds every head's dot to BF16 (a BF16 bmm's output, and FP8
    keys dequantized to BF16): 2^-9 relative per dot, which moves the scores by 1.9e-3 norm-wise
    and 2.5e-3 x max|ref| per element (NumPy emulation, tests/test_indexer_scan.py), so 1e-2 for
    every variant; the GPU tests hold our own variants to 1e-5. FP8 queries (scan_mma_e4m3): e4m3 x
    e4m3 products are exact (4-bit significands) and, on sm_90, accumulate as the f16 path does (the
    MMA is lowered to F2FP + HMMA.F32 + FADD: SCAN_NOTES), ~1e-7 against the reference's FP32
    dequantized q and keys; torch dequantizes q to BF16 (2^-9 an element), inside 1e-2 (emulated in
    the tests). scan_wgmma_e4m3 (FP8 wgmma, sm_90a) accumulates with the tensor core's reduced FP8
    precision (about 14 bits, DeepSeek-V3 §3.3.2; 9e-5 in a truncating NumPy model): its GPU test
    bound is 5e-3 (SCAN_NOTES "wgmma e4m3"). -inf must match exactly."""
    return {"scores": RelErr(SCORES_TOLERANCE)}


def stream_checks(point) -> dict:
    return {"checksum": Exact()}


# -- counts ----------------------------------------------------------------------------------------


def eligible_total(geometry, point) -> int:
    return int(eligible(geometry, point).sum())


def query_bytes(geometry, point) -> int:
    """q once: 2 B an element (BF16), or 1 B an element plus one FP32 scale a head (FP8)."""
    Mn, (H, D) = int(point["M"]), dims(geometry)
    return Mn * H * (D + 4) if query_dtype(point) == "fp8" else Mn * H * D * 2


def bytes_moved(geometry, point) -> int:
    """The fewest bytes: every eligible key once (256 B BF16, 132 B FP8 with its scale), q (BF16,
    or FP8 codes and scales) and w once, every score written once."""
    Mn, (H, D) = int(point["M"]), dims(geometry)
    return (eligible_total(geometry, point) * key_bytes(geometry, point) + query_bytes(geometry, point)
            + Mn * H * 4 + Mn * n_candidates(geometry, point) * 4)


def stream_bytes(geometry, point) -> int:
    """The floor's: the same eligible key bytes, one uint32 written per candidate."""
    return eligible_total(geometry, point) * key_bytes(geometry, point) + \
        int(point["M"]) * n_candidates(geometry, point) * 4


def flops(geometry, point) -> int:
    """2 H D per eligible candidate (the dots), plus 2 H (x w and the head sum; relu is a max, not
    counted)."""
    H, D = dims(geometry)
    return eligible_total(geometry, point) * (2 * H * D + 2 * H)


def footprint(geometry, point) -> int:
    return max(bytes_moved(geometry, point), FLUSH_FOOTPRINT)


def stream_footprint(geometry, point) -> int:
    return max(stream_bytes(geometry, point), FLUSH_FOOTPRINT)
