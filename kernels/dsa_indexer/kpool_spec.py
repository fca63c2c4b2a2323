"""kpool compress as a component: the per-token indexer keys and gates (resident inputs, built on
the device), the slot bias, the float64 reference over a sample of streams, bytes, FLOPs and
checks (seed 003 §8.5; seed 001 kpool_compress; the rule is ``reference.kpool_compress``).

Per stream m (one query token at position t_m = n_m - 1, n_m = context - (m % kpool) tokens
visible: the sparse MLA convention, so the streams' tails cover 0..kpool-1 tokens):

    keys   : [M, context, D] BF16, resident   the per-token indexer keys (D = indexer.head_dim = 128)
    gates  : [M, context, D] BF16, resident   the gate projection's output, one row a token
    ape    : [kpool, D] FP32                  the learned per-slot bias, shared by the streams
    lengths: [M] int32                        n_m, the tokens each stream has (what the kernel reads)

    pooled[m, p, d] = sum_r softmax_r(gates[m, kpool p + r, d] + ape[r, d]) keys[m, kpool p + r, d]
                      for p < complete_pools(t_m, kpool)                    [M, context / kpool, D] BF16
    pooled[m, p, :] = 0 for the pools that are not complete (the last pool of a stream whose
                      n_m is not a multiple of kpool): defined, so that the whole output is
                      written and checked; the scan scores those pools -inf by eligibility, so
                      their value is never read.

This prices the indexer caching strategy "per-token keys and gates cached and compressed every
step" (issue 14): the compress reads 2 x 256 B a token and writes 256 B a pool.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from harness.registry import ResidentInput
from harness.verify import Exact, RelErr
from kernels import dsa_axes
from kernels.axes import M
from kernels.kda_decode.reference import bf16_to_float

from . import reference as rules

AXES = (M, dsa_axes.CONTEXT)
BUILD_ROWS = 1 << 20          # token rows generated per chunk on the device (256 MiB of BF16 at a time)
REFERENCE_STREAMS = 4         # the float64 reference's sample when M is larger
REFERENCE_CHUNK_POOLS = 4096  # pools the float64 rule takes at a time (reference_pools)
# BF16 output rounding (8 significant bits, round to nearest even: at most 2^-8 relative per
# element, half an ulp of 2^-7 at the bottom of a binade) plus the FP32 softmax and weighted sum
# (a few ulp of FP32, ~1e-6 relative to the largest term): every element is within
# 2^-8 |pooled| + 1e-6 max|pooled| of the float64 value, so 2^-8 x 1.01 bounds both the element rule
# (|pooled| <= max|pooled|) and the norm rule. Norm-wise the rounding is ~1.7e-3 (the float32 host
# variant on N(0, 1) keys: 1.674e-03). A kernel that swaps two slots' gates or keys, or drops ape,
# moves elements by O(1): far outside.
TOLERANCE = 2.0 ** -8 * 1.01


def dims(geometry) -> tuple[int, int]:
    """(kpool, D)."""
    return int(geometry.indexer.kpool), int(geometry.indexer.head_dim)


def visible(geometry, point, m: int) -> int:
    """n_m: tokens stream m has (the query at n_m - 1)."""
    return int(point["context"]) - (m % int(geometry.indexer.kpool))


def lengths(geometry, point) -> np.ndarray:
    return np.array([visible(geometry, point, m) for m in range(int(point["M"]))], np.int32)


def pools(geometry, point) -> int:
    """P: pooled rows per stream in the output (context / kpool; check_point makes it whole)."""
    return int(point["context"]) // int(geometry.indexer.kpool)


def complete(geometry, point) -> np.ndarray:
    """complete_pools(t_m) per stream ([M] int64)."""
    kpool, _ = dims(geometry)
    return np.array([rules.complete_pools(n - 1, kpool) for n in lengths(geometry, point)], np.int64)


def check_point(geometry, point) -> str | None:
    problem = dsa_axes.check_point(geometry, point)
    if problem:
        return problem
    if int(point["context"]) < int(geometry.indexer.kpool):
        return f"context: {point['context']} holds no pool; allowed: context >= {geometry.indexer.kpool}"
    return None


def token_nbytes(geometry, point) -> int:
    """One resident input (keys or gates): M x context x D BF16."""
    _, D = dims(geometry)
    return int(point["M"]) * int(point["context"]) * D * 2


def _build_normals(geometry, point, backend, seed: int):
    """[M, context, D] uint16: N(0, 1) rounded to BF16 on the backend's device, in chunks (no
    float32 copy of the whole tensor, no host copy at all). Keys are a LayerNorm's output and the
    gates a projection's: unit-scale normals for both; with ape also N(0, 1) the softmax weights
    of a pool spread over two orders of magnitude, so a slot mix-up cannot hide in a near-uniform
    blend."""
    xp = backend.xp
    _, D = dims(geometry)
    Mn, n = int(point["M"]), int(point["context"])
    out = xp.empty((Mn, n, D), dtype=xp.uint16)
    flat = out.reshape(Mn * n, D)
    rng = xp.random.default_rng(seed)
    for start in range(0, Mn * n, BUILD_ROWS):
        stop = min(Mn * n, start + BUILD_ROWS)
        bits = rng.standard_normal((stop - start, D), dtype=xp.float32).view(xp.uint32)
        # round to nearest even into the upper 16 bits (no NaN can arise from a normal draw)
        flat[start:stop] = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(xp.uint16)
    return out


KEYS = ResidentInput("keys", _build_normals, token_nbytes)
GATES = ResidentInput("gates", _build_normals, token_nbytes)


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ape N(0, 1) FP32 (never zeros: a zero bias would leave a slot-order bug in ape unseen);
    the stream lengths."""
    kpool, D = dims(geometry)
    return {"ape": rng.standard_normal((kpool, D)).astype(np.float32), "lengths": lengths(geometry, point)}


