"""The indexer scan and the top-k as one op (component ``indexer_select``; issue 14's fused scan +
select): the scan's inputs (scan_spec: axes, resident keys, q, w, eligibility, the float64
scores of the sampled streams) and the top-k's output (topk_spec's rule and check).

Per stream m, with the scan's scores I[m, c] (scan_spec's module doc; -inf past eligible_m):

    indices [M, k] int32   the k best candidates of I[m, :] by reference.topk: the lower index wins
                           among equal scores; a chosen non-finite score and every missing candidate
                           is -1; any order (ours: members first, then -1)
    k = dsa_axes.selected_candidates(geometry, the fuel's index_topk, pooling): 512 pools of 65536
        (pooled, index_topk counted in tokens) or 2048 tokens of 262144 at the 262144 cap

Judged as dsa_topk is: ``IndexSet(scores="scores", tie="lower_index", masked=-1,
masked_positions=False)`` against reference.topk(float64 index_scores) of the sampled streams.
Scores that the FP32 kernels and the float64 reference order differently are possible only where
two candidates' scores lie within the kernels' rounding (~1e-7 relative) of each other at the k-th
place (SELECT_NOTES.md prices that chance); exact ties (equal keys) are scored identically by
every kernel and follow the rule.
"""

from __future__ import annotations

import numpy as np

from harness.verify import IndexSet
from kernels import dsa_axes
from kernels.dsa_indexer import reference as rules

from . import scan_spec

AXES = scan_spec.AXES
RESIDENT = scan_spec.RESIDENT
make_inputs = scan_spec.make_inputs
reference_streams = scan_spec.reference_streams
n_candidates = scan_spec.n_candidates


def k_selected(geometry, point) -> int:
    """The candidates a stream keeps: the fuel's index_topk in its unit (topk_spec's count)."""
    return dsa_axes.selected_candidates(geometry, int(geometry.indexer.index_topk), point["pooling"])


def check_point(geometry, point) -> str | None:
    return scan_spec.check_point(geometry, point)


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """indices [streams, k] int32 = reference.topk of the float64 scores (scan_spec.reference) of the
    sampled streams, and those scores [streams, C] for the IndexSet check."""
    scores = scan_spec.reference(geometry, point, inputs)["scores"]
    k = k_selected(geometry, point)
    return {"indices": np.stack([rules.topk(row, k) for row in scores]), "scores": scores}


def checks(point) -> dict:
    """indices: the reference's set per row (lower index wins among equal scores), as many -1 slots,
    anywhere in the row (dsa_topk's check)."""
    return {"indices": IndexSet(scores="scores", tie="lower_index", masked=-1, masked_positions=False)}


def bytes_moved(geometry, point) -> int:
    """The fewest bytes: every eligible key once, q and w once, the indices written once (the
    scores are an intermediate the op need not store)."""
    Mn, (H, D) = int(point["M"]), scan_spec.dims(geometry)
    return (scan_spec.eligible_total(geometry, point) * scan_spec.key_bytes(geometry, point) + Mn * H * D * 2
            + Mn * H * 4 + Mn * k_selected(geometry, point) * 4)


flops = scan_spec.flops


def footprint(geometry, point) -> int:
    return max(bytes_moved(geometry, point), scan_spec.FLUSH_FOOTPRINT)
