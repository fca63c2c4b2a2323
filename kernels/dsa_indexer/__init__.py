"""DSA selection path (the lightning indexer, top-k, kpool compress and expand), seed 001's
kpool_compress -> index_scores -> topk -> expand_selection as kernels.

- ``reference.py``: the rules, float64 / exact, each tested (tests/test_dsa_reference.py); every
  kernel here is checked against them.
- one module set per component (spec, variants, .cu designs), registered below.
"""

# -- indexer scan (issue 14, scan part): the scan and its stream-only floor ------------------------
import pathlib as _pathlib  # noqa: E402

from harness.registry import Component as _Component, register as _register  # noqa: E402

from . import scan_spec, scan_variants  # noqa: E402

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
    **_scan_common))

STREAM = _register(_Component(
    name="indexer_stream", reference=scan_spec.stream_reference, checks=scan_spec.stream_checks,
    bytes_moved=scan_spec.stream_bytes, flops=lambda geometry, point: 0, footprint=scan_spec.stream_footprint,
    variants=scan_variants.STREAM_VARIANTS,
    summary="the scan's eligible keys read once and XORed per key: the indexer scan's stream-only floor",
    **_scan_common))