def reference_streams(geometry, point):
    """A sample of one stream per tail length (m % kpool) when M is large, spread over the batch:
    for residue i, the stream i / (kpool - 1) of the way along the streams with that residue
    (0, 9, 22, 31 at M = 32; 0, 21, 42, 63 at M = 64; 0, 1, 2, 3 at M = 5)."""
    Mn, kpool = int(point["M"]), int(geometry.indexer.kpool)
    if Mn <= REFERENCE_STREAMS:
        return None
    picks = []
    for i in range(min(kpool, Mn)):
        same = range(i, Mn, kpool)
        picks.append(same[round(i / (kpool - 1) * (len(same) - 1))])
    return sorted(picks)


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """pooled (float64, zeros past each stream's complete pools) and incomplete (zeros: see
    ``incomplete_bits``) for the sampled streams, from their keys and gates read back from the
    device, by ``reference.kpool_compress``."""
    P = pools(geometry, point)
    _, D = dims(geometry)
    streams = reference_streams(geometry, point) or range(int(point["M"]))
    ape = np.asarray(inputs["ape"], np.float64)
    out = np.zeros((len(streams), P, D))
    for i, m in enumerate(streams):
        k = bf16_to_float(inputs.resident_rows("keys", m))
        g = bf16_to_float(inputs.resident_rows("gates", m))
        kbar = reference_pools(k, g, ape, int(inputs["lengths"][m]) - 1)
        out[i, :len(kbar)] = kbar
    return {"pooled": out, "incomplete": np.zeros((len(streams), D), np.uint16)}


def reference_pools(k: np.ndarray, g: np.ndarray, ape: np.ndarray, t: int,
                    chunk: int = REFERENCE_CHUNK_POOLS) -> np.ndarray:
    """``rules.kpool_compress(k, g, ape, t)``, computed ``chunk`` complete pools at a time on every
    host core (pools are independent, and a chunk of whole pools is all complete: the rule itself
    on each). One stream of 1M tokens took 17 s in one call and 8 s chunked on two cores; the
    sweep's host has more."""
    kpool = ape.shape[0]
    n_pools = rules.complete_pools(t, kpool)

    def part(start: int) -> np.ndarray:
        stop = min(n_pools, start + chunk)
        rows = slice(kpool * start, kpool * stop)
        return rules.kpool_compress(k[rows], g[rows], ape, kpool * (stop - start) - 1)

    if n_pools <= chunk:
        return rules.kpool_compress(k, g, ape, t)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return np.concatenate(list(pool.map(part, range(0, n_pools, chunk))))


def incomplete_bits(geometry, point, pooled_bits: np.ndarray) -> np.ndarray:
    """[M, D] uint16: the raw bits of each stream's last pooled row where that pool is not
    complete, 0 where it is (those rows are judged by ``pooled``). With the streams' convention a
    stream has at most one incomplete pool, its last; the output defines it as zeros, and this
    makes that byte-exact (RelErr alone would let values below 2^-9 max|pooled| pass there)."""
    short = complete(geometry, point) < pools(geometry, point)
    if (pools(geometry, point) - complete(geometry, point)).max(initial=0) > 1:
        raise AssertionError("a stream with more than one incomplete pool (the convention allows one)")
    last = np.asarray(pooled_bits[:, -1, :], np.uint16)
    return np.where(short[:, None], last, np.uint16(0)).astype(np.uint16)


def checks(point) -> dict:
    """pooled: RelErr(TOLERANCE) (the BF16 rounding and the FP32 softmax: see TOLERANCE);
    incomplete: byte-exact zeros."""
    return {"pooled": RelErr(TOLERANCE), "incomplete": Exact()}


def bytes_moved(geometry, point) -> int:
    """The byte floor: the keys and gates of the complete pools read once (2 x 2 B a token and
    channel), ape and the lengths once, every pooled row written once (BF16; the zero rows too:
    they are part of the output)."""
    kpool, D = dims(geometry)
    Mn = int(point["M"])
    tokens = int(complete(geometry, point).sum()) * kpool
    return tokens * D * 2 * 2 + kpool * D * 4 + Mn * 4 + Mn * pools(geometry, point) * D * 2


def flops(geometry, point) -> int:
    """Per complete pool and channel: per slot the bias add, the max compare, the subtract, the
    exp, the sum add and the weighted multiply-add (7), and one division: 7 kpool + 1."""
    kpool, D = dims(geometry)
    return int(complete(geometry, point).sum()) * D * (7 * kpool + 1)
