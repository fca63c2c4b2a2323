"""The top-k kernels' timeline probes (``-DDSA_TOPK_TIMELINE``, see topk_timeline.cuh): their
layout, read by harness/cta_probes.py (slot 1 is the CTA's cluster rank; a kernel writes the marks
of its own phases only). tools/cta_timeline.py builds and launches the probed variants."""

from __future__ import annotations

from harness.cta_probes import ProbeLayout

COMPONENT = "dsa_topk"
MARK_MACRO = "TK_MARK("   # a source whose text holds this carries the probes
TK_SLOTS = 44             # keep in step with topk_timeline.cuh (a test checks)
TK_CAPACITY = 1 << 16
# Mark ids of topk_timeline.cuh, in id order (TK_ENTRY = 0, ...): the phase a mark ends.
MARKS = ("entry", "issue", "read", "bound", "pass2", "sync0", "digit0", "sync1", "digit1", "sync2", "digit2",
         "counts", "write", "exit", "final", "fstart", "fread", "fpass2", "fdigits", "sample",
         "stream")
LAYOUT = ProbeLayout(marks=MARKS, slots=TK_SLOTS, capacity=TK_CAPACITY, symbol="dsa_topk_timeline",
                     option="-DDSA_TOPK_TIMELINE")

parse, cycles_per_us, phases, phase_table, span, plot = (
    LAYOUT.parse, LAYOUT.cycles_per_us, LAYOUT.phases, LAYOUT.phase_table, LAYOUT.span, LAYOUT.plot)
