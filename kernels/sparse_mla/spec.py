"""Sparse MLA decode as a component: the paged latent arena, the selections, the inputs, the
float64 reference, bytes, FLOPs and checks (seed 000 "Sparse MLA decode"; seed 003 §3.4, §5.3,
§8.4, §8.5).

Per stream m (one query token at position n_m - 1, so n_m tokens visible):

    q          : [M, H, D] BF16          the absorbed query (H = 64 heads, D = 512: mla.kv_lora_rank)
    arena      : resident on the device, one shared paged latent cache of R = pages x page_size rows:
                 latent_dtype bf16: [R, D] BF16 (1024 bytes a row);
                 latent_dtype fp8:  one flat uint8 buffer of R x 516 bytes: the e4m3 codes [R, D]
                 (kernels/fp8.py), then one FP32 scale a row [R] (``fp8_parts``); the latent row is
                 ``fp8.dequantize_rows(codes, scale)``, what the reference attends over
    page_table : [M, pages_per_stream] int32: logical page p of stream m -> physical page
    selection  : [M, W] int32 token positions of stream m, -1 = an empty slot (never read)

    row(m, t)  = page_table[m, t // page_size] * page_size + t % page_size
    s[h, j]    = softmax_scale * q[m, h] . c[row(m, sel[m, j])]      over the valid slots j
    out[m, h]  = sum_j softmax(s[h])_j c[...]            [M, H, D] BF16
    lse[m, h]  = log sum_j exp(s[h, j])                    [M, H] FP32 (-inf, and out = 0, when a
                                                           row has no valid slot)

Streams sit at different positions so that their tails differ: n_m = context - (m % kpool), which
gives 0..kpool-1 tokens in the incomplete pool (the tail, seed 003 §8.5). Selections:

- grouped: topk / kpool runs of kpool consecutive tokens, one per complete pool chosen at random
  (what index_kpool = 4 implies), then the tail, then -1 up to W = the padded width (2112);
- scattered: topk distinct single tokens chosen at random, then the tail, then -1;
- dense: the most recent min(dense_tokens, n_m) tokens, W = dense_tokens (8192: seed 000's
  dense 8k comparison).

Runs and tokens come in a random order, as a top-k returns them. The arena holds exactly the
pages the streams need (``arena_scale`` 1), or that many times more, with the streams' pages
spread through it at random (a larger arena spreads the same pages thinner). The FP8 arena
quantizes the same kind of draw on the device (N(0, 1), a scale of max|row| / 448 a row, codes
rounded to nearest even); the reference reads its codes and scales back, so the device's rounding
need not match the host's (it does on the CPU backend: tested).
"""

from __future__ import annotations

import math

import numpy as np

from harness.axes import Axis
from harness.registry import ResidentInput
from harness.verify import Exact, RelErr
from kernels import dsa_axes, fp8
from kernels.axes import M
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16

DENSE_TOKENS = 8192   # seed 000's dense comparison: the most recent 8k tokens
PAGE_SIZE = Axis("page_size", int, 64, "tokens a page of the latent arena holds (64: 64 KiB pages as "
                 "seed 000; 1: a page table that is the selection itself, as engines pass it)", choices=(1, 64))
ARENA_SCALE = Axis("arena_scale", int, 1, "arena pages over the pages the streams need (1: exactly "
                   "those; more spreads the same pages through a larger arena)", low=1, high=1024)
LATENT_DTYPES = ("bf16", "fp8")
LATENT_DTYPE = Axis("latent_dtype", str, "bf16", "dtype of the latent arena (fp8: e4m3 codes with one FP32 "
                    "scale a row, 516 bytes a token instead of 1024)", choices=LATENT_DTYPES)
