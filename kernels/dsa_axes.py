"""The DSA layer's axes and the rules that tie them together (seed 003 §5.2-5.3, §8.5; seed 001),
shared by the sparse MLA and indexer families: declared ahead of them so the command line, the
schema and the tests know them (``attnbench context=262144 selection=grouped``).

Rules (``check_point``): the context is a whole number of pools (index_kpool); a top-k counted in
tokens over pooled keys is a whole number of pools; a top-k never asks for more candidates than
the context offers. ``candidates`` / ``selected_candidates`` are the counts the indexer scores and
keeps, in the fuel's unit for index_topk.
"""

from __future__ import annotations

from harness.axes import Axis
from harness.registry import declare_axes

SELECTIONS = ("grouped", "scattered", "dense")
POOLINGS = ("pooled", "per_token")

CONTEXT = Axis("context", int, 262144, "tokens visible to the query (the serving cap by default)",
               low=1, high=lambda geometry: geometry.serving.max_position_embeddings)
SELECTION = Axis("selection", str, "grouped",
                 "which tokens the sparse MLA gathers: runs of index_kpool (grouped), single tokens "
                 "(scattered), or the most recent ones (dense)", choices=SELECTIONS)
POOLING = Axis("pooling", str, "pooled", "indexer keys: one per pool of index_kpool tokens, or one per token",
               choices=POOLINGS)
# fp8: e4m3 codes with one FP32 scale per key (kernels/fp8.py), 132 bytes a key instead of 256:
# the layout serving engines use for this indexer (beyond the seeds)
KEY_DTYPES = ("bf16", "fp8")
KEY_DTYPE = Axis("key_dtype", str, "bf16", "dtype of the indexer keys (fp8: e4m3 with one FP32 scale a key)",
                 choices=KEY_DTYPES)
TOPK = Axis("topk", int, None, "entries the indexer keeps (default: the fuel's index_topk)", low=1,
            resolve=lambda geometry: geometry.indexer.index_topk)

DSA_AXES = (CONTEXT, SELECTION, POOLING, KEY_DTYPE, TOPK)
declare_axes(*DSA_AXES)


def candidates(geometry, context: int, pooling: str) -> int:
    """Keys the indexer scores: every token, or one pooled key per kpool tokens."""
    return context // geometry.indexer.kpool if pooling == "pooled" else context


def selected_candidates(geometry, topk: int, pooling: str) -> int:
    """How many candidates a top-k of ``topk`` picks, in the fuel's unit for index_topk."""
    if pooling == "pooled" and geometry.indexer.index_topk_unit == "tokens":
        return topk // geometry.indexer.kpool
    return topk


def check_point(geometry, point) -> str | None:
    """The DSA cross-field rules over whichever of these axes ``point`` holds; a one-line error
    naming the key and what is allowed, or None."""
    kpool = geometry.indexer.kpool
    context = point.get("context")
    if context is not None and context % kpool:
        return (f"context: {context} is not a multiple of the pool size indexer.kpool={kpool}; "
                f"allowed: multiples of {kpool}")
    topk, pooling = point.get("topk"), point.get("pooling", "per_token")
    if topk is None:
        return None
    unit_is_tokens = pooling == "pooled" and geometry.indexer.index_topk_unit == "tokens"
    if unit_is_tokens and topk % kpool:
        return (f"topk: {topk} is not a whole number of pools of indexer.kpool={kpool}; "
                f"allowed: multiples of {kpool}")
    if context is not None:
        n_cand = candidates(geometry, context, pooling)
        n_sel = selected_candidates(geometry, topk, pooling)
        if n_sel > n_cand:
            most = n_cand * (kpool if unit_is_tokens else 1)
            return (f"topk: {topk} selects {n_sel} candidates but context={context} with "
                    f"pooling={pooling} gives only {n_cand}; allowed: topk <= {most}")
    return None
