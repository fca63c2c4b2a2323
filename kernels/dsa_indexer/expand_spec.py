"""DSA expand as a component: the top-k's pool ids -> the token row a sparse MLA reads (seed 001
expand_selection; seed 003 §8.5; the rule is ``reference.expand_selection``).

Per stream m (one query token at position t_m = n_m - 1, n_m = context - (m % kpool): the sparse
MLA convention):

    pools     : [M, k] int32   the top-k's output: k = topk / kpool pools (512 at the fuel's 2048
                               tokens), distinct complete pools in any order, some -1
    positions : [M] int32      t_m
    selection : [M, W] int32   W = reference.selection_width(topk tokens, kpool, selection_pad) = 2112

    t_m + 1 <= topk tokens (dense): every token 0..t_m, then -1;
    otherwise: each pool's kpool tokens in pool order (a -1 pool gives kpool -1 slots), then the tail
    (tokens complete_pools(t_m) kpool .. t_m, the query included), then -1 up to W.

The whole row is written (seed 001); judged byte-exact. Contexts below the top-k are allowed here
(the dense rule): with the streams' convention a point is either all dense (context <= topk) or
none (context >= topk + kpool), so tests take both kinds of point.
"""

from __future__ import annotations

import numpy as np

from harness.verify import Exact
from kernels import dsa_axes
from kernels.axes import M

from . import reference as rules

AXES = (M, dsa_axes.CONTEXT, dsa_axes.TOPK)


def kpool(geometry) -> int:
    return int(geometry.indexer.kpool)


def k_pools(geometry, point) -> int:
    """Pools a top-k returns per stream (topk counted in the fuel's unit)."""
    return dsa_axes.selected_candidates(geometry, int(point["topk"]), "pooled")


def topk_tokens(geometry, point) -> int:
    """The dense threshold and the tokens the pools expand to: k pools x kpool."""
    return k_pools(geometry, point) * kpool(geometry)


def width(geometry, point) -> int:
    return rules.selection_width(topk_tokens(geometry, point), kpool(geometry),
                                     int(geometry.indexer.selection_pad))


def positions(geometry, point) -> np.ndarray:
    """t_m per stream ([M] int32)."""
    return np.array([int(point["context"]) - (m % kpool(geometry)) - 1 for m in range(int(point["M"]))], np.int32)


def dense(geometry, point) -> np.ndarray:
    """[M] bool: the streams that attend densely (t_m + 1 <= topk tokens)."""
    return positions(geometry, point) + 1 <= topk_tokens(geometry, point)


def check_point(geometry, point) -> str | None:
    """The context is whole pools and the top-k whole pools (dsa_axes); unlike a scan or a top-k,
    a context below the top-k is allowed: those streams take the dense rule."""
    return (dsa_axes.check_point(geometry, {"context": point["context"]})
            or dsa_axes.check_point(geometry, {"topk": point["topk"], "pooling": "pooled"}))


def pool_row(complete: int, k: int, rng: np.random.Generator, sprinkle: int) -> np.ndarray:
    """A top-k's output over ``complete`` pools: min(k, complete) distinct pools in random order,
    -1 after them when there are fewer than k, and ``sprinkle`` of the chosen ones replaced by -1
    at random slots (chosen pools whose score was not finite)."""
    row = np.full(k, -1, np.int32)
    chosen = rng.choice(complete, size=min(k, complete), replace=False)
    row[:len(chosen)] = chosen
    row[rng.choice(len(chosen), size=min(sprinkle, len(chosen)), replace=False)] = -1
    return row


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """positions from the convention; pools like a top-k output, with a per-stream sprinkle of
    -1 pools (none in stream 0, 1 .. k / 16 in the others)."""
    k, kp = k_pools(geometry, point), kpool(geometry)
    pos = positions(geometry, point)
    rows = []
    for m, t in enumerate(pos):
        sprinkle = 0 if m == 0 else int(rng.integers(1, max(1, k // 16) + 1))
        rows.append(pool_row(rules.complete_pools(int(t), kp), k, rng, sprinkle))
    return {"pools": np.stack(rows), "positions": pos}


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """selection [M, W] int32 by ``reference.expand_selection``, every stream."""
    W, T = width(geometry, point), topk_tokens(geometry, point)
    rows = [rules.expand_selection(p, int(t), kpool(geometry), T, W)
            for p, t in zip(inputs["pools"], inputs["positions"])]
    return {"selection": np.stack(rows)}


def checks(point) -> dict:
    """Byte-exact: an expand has one right answer, slot by slot."""
    return {"selection": Exact()}


def bytes_moved(geometry, point) -> int:
    """The pools of the streams that are not dense (a dense row needs none), the positions, and
    every selection row written once."""
    Mn = int(point["M"])
    sparse = int((~dense(geometry, point)).sum())
    return sparse * k_pools(geometry, point) * 4 + Mn * 4 + Mn * width(geometry, point) * 4
