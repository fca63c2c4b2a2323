"""The whole DSA layer as one decode step (issue 14, last part): [kpool compress] -> indexer scan ->
top-k -> expand -> sparse MLA split + combine for M streams, one multi-kernel step built from the
families' own kernels (kernels/dsa_indexer, kernels/sparse_mla), timed beside the sum of its parts.

- ``spec.py``: axes (``key_caching``: pooled, compress, per_token), the per-strategy resident inputs,
  exact indexer inputs, the float64 reference (the families' reference rules composed), checks,
  bytes and FLOPs (the parts' sums), ``part_points`` (the part rows a layer row equals).
- ``variants.py``: ``chained`` (one KernelStep) and ``ref_layer`` (CPU); ``NOTES.md``.
"""

from __future__ import annotations

import pathlib

from harness.registry import Component, register

from . import spec
from .variants import LAYER_VARIANTS

COMPONENT = register(Component(
    name="dsa_layer", axes=spec.AXES, layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=spec.make_inputs, reference=spec.reference, checks=spec.checks,
    bytes_moved=spec.bytes_moved, flops=spec.flops, footprint=spec.footprint, variants=LAYER_VARIANTS,
    check_point=spec.check_point, resident=spec.RESIDENT, reference_streams=spec.reference_streams,
    # the host backend runs every stage over every stream in NumPy: small points only
    cpu_max_bytes=64 << 20, folder=str(pathlib.Path(__file__).parent),
    summary="one DSA layer's decode step: [compress] -> indexer scan -> top-k -> expand -> sparse MLA "
            "over that selection: out [M, 64, 512], lse, selection"))
