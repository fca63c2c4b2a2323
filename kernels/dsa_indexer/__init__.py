"""DSA selection path (the lightning indexer, top-k, kpool compress and expand), seed 001's
kpool_compress -> index_scores -> topk -> expand_selection as kernels.

- ``reference.py``: the rules, float64 / exact, each tested (tests/test_dsa_reference.py); every
  kernel here is checked against them.
- one module set per component (spec, variants, .cu designs), registered below.
"""

import pathlib as _pathlib

from harness.registry import Component as _Component, Plot as _Plot, register as _register

# -- dsa_topk: the standalone top-k selection (topk_spec, topk_variants, topk_radix.cu) ----------
from . import topk_spec as _topk_spec
from .topk_variants import TOPK_VARIANTS as _TOPK_VARIANTS

TOPK = _register(_Component(
    name="dsa_topk", axes=_topk_spec.AXES, layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=_topk_spec.make_inputs, reference=_topk_spec.reference, checks=_topk_spec.checks,
    bytes_moved=_topk_spec.bytes_moved, flops=_topk_spec.flops, variants=_TOPK_VARIANTS,
    check_point=_topk_spec.check_point, reference_streams=_topk_spec.reference_streams,
    # the host backend lexsorts every row: rows of up to 262144 scores at M = 1
    cpu_max_bytes=2 << 20,
    folder=str(_pathlib.Path(__file__).parent),
    # the row length is what a top-k's time follows (pooled rows are a quarter of per-token ones)
    plots=(_Plot(x="context", y="us", facet="pooling", where={"M": 32, "topk": 2048, "score_rows": "random"},
                 title="µs against the context"),
           _Plot(x="M", y="us", facet="pooling", where={"context": 262144, "topk": 2048, "score_rows": "random"},
                 title="µs against M")),
    summary="the DSA top-k: the k best of C indexer scores per stream (lower index wins ties; -1 for "
            "non-finite picks and missing candidates): indices [M, k] int32"))

# -- kpool compress and expand (kpool_spec.py, expand_spec.py, kpool_variants.py) ----------------
from . import expand_spec as _expand_spec, kpool_spec as _kpool_spec
from .kpool_variants import COMPRESS_VARIANTS as _COMPRESS_VARIANTS, EXPAND_VARIANTS as _EXPAND_VARIANTS

KPOOL_COMPRESS = _register(_Component(
    name="kpool_compress", axes=_kpool_spec.AXES, layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=_kpool_spec.make_inputs, reference=_kpool_spec.reference, checks=_kpool_spec.checks,
    bytes_moved=_kpool_spec.bytes_moved, flops=_kpool_spec.flops, variants=_COMPRESS_VARIANTS,
    summary="per-token indexer keys and gates -> one pooled key per complete pool of 4 (per-channel "
            "softmax blend with the slot bias): pooled [M, context / 4, 128] BF16",
    check_point=_kpool_spec.check_point, resident=(_kpool_spec.KEYS, _kpool_spec.GATES),
    reference_streams=_kpool_spec.reference_streams,
    # the host backend runs the float32 variant over every stream: small points only
    cpu_max_bytes=256 << 20, folder=str(_pathlib.Path(__file__).parent),
    plots=(_Plot(x="context", y="gbps", facet="M", roofline=True, title="GB/s against the context and the copy roofline"),)))

DSA_EXPAND = _register(_Component(
    name="dsa_expand", axes=_expand_spec.AXES, layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=_expand_spec.make_inputs, reference=_expand_spec.reference, checks=_expand_spec.checks,
    bytes_moved=_expand_spec.bytes_moved, flops=lambda geometry, point: 0, variants=_EXPAND_VARIANTS,
    summary="the top-k's pools -> token rows: 4 tokens a pool, the tail, dense below index_topk, "
            "-1 to the padded width: selection [M, 2112] int32",
    check_point=_expand_spec.check_point, folder=str(_pathlib.Path(__file__).parent)))

# -- indexer scan and its stream-only floor (scan_spec, scan_variants, scan_*.cu) ----------------
from . import scan_spec, scan_variants

_scan_common = dict(
    axes=scan_spec.AXES,
    layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=scan_spec.make_inputs,
    check_point=scan_spec.check_point,
    resident=scan_spec.RESIDENT,
    reference_streams=scan_spec.reference_streams,
    # the host backend scores every stream in NumPy, ten calls a timing batch: small key sets only
    # (the CPU run of experiment indexer_scan at M = 1 stays under a minute)
    cpu_max_bytes=16 << 20,
    folder=str(_pathlib.Path(__file__).parent),
)

SCAN = _register(_Component(
    name="indexer_scan", reference=scan_spec.reference, checks=scan_spec.checks,
    bytes_moved=scan_spec.bytes_moved, flops=scan_spec.flops, footprint=scan_spec.footprint,
    variants=scan_variants.SCAN_VARIANTS,
    summary="lightning indexer scan: scores[M, C] = sum_j w_j relu(q_j . key_c), -inf past the eligible keys",
    # a stream over the keys: GB/s against its stream-only floor, and time against the context
    plots=(_Plot(x="M", y="gbps", facet="pooling", where={"context": 262144, "key_layout": "cand_dim"},
                 beside=("indexer_stream",), title="GB/s against M"),
           _Plot(x="context", y="us", facet="pooling", where={"M": 32, "key_layout": "cand_dim"},
                 beside=("indexer_stream",), title="µs per layer against the context")),
    **_scan_common))

STREAM = _register(_Component(
    name="indexer_stream", reference=scan_spec.stream_reference, checks=scan_spec.stream_checks,
    bytes_moved=scan_spec.stream_bytes, flops=lambda geometry, point: 0, footprint=scan_spec.stream_footprint,
    variants=scan_variants.STREAM_VARIANTS,
    summary="the scan's eligible keys read once and XORed per key: the indexer scan's stream-only floor",
    **_scan_common))

# -- indexer_select: the scan fused with the top-k (select_spec, select_variants, select_fused.cu) --
from . import select_spec as _select_spec
from .select_variants import SELECT_VARIANTS as _SELECT_VARIANTS

SELECT = _register(_Component(
    name="indexer_select", reference=_select_spec.reference, checks=_select_spec.checks,
    bytes_moved=_select_spec.bytes_moved, flops=_select_spec.flops, footprint=_select_spec.footprint,
    variants=_SELECT_VARIANTS,
    summary="the indexer scan fused with the top-k: indices [M, k] int32 of the k best scores "
            "sum_j w_j relu(q_j . key_c) (lower index wins ties; -1 for non-finite picks and missing "
            "candidates), the scores never stored in full",
    **_scan_common))