AXES = (M, dsa_axes.CONTEXT, dsa_axes.SELECTION, PAGE_SIZE, ARENA_SCALE, LATENT_DTYPE)
ARENA_BUILD_ROWS = 1 << 18   # rows generated per chunk on the device (256 MiB of BF16 at a time)
FP8_BUILD_ROWS = 1 << 16     # FP8: the encoder keeps ~6 float32-sized temporaries of a chunk (~800 MiB)
REFERENCE_STREAMS = 4        # the float64 reference's sample when M is larger


def dims(geometry) -> tuple[int, int, float]:
    return int(geometry.mla.heads), int(geometry.mla.kv_lora_rank), float(geometry.mla.softmax_scale)


def visible(geometry, point, m: int) -> int:
    return int(point["context"]) - (m % int(geometry.indexer.kpool))


def width(geometry, point) -> int:
    """Slots per selection row: topk + the longest tail, padded to selection_pad; dense: its window."""
    if point["selection"] == "dense":
        return DENSE_TOKENS
    kpool, pad = int(geometry.indexer.kpool), int(geometry.indexer.selection_pad)
    return math.ceil((int(geometry.indexer.index_topk) + kpool - 1) / pad) * pad


def pages_per_stream(point) -> int:
    return -(-int(point["context"]) // int(point["page_size"]))


def arena_pages(point) -> int:
    return int(point["M"]) * pages_per_stream(point) * int(point["arena_scale"])


def arena_total_rows(point) -> int:
    return arena_pages(point) * int(point["page_size"])


def row_bytes(geometry, point) -> int:
    """Bytes of one latent row: 1024 in BF16; 516 in FP8 (512 codes and one FP32 scale)."""
    _, D, _ = dims(geometry)
    return fp8.bytes_per_token(D) if point["latent_dtype"] == "fp8" else D * 2


def arena_nbytes(geometry, point) -> int:
    return arena_total_rows(point) * row_bytes(geometry, point)


def check_point(geometry, point) -> str | None:
    problem = dsa_axes.check_point(geometry, point)
    if problem:
        return problem
    if point["selection"] != "dense" and int(point["context"]) - int(geometry.indexer.kpool) + 1 < int(geometry.indexer.index_topk):
        return (f"context: {point['context']} leaves some stream fewer than topk="
                f"{geometry.indexer.index_topk} tokens to select from (it would attend densely); "
                f"allowed: context >= {int(geometry.indexer.index_topk) + int(geometry.indexer.kpool) - 1}")
    if arena_pages(point) * int(point["page_size"]) >= 2 ** 31:
        return f"arena_scale: {point['arena_scale']} makes more than 2^31 arena rows; allowed: fewer"
    return None


def selection_row(geometry, point, m: int, rng: np.random.Generator) -> np.ndarray:
    """Stream m's selection (int32, width W): the chosen tokens, the tail, then -1."""
    n, kpool, topk = visible(geometry, point, m), int(geometry.indexer.kpool), int(geometry.indexer.index_topk)
    W = width(geometry, point)
    row = np.full(W, -1, dtype=np.int32)
    kind = point["selection"]
    if kind == "dense":
        tokens = np.arange(max(0, n - W), n)
    else:
        pools = n // kpool
        if kind == "grouped":
            chosen = rng.choice(pools, size=topk // kpool, replace=False)
            tokens = (chosen[:, None] * kpool + np.arange(kpool)[None, :]).reshape(-1)
        else:
            tokens = rng.choice(pools * kpool, size=topk, replace=False)
        tail = np.arange(pools * kpool, n)
        tokens = np.concatenate([tokens, tail])
    row[:len(tokens)] = tokens
    return row


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """q N(0, 1) in BF16; the page table a random draw of distinct physical pages; selections as
    the module docstring says. Never zeros."""
    Mn, (H, D, _) = int(point["M"]), dims(geometry)
    pages = rng.permutation(arena_pages(point))[:Mn * pages_per_stream(point)]
    return {
        "q": float_to_bf16(rng.standard_normal((Mn, H, D))),
        "page_table": pages.reshape(Mn, pages_per_stream(point)).astype(np.int32),
        "selection": np.stack([selection_row(geometry, point, m, rng) for m in range(Mn)]),
    }


def build_arena(geometry, point, backend, seed: int):
    """The latent arena on the backend's device, generated there in chunks (no float32 copy of
    the whole arena, no host copy at all): N(0, 1) rounded to BF16, or for fp8 the same draw
    quantized a row at a time (``fp8_parts`` gives the two parts of that buffer)."""
    if point["latent_dtype"] == "fp8":
        return _build_fp8_arena(geometry, point, backend, seed)
    xp = backend.xp
    _, D, _ = dims(geometry)
    rows = arena_total_rows(point)
    arena = xp.empty((rows, D), dtype=xp.uint16)
    rng = xp.random.default_rng(seed)
    for start in range(0, rows, ARENA_BUILD_ROWS):
        stop = min(rows, start + ARENA_BUILD_ROWS)
        chunk = rng.standard_normal((stop - start, D), dtype=xp.float32)
        # round to nearest even into the upper 16 bits (no NaN can arise from a normal draw)
        bits = chunk.view(xp.uint32)
        arena[start:stop] = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(xp.uint16)
    return arena


def fp8_parts(arena, rows: int, D: int = 512):
    """The two parts of a flat FP8 arena buffer (views, NumPy or CuPy as the buffer is): codes
    [rows, D] uint8, then scale [rows] float32 (at byte rows x D: 4-byte aligned)."""
    return arena[:rows * D].reshape(rows, D), arena[rows * D:].view(np.float32)


def encode_e4m3_xp(xp, y):
    """float32 -> e4m3 codes (uint8) on the backend's array module: round to nearest even,
    saturating at +-448, as ``fp8.encode_e4m3`` (tested code for code against it); y finite."""
    mag = xp.abs(y)
    bits = mag.view(xp.uint32)
    # normals (|y| >= 2^-6): the float32 mantissa rounded to 3 bits, ties to even, then
    # [exponent | 3 mantissa bits] rebiased from 127 to 7 (120 << 3 = 960); a carry out of the
    # mantissa moves the exponent up, as it must
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20).astype(xp.int32) - 960
    # subnormals: m x 2^-9, m = 0..8 (8 is the smallest normal, code 8); rint ties to even
    sub = xp.rint(mag * 512.0).astype(xp.int32)
    code = xp.where(mag >= 2.0 ** -6, xp.minimum(normal, 126), sub).astype(xp.uint8)
    return code | ((y.view(xp.uint32) >> 24).astype(xp.uint8) & xp.uint8(0x80))


def _build_fp8_arena(geometry, point, backend, seed: int):
    xp = backend.xp
    _, D, _ = dims(geometry)
    rows = arena_total_rows(point)
    arena = xp.empty(rows * fp8.bytes_per_token(D), dtype=xp.uint8)
    codes, scale = fp8_parts(arena, rows, D)
    rng = xp.random.default_rng(seed)
    for start in range(0, rows, FP8_BUILD_ROWS):
        stop = min(rows, start + FP8_BUILD_ROWS)
        chunk = rng.standard_normal((stop - start, D), dtype=xp.float32)
        # a normal draw has no all-zero row: every scale is positive
        s = xp.abs(chunk).max(axis=1) / xp.float32(fp8.E4M3_MAX)
        scale[start:stop] = s
        codes[start:stop] = encode_e4m3_xp(xp, chunk / s[:, None])
    return arena


ARENA = ResidentInput("arena", build_arena, arena_nbytes)


def arena_rows(point, page_table: np.ndarray, selection: np.ndarray) -> np.ndarray:
    """Arena row of every slot ([M, W] int64; -1 where the slot is empty)."""
    ps = int(point["page_size"])
    tok = selection.astype(np.int64)
    valid = tok >= 0
    safe = np.where(valid, tok, 0)
    rows = np.take_along_axis(page_table.astype(np.int64), safe // ps, axis=1) * ps + safe % ps
    return np.where(valid, rows, -1)


def reference_streams(geometry, point):
    Mn = int(point["M"])
    if Mn <= REFERENCE_STREAMS:
        return None
    return sorted({0, Mn // 3, (2 * Mn) // 3, Mn - 1})


def attend(q: np.ndarray, c: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """One stream in float64: q [H, D], c [n, D] -> out [H, D], lse [H] (zeros and -inf for n = 0)."""
    H, D = q.shape
    if len(c) == 0:
        return np.zeros((H, D)), np.full(H, -np.inf)
    s = scale * (q @ c.T)                          # [H, n]
    mx = s.max(axis=1, keepdims=True)
    e = np.exp(s - mx)
    total = e.sum(axis=1, keepdims=True)
    return (e @ c) / total, (mx + np.log(total))[:, 0]


def selected_rows(point, inputs, rows: np.ndarray):
    """Host copies of arena ``rows`` (int64, all valid) as stored: BF16 bits [n, D] uint16, or for
    fp8 the codes [n, D] uint8 and the scales [n] float32 (read back from the device, those rows
    only)."""
    if point["latent_dtype"] != "fp8":
        return inputs.resident_rows("arena", rows), None
    codes, scale = fp8_parts(inputs.resident["arena"], arena_total_rows(point))
    host = (lambda a: np.asarray(inputs.backend.to_host(a))) if inputs.backend is not None else np.asarray
    return host(codes[rows]), host(scale[rows])


def latent(raw: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """float32 latent rows from what ``selected_rows`` read: BF16 widened, or FP8 dequantized."""
    return bf16_to_float(raw) if scale is None else fp8.dequantize_rows(raw, scale)


def checksum_words(point) -> int:
    """uint32 words of a stream's gather checksum: 4 lanes of the rows' 16-byte words, and for
    fp8 a fifth, the XOR of the rows' scale bits."""
    return 5 if point["latent_dtype"] == "fp8" else 4


def row_checksum(raw: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """The XOR of every 16-byte word of the rows (as 4 uint32 lanes), then for fp8 of the scales."""
    words = np.ascontiguousarray(raw).view(np.uint32).reshape(-1, 4)
    xor = np.bitwise_xor.reduce(words, axis=0) if len(words) else np.zeros(4, np.uint32)
    if scale is None:
        return xor.astype(np.uint32)
    bits = np.ascontiguousarray(scale, dtype=np.float32).view(np.uint32)
    return np.append(xor, np.bitwise_xor.reduce(bits) if len(bits) else np.uint32(0)).astype(np.uint32)


def reference(geometry, point, inputs, first: int | None = None) -> dict[str, np.ndarray]:
    """out and lse for the sampled streams, from the arena rows the selection names (read back
    from the device for those streams only; FP8 rows dequantized by ``fp8.dequantize_rows``), in
    float64; and the gather's checksum of the same rows. first: only the selection's first slots
    (the resident-tile component's op)."""
    _, _, scale = dims(geometry)
    selection = inputs["selection"] if first is None else inputs["selection"][:, :first]
    rows = arena_rows(point, inputs["page_table"], selection)
    streams = reference_streams(geometry, point) or range(int(point["M"]))
    out, lse, xor = [], [], []
    for m in streams:
        raw, row_scale = selected_rows(point, inputs, rows[m][rows[m] >= 0])
        o, l = attend(bf16_to_float(inputs["q"][m]).astype(np.float64), latent(raw, row_scale).astype(np.float64),
                      scale)
        out.append(o)
        lse.append(l)
        xor.append(row_checksum(raw, row_scale))
    return {"out": np.stack(out), "lse": np.stack(lse), "checksum": np.stack(xor).astype(np.uint32)}


# The resident-tile component (sparse_mla_math): its op is the attention over the first RESIDENT_SLOTS
# slots of each stream's selection (split_wgmma.cu's sparse_mla_split_wgmma_resident holds that one
# 64-slot tile in shared memory and runs a whole chunk's iterations over it).
RESIDENT_SLOTS = 64


def resident_reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    ref = reference(geometry, point, inputs, first=RESIDENT_SLOTS)
    return {"out": ref["out"], "lse": ref["lse"]}


def resident_bytes(geometry, point) -> int:
    """What the resident form must move: q, the first tile's selection and rows, out and lse."""
    H, D, _ = dims(geometry)
    Mn = int(point["M"])
    return Mn * (H * D * 2 + RESIDENT_SLOTS * (4 + row_bytes(geometry, point)) + H * D * 2 + H * 4)


def checks(point) -> dict:
    """out: stored in BF16 (<= 2^-8 relative per element), and a kernel may round the softmax
    weights to BF16 for the weighted sum (torch's bmm, FlashMLA-style kernels): out is an average
    of ~2048 rows, small beside its inputs, so that rounding moved it by 5e-3 norm-wise and single
    elements by more than 1e-2 x max|out| (H200, torch peer at 3371105); 2e-2 per element and
    norm-wise (our float32 design: 1.7e-3).
    lse: a kernel may round the scores to BF16 before the softmax (a BF16 matmul's output, as
    torch's bmm does): 2^-9 x |s| on each score, which moved lse by up to 1.1e-3 (H200, torch
    peer at 68bf0c4, |lse| about 10), so 1e-3 (0.01 absolute at that size); float32 scores stay
    near 1e-6.
    fp8: the same tolerances, against the float64 attention over the dequantized rows: every e4m3
    value is exact in BF16, so a kernel that widens the codes and applies the row scale in FP32
    (to the score, and to the softmax weight before its BF16 rounding) makes exactly the BF16
    path's roundings; what FP8 itself loses is in the reference's latent, not in the error."""
    return {"out": RelErr(2e-2), "lse": RelErr(1e-3)}


def gather_checks(point) -> dict:
    """The gather's checksum is an XOR of the rows it read: byte-exact."""
    return {"checksum": Exact()}


def slots_per_stream(geometry, point) -> list[int]:
    """Valid slots of each stream (the selection generator's counts, without drawing it)."""
    out = []
    for m in range(int(point["M"])):
        n = visible(geometry, point, m)
        if point["selection"] == "dense":
            out.append(min(n, DENSE_TOKENS))
        else:
            out.append(int(geometry.indexer.index_topk) + n % int(geometry.indexer.kpool))
    return out


def valid_slots(geometry, point) -> int:
    return sum(slots_per_stream(geometry, point))


def page_entries_bytes(geometry, point) -> int:
    """The page-table entries a gather must read: one per valid slot, at most the stream's table
    (with 1-token pages the table is the context long, but only the selected entries are read)."""
    pps = pages_per_stream(point)
    return sum(min(n, pps) for n in slots_per_stream(geometry, point)) * 4


def bytes_moved(geometry, point) -> int:
    """The fewest bytes: every selected latent row once (``row_bytes``: 1 KiB in BF16, 516 B in
    FP8), q, the selection and the page-table entries it needs once, out (BF16) and lse written
    once."""
    H, D, _ = dims(geometry)
    Mn = int(point["M"])
    return (valid_slots(geometry, point) * row_bytes(geometry, point) + Mn * H * D * 2 + Mn * width(geometry, point) * 4
            + page_entries_bytes(geometry, point) + Mn * H * D * 2 + Mn * H * 4)


def gather_bytes(geometry, point) -> int:
    """The gather roofline's: the selected rows, the selection and page-table entries, the checksums."""
    Mn = int(point["M"])
    return (valid_slots(geometry, point) * row_bytes(geometry, point) + Mn * width(geometry, point) * 4
            + page_entries_bytes(geometry, point) + Mn * checksum_words(point) * 4)


def flops(geometry, point) -> int:
    """Scores and the weighted sum: 2 x 2 x H x D per valid slot (the softmax is O(H) a slot)."""
    H, D, _ = dims(geometry)
    return 4 * H * D * valid_slots(geometry, point)
