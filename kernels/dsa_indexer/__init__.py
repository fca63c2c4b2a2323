"""DSA selection path (the lightning indexer, top-k, kpool compress and expand), seed 001's
kpool_compress -> index_scores -> topk -> expand_selection as kernels.

- ``reference.py``: the rules, float64 / exact, each tested (tests/test_dsa_reference.py); every
  kernel here is checked against them.
- one module set per component (spec, variants, .cu designs), registered below.
"""

# -- dsa_topk: the standalone top-k selection (topk_spec, topk_variants, topk_radix.cu) ----------
import pathlib as _pathlib

from harness.registry import Component as _Component, register as _register

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
    summary="the DSA top-k: the k best of C indexer scores per stream (lower index wins ties; -1 for "
            "non-finite picks and missing candidates): indices [M, k] int32"))
