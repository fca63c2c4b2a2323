"""The top-k timeline's host logic on the CPU: the probe reader (kernels/dsa_indexer/topk_timeline.py)
on a synthetic probe buffer, its constants against topk_timeline.cuh, and the tool's point
expansion and variant list (tools/topk_timeline.py)."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

from harness import registry
from harness.fuel import REPO_ROOT, load_fuel
from kernels.dsa_indexer import topk_timeline as tl

T0, C0 = 5_000_000_000_000, 10_000_000   # globaltimer (ns) and clock64 origins
RATE = 2.0                              # cycles per ns: a 2 GHz clock


def _buffer(plan: dict[int, tuple[int, int, dict[str, int]]], n: int, rate: float = RATE) -> np.ndarray:
    """plan[cta] = (sm, rank, {mark: ns from T0}); clock64 = C0 + rate x ns."""
    raw = np.zeros(n * tl.TK_SLOTS, np.uint64)
    for b, (sm, rank, marks) in plan.items():
        row = raw[b * tl.TK_SLOTS:(b + 1) * tl.TK_SLOTS]
        row[0], row[1] = sm + 1, rank + 1
        for mark, ns in marks.items():
            i = tl.MARKS.index(mark)
            row[2 + 2 * i], row[3 + 2 * i] = T0 + ns, C0 + int(rate * ns)
    return raw


PLAN = {
    0: (3, 0, {"entry": 0, "read": 4000, "sync0": 5000, "digit0": 5500, "pass2": 8000, "exit": 10000}),
    1: (7, 1, {"entry": 1000, "read": 3000, "sync0": 5000, "digit0": 5600, "pass2": 9000, "exit": 12000}),
}


def test_parse_orders_marks_by_clock_and_names_phases_by_their_end():
    marks = tl.parse(_buffer(PLAN, 2), 2)
    assert marks[marks.cta == 1].mark.tolist() == ["entry", "read", "sync0", "digit0", "pass2", "exit"]
    assert marks.sm.unique().tolist() == [3, 7] and marks["rank"].unique().tolist() == [0, 1]
    assert marks[(marks.cta == 1) & (marks.mark == "entry")].t_us.item() == 1.0
    assert tl.cycles_per_us(marks) == pytest.approx(RATE * 1e3)
    ph = tl.phases(marks)
    assert "entry" not in ph.mark.tolist()
    d = ph.set_index(["cta", "mark"]).dur_us
    assert d[(0, "read")] == pytest.approx(4.0) and d[(1, "read")] == pytest.approx(2.0)
    assert d[(1, "sync0")] == pytest.approx(2.0) and d[(0, "exit")] == pytest.approx(2.0)
    table = tl.phase_table(marks).set_index("phase")
    assert table.index.tolist() == ["read", "sync0", "digit0", "pass2", "exit"]   # the CTAs' order
    assert table.loc["read", "p50_us"] == pytest.approx(3.0) and table.loc["read", "max_us"] == pytest.approx(4.0)
    assert table.loc["pass2", "end_max_us"] == pytest.approx(9.0) and (table.ctas == 2).all()
    s = tl.span(marks)
    assert s == pytest.approx({"span_us": 12.0, "entry_spread_us": 1.0, "cta_p50_us": 10.5, "cta_max_us": 11.0})


def test_the_clock_gives_durations_finer_than_a_coarse_globaltimer():
    """A globaltimer that ticks once a µs: phases shorter than a tick still come out of clock64."""
    raw = _buffer({0: (0, 0, {"entry": 0, "digit0": 300, "digit1": 700, "exit": 10000})}, 1)
    gt = raw[2::2]
    gt[gt > 0] = T0 + ((gt[gt > 0] - T0) // 1000) * 1000
    raw[2::2] = gt
    ph = tl.phases(tl.parse(raw, 1)).set_index("mark").dur_us
    assert ph["digit0"] == pytest.approx(0.3) and ph["digit1"] == pytest.approx(0.4)


def test_parse_refuses_a_cta_without_probes():
    with pytest.raises(ValueError, match="CTA 1 wrote no entry/exit probe"):
        tl.parse(_buffer({0: PLAN[0]}, 2), 2)
    with pytest.raises(ValueError, match="2 CTAs need"):
        tl.parse(np.zeros(10, np.uint64), 2)


def test_reader_constants_match_the_cuda_header():
    src = (REPO_ROOT / "kernels/dsa_indexer/topk_timeline.cuh").read_text()
    assert int(re.search(r"^#define TK_SLOTS (\d+)$", src, re.M).group(1)) == tl.TK_SLOTS
    assert re.search(r"^#define TK_CAPACITY \(1 << (\d+)\)$", src, re.M).group(1) == "16" and tl.TK_CAPACITY == 1 << 16
    ids = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"^#define TK_([A-Z0-9]+) (\d+)\b", src, re.M)
           if m.group(1) not in ("SLOTS", "MARKS")}
    assert [name for name, _ in sorted(ids.items(), key=lambda x: x[1])] == list(tl.MARKS)
    assert int(re.search(r"^#define TK_MARKS (\d+)$", src, re.M).group(1)) == len(tl.MARKS)
    assert 2 + 2 * len(tl.MARKS) <= tl.TK_SLOTS


def _tool():
    spec = importlib.util.spec_from_file_location("topk_timeline_tool", REPO_ROOT / "tools/topk_timeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tool_expands_points_and_lists_the_probed_variants():
    tool = _tool()
    comp, geometry = registry.get("dsa_topk"), load_fuel()
    points = tool.expand_points(comp, geometry, ["M=32", "context=65536,262144", "pooling=pooled"])
    assert [p["context"] for p in points] == [65536, 262144]
    assert all(p["M"] == 32 and p["score_rows"] == "random" and p["topk"] == 2048 for p in points)
    for bad, msg in ((["N=3"], "KEY one of"), (["M=1", "M=2"], "given twice"), (["M="], "KEY=V1")):
        with pytest.raises(ValueError, match=msg):
            tool.expand_points(comp, geometry, bad)
    probed = tool.probed_variants(comp)
    assert {"radix_lean", "radix_bound", "resident", "resident_wide", "radix_onecta"} <= set(probed)
    assert "torch_topk" not in probed and "model_radix" not in probed
    rows = tool.result_table([{"event_us": 20.0, "span_us": 12.5}])
    assert rows.outside_span_us.tolist() == [7.5]


def test_the_plot_draws(tmp_path):
    marks = tl.parse(_buffer(PLAN, 2), 2)
    tl.plot({"a": marks, "b": marks}, tmp_path / "t.png", title="synthetic")
    assert (tmp_path / "t.png").stat().st_size > 5_000
