"""The warp-specialised split kernels' timeline probes (``-DSPARSE_MLA_TIMELINE``, see
sparse_mla_timeline.cuh): their layout, read by harness/cta_probes.py. Two threads of a CTA write
marks (the producer's thread 0 and the consumers' thread 0) on one SM clock; tools/cta_timeline.py
builds and launches the probed variants (every variant of split_wgmma_ws.cu)."""

from __future__ import annotations

from harness.cta_probes import GridProbe, ProbeLayout

COMPONENT = "sparse_mla"
MARK_MACRO = "SMT_MARK("  # a source whose text holds this carries the probes
SMT_SLOTS = 32            # keep in step with sparse_mla_timeline.cuh (a test checks)
SMT_CAPACITY = 1 << 16
# Mark ids of sparse_mla_timeline.cuh, in id order (SMT_ENTRY = 0, ...): the phase a mark ends.
MARKS = ("entry", "init", "q", "rows0", "issued0", "issued", "drained", "full0", "done0", "loop", "exit")
# Counters, in id order (SMT_C_*): values, not times; *_cycles are clock64 cycles.
COUNTERS = ("full_wait_cycles", "empty_wait_cycles", "tiles")
# What the NOTES ask of the kernel: the cold chain (until tile 0 has landed), tile 0's own flight,
# the steady loop after it, and the epilogue, each from the marks that bound it.
INTERVALS = (
    ("to tile 0's rows", "init", "rows0"),
    ("to tile 0 landed (cold chain)", "init", "full0"),
    ("tile 0's copies in flight", "issued0", "full0"),
    ("tile 0's math", "full0", "done0"),
    ("the other tiles", "done0", "loop"),
    ("producer: all issued", "init", "issued"),
    ("producer thread 0: its last copies land", "issued", "drained"),
    ("epilogue (partials issued)", "loop", "exit"),
)
LAYOUT = ProbeLayout(marks=MARKS, slots=SMT_SLOTS, capacity=SMT_CAPACITY, symbol="sparse_mla_timeline",
                     option="-DSPARSE_MLA_TIMELINE", counters=COUNTERS, intervals=INTERVALS)
# The combine, probed as one grid (sparse_mla_combine.cuh's SMC_* marks, in id order): its first and
# last block's entry, past griddepcontrol.wait (a programmatic pair's combine; at once when launched
# plainly) and exit, on the split CTAs' globaltimer axis. Where the pair's gap goes (NOTES.md, the
# M = 8 penalty of the programmatic pair).
COMBINE_MARKS = ("entry", "waited", "exit")
COMBINE_PROBE = GridProbe(kernel="combine", marks=COMBINE_MARKS, symbol="sparse_mla_combine_timeline")
GRID_PROBES = (COMBINE_PROBE,)   # read by tools/cta_timeline.py after the per-CTA layout
