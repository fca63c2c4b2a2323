"""The DSA top-k selection as a component (``dsa_topk``): axes, score rows, the reference, bytes and
the check (seed 001 topk_pools; seed 003 §8.5; reference.topk is the rule).

Per stream m, one row of scores [C] float32 as the indexer's scan leaves it, C =
``dsa_axes.candidates(geometry, context, pooling)``: the sparse MLA convention puts the query at
n_m - 1 with n_m = context - (m % kpool) visible tokens, so the eligible candidates are the first
complete_pools(n_m - 1, kpool) pools (pooled keys) or the first n_m tokens (per-token keys), and
the rest score -inf. Pick k = ``dsa_axes.selected_candidates(geometry, topk, pooling)`` (512 pools
of 65536 at the 262144 cap with the fuel's index_topk = 2048 tokens; 2048 per token):

    scores  [M, C] float32     input (host array; the same bytes every variant reads)
    indices [M, k] int32       output: the chosen candidates, in any order, and -1 slots

The tie rule: rank by score; among equal scores the lower index wins; NaN counts as -inf; a chosen
non-finite score is -1, and fewer than k eligible candidates leave -1 slots. Judged by
``IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=False)``: the same set
as the reference, as many -1 slots, anywhere in the row (torch.topk unsorted and FlashInfer put
them where they fall; ours writes them last).

Score rows (the ``score_rows`` axis): ``random`` N(0, 1); ``ties`` few distinct values (levels of
about 3k/4 candidates each, so the k-th falls inside a level that straddles every CTA's slice: the
tie rule decides the set); ``few_eligible`` fewer eligible candidates than k (row 0 has none:
all -inf), so -1 slots; ``sorted`` N(0, 1) in ascending order (the top-k all in the last slice).
"""

from __future__ import annotations

import numpy as np

from harness.axes import Axis
from harness.verify import IndexSet
from kernels import dsa_axes
from kernels.axes import M

from . import reference as rules

SCORE_ROW_KINDS = ("random", "ties", "few_eligible", "sorted")
SCORE_ROWS = Axis("score_rows", str, "random",
                  "what the top-k's score rows hold: N(0,1) (random), few distinct values straddling the "
                  "k-th (ties), fewer eligible candidates than k (few_eligible), ascending (sorted)",
                  choices=SCORE_ROW_KINDS)
AXES = (M, dsa_axes.CONTEXT, dsa_axes.POOLING, dsa_axes.TOPK, SCORE_ROWS)
# Above this many scores the float64 reference (a lexsort a row) runs on a sample of 4 streams.
REFERENCE_ALL_ROWS = 1 << 22


def n_candidates(geometry, point) -> int:
    return dsa_axes.candidates(geometry, int(point["context"]), point["pooling"])


def k_selected(geometry, point) -> int:
    return dsa_axes.selected_candidates(geometry, int(point["topk"]), point["pooling"])


def eligible(geometry, point, m: int) -> int:
    """Candidates stream m's scan scores (the rest are -inf): complete pools, or visible tokens."""
    kpool = int(geometry.indexer.kpool)
    n = int(point["context"]) - (m % kpool)
    return rules.complete_pools(n - 1, kpool) if point["pooling"] == "pooled" else n


def check_point(geometry, point) -> str | None:
    return dsa_axes.check_point(geometry, point)


def score_row(kind: str, n_eligible: int, C: int, k: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """One row [C] float32 of ``kind``: the first n_eligible candidates scored, the rest -inf."""
    row = np.full(C, -np.inf, np.float32)
    e = n_eligible
    if kind == "few_eligible":
        most = min(k - 1, n_eligible)                    # fewer than k; row 0: none (all -inf)
        e = 0 if m == 0 or most < 1 else int(rng.integers(1, most + 1))
    if kind == "ties":
        # levels of ~3k/4 each: the top one is taken whole, the k-th falls inside the next; values
        # (level + 0.5) / 4 are exact in float32 and never zero (no -0 / +0 question for peers)
        levels = max(2, (4 * e) // (3 * k))
        row[:e] = ((rng.integers(0, levels, e) - levels // 2) + 0.5) / 4
    elif kind == "sorted":
        row[:e] = np.sort(rng.standard_normal(e).astype(np.float32))
    elif kind in ("random", "few_eligible"):
        row[:e] = rng.standard_normal(e).astype(np.float32)
    else:
        raise ValueError(f"score_rows: unknown value {kind!r}; allowed: {', '.join(SCORE_ROW_KINDS)}")
    return row


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """scores [M, C] float32, fresh random rows of the point's kind (module docstring)."""
    Mn, C, k = int(point["M"]), n_candidates(geometry, point), k_selected(geometry, point)
    return {"scores": np.stack([score_row(point["score_rows"], eligible(geometry, point, m), C, k, m, rng)
                                for m in range(Mn)])}


def reference_streams(geometry, point):
    Mn = int(point["M"])
    if Mn <= 4 or Mn * n_candidates(geometry, point) <= REFERENCE_ALL_ROWS:
        return None
    return sorted({0, Mn // 3, (2 * Mn) // 3, Mn - 1})


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """indices [streams, k] int32 by reference.topk, and the scores [streams, C] float64 IndexSet
    reads, for the sampled streams."""
    k = k_selected(geometry, point)
    streams = reference_streams(geometry, point) or range(int(point["M"]))
    scores = inputs["scores"][list(streams)].astype(np.float64)
    return {"indices": np.stack([rules.topk(row, k) for row in scores]), "scores": scores}


def checks(point) -> dict:
    """indices: an index set per row (module docstring): lower index wins among equal scores, -1
    slots as many as the reference's, anywhere."""
    return {"indices": IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=False)}


def bytes_moved(geometry, point) -> int:
    """The scores read once, the indices written once."""
    Mn = int(point["M"])
    return Mn * n_candidates(geometry, point) * 4 + Mn * k_selected(geometry, point) * 4


def flops(geometry, point) -> int:
    return 0
