"""KDA decode step: one read-modify-write of the 64 x 128 x 128 recurrent state per stream.

- ``reference.py``: float64 references (definition order and the lazy deferred-rank-one form).
- ``spec.py``: shapes from the fuel, inputs, bytes, FLOPs, tolerances.
- CUDA, one file per design (``variants.DESIGN_SOURCES`` names each variant's), on shared headers:
  ``kda_common.cuh`` (the op and its layouts, bf16 and load/store helpers, norms, tile geometry,
  cp.async and PDL), ``ring.cuh`` (the ring template: the ring designs and the fused convolution),
  ``short_conv.cuh`` (the short convolution), ``kda_timeline.cuh`` (the rings' timeline probes).
  Designs: ``lazy_1pass``, ``global_2pass``, ``vec2``, ``smem_staged``, ``regs_v16``, ``lazy_v16``,
  ``pipelined_cpasync``, ``regs_pipelined``, ``regs_wide`` (also regs_wide3, regs_wide3_pdl); rings
  ``ring32k_reread``, ``ring32k_reread_pdl``, ``bulk32k_hold``, ``bulk32k_early``,
  ``bulk32k_reread``, ``bulk_early_pdl`` (bulk32k_early_pdl and bulk_head_early_pdl);
  ``fused_conv_bulk_early_pdl`` and ``conv_update`` (kda_decode_conv). ``NOTES.md``: the designs
  measured and dropped.
- ``variants.py``: the launchers and declarations, the CPU reference variant and the fla peer.
- ``conv_spec.py`` / ``conv_variants.py``: the second component, ``kda_decode_conv``: the same step
  with the layer's short convolution (q/k/v_conv1d) in front, fused into one launch or not.
"""

from __future__ import annotations

import pathlib

from harness.registry import Component, Plot, register

from . import conv_spec, conv_variants, spec
from .variants import CPU_VARIANTS, CUDA_VARIANTS, PEER_VARIANTS

COMPONENT = register(Component(
    name="kda_decode",
    axes=spec.AXES,
    layers=lambda geometry: geometry.n_kda_layers,
    make_inputs=spec.make_inputs,
    reference=spec.reference,
    bytes_moved=spec.bytes_moved,
    footprint=spec.footprint,
    flops=spec.flops,
    checks=spec.checks,
    variants=CUDA_VARIANTS + PEER_VARIANTS + CPU_VARIANTS,
    summary="one KDA decode step: state read + written in place, q/k/v/g/beta in, o out",
    # a read-modify-write of the state: time grows with M, GB/s should sit on the copy roofline
    plots=(Plot(x="M", y="us", facet="state_dtype", title="µs per layer against M"),
           Plot(x="M", y="gbps", facet="state_dtype", roofline=True, title="GB/s against M and the copy roofline")),
    # float64 references on the host: M up to 16 with a BF16 state (8 with FP32) per job.
    cpu_max_bytes=72 << 20,
    folder=str(pathlib.Path(__file__).parent),
))

CONV_COMPONENT = register(Component(
    name="kda_decode_conv",
    axes=conv_spec.AXES,
    layers=lambda geometry: geometry.n_kda_layers,
    make_inputs=conv_spec.make_inputs,
    reference=conv_spec.reference,
    bytes_moved=conv_spec.bytes_moved,
    footprint=conv_spec.footprint,
    flops=conv_spec.flops,
    checks=conv_spec.checks,
    variants=conv_variants.CUDA_VARIANTS + conv_variants.PEER_VARIANTS + conv_variants.CPU_VARIANTS,
    summary="the short convolution (3 x 8192 channels, kernel 4, SiLU, taps in place) and the KDA "
            "decode step after it",
    cpu_max_bytes=72 << 20,
    folder=str(pathlib.Path(__file__).parent),
))
