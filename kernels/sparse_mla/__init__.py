"""Sparse MLA decode: each of the 11 DSA layers attends, per stream, to the selected latent rows of
a paged arena (absorbed NoPE MLA: 64 heads over one 512-wide latent).

- ``spec.py``: axes, the paged arena (a resident input, built on the device), the selections
  (grouped, scattered, dense; tails; -1 padding), inputs, the float64 reference over a sample of
  streams, bytes, FLOPs, checks.
- ``split_cc.cu``, ``split_mma.cu``, ``split_mma_fp8.cu``, ``split_mma_ahead.cu`` (the last three
  one template, ``sparse_mla_split_mma.cuh``) / ``gather.cu`` (``sparse_mla_common.cuh``): the CUDA
  designs and the gather roofline; ``variants.py``: their launchers, the torch and FlashInfer
  peers and the CPU variants; ``NOTES.md``.
- ``latent_dtype``: the arena in BF16 or FP8 (e4m3 codes and one FP32 scale a row, kernels/fp8.py).

Three components: ``sparse_mla`` (the layer), ``sparse_gather`` (the same rows read and XORed: the
bandwidth ceiling of this family, measured in the same sweep) and ``sparse_mla_math`` (a design's
math over one resident tile, no gather: its compute and synchronisation ceiling).
"""

from __future__ import annotations

import pathlib

from harness.registry import Component, Plot, register

from . import spec
from .variants import GATHER_VARIANTS, MATH_VARIANTS, MLA_VARIANTS

_common = dict(
    axes=spec.AXES,
    layers=lambda geometry: geometry.n_dsa_layers,
    make_inputs=spec.make_inputs,
    reference=spec.reference,
    flops=spec.flops,
    check_point=spec.check_point,
    resident=(spec.ARENA,),
    reference_streams=spec.reference_streams,
    # the host backend runs the reference over every stream: small arenas only
    cpu_max_bytes=256 << 20,
    folder=str(pathlib.Path(__file__).parent),
)

COMPONENT = register(Component(
    name="sparse_mla", checks=spec.checks, bytes_moved=spec.bytes_moved, variants=MLA_VARIANTS,
    summary="absorbed NoPE MLA over the selected rows of a paged latent arena: out [M, 64, 512], lse",
    # held against the gather of the same rows (its floor, sparse_gather) at the model context, and
    # against the context: 2048 selected tokens cost the same whatever the context holds
    plots=(Plot(x="M", y="us", facet="selection", where={"context": 262144, "latent_dtype": "bf16", "page_size": 64},
                beside=("sparse_gather",), title="µs per layer against M"),
           Plot(x="context", y="us", facet="latent_dtype", where={"M": 32, "selection": "grouped", "page_size": 64},
                beside=("sparse_gather",), title="µs per layer against the context")),
    **_common))

GATHER = register(Component(
    name="sparse_gather", checks=spec.gather_checks, bytes_moved=spec.gather_bytes, variants=GATHER_VARIANTS,
    summary="the selected rows of the arena read once and XORed: sparse MLA's gather ceiling",
    **{**_common, "flops": lambda geometry, point: 0}))

MATH = register(Component(
    name="sparse_mla_math", checks=spec.checks, bytes_moved=spec.resident_bytes, variants=MATH_VARIANTS,
    summary="a sparse MLA design's math with its gather taken out: each split runs its whole chunk's "
            "iterations over the stream's first 64 selected rows, held in shared memory; the op is the "
            "attention over those 64 slots (out, lse)",
    **{**_common, "reference": spec.resident_reference}))
