"""The CTA timelines' host logic on the CPU: the probe reader (harness/cta_probes.py) on synthetic
probe buffers in the top-k's layout (kernels/dsa_indexer/topk_timeline.py) and sparse MLA's
(kernels/sparse_mla/timeline.py), each layout's constants against its CUDA header, and the tool's
families, point expansion and variant lists (tools/cta_timeline.py)."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

from harness import registry
from harness.fuel import REPO_ROOT, load_fuel
from harness.cta_probes import ProbeLayout
from kernels.dsa_indexer import topk_timeline as tl
from kernels.sparse_mla import timeline as smla

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
    spec = importlib.util.spec_from_file_location("cta_timeline_tool", REPO_ROOT / "tools/cta_timeline.py")
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
    probed = tool.probed_variants(comp, tool.family("dsa_topk"))
    assert {"radix_lean", "radix_bound", "resident", "resident_wide", "radix_onecta"} <= set(probed)
    # marks in a local header count: the union forms' are in topk_union.cuh, beside both their sources
    assert {"radix_union", "radix_union_own", "radix_union_half", "radix_union_half_own"} <= set(probed)
    assert "torch_topk" not in probed and "model_radix" not in probed
    rows = tool.result_table([{"event_us": 20.0, "span_us": 12.5}])
    assert rows.outside_span_us.tolist() == [7.5]


def test_the_plot_draws(tmp_path):
    marks = tl.parse(_buffer(PLAN, 2), 2)
    tl.plot({"a": marks, "b": marks}, tmp_path / "t.png", title="synthetic")
    assert (tmp_path / "t.png").stat().st_size > 5_000


def test_the_tool_names_its_families_and_refuses_others():
    tool = _tool()
    assert tool.family("sparse_mla") is smla
    with pytest.raises(ValueError, match=r"component: 'kda_decode' has no timeline probes; allowed: \['dsa_topk', 'sparse_mla'\]"):
        tool.family("kda_decode")
    probed = tool.probed_variants(registry.get("sparse_mla"), smla)
    assert {"split_wgmma_ws_async", "split_wgmma_ws_async_1wave", "split_wgmma_ws_async_coop_1wave"} <= set(probed)
    assert all(p.name == "split_wgmma_ws.cu" for p in probed.values())
    assert "split_wgmma_1wave" not in probed and "torch" not in probed


# ---- sparse MLA's layout: two writers a CTA, counters after the marks, named intervals ----

def _smla_buffer(plan: dict[int, tuple[int, dict[str, int], dict[str, int]]], n: int) -> np.ndarray:
    """plan[cta] = (sm, {mark: ns from T0}, {counter: value}); clock64 = C0 + RATE x ns."""
    L = smla.LAYOUT
    raw = np.zeros(n * L.slots, np.uint64)
    for b, (sm, marks, counters) in plan.items():
        row = raw[b * L.slots:(b + 1) * L.slots]
        row[0], row[1] = sm + 1, 1
        for mark, ns in marks.items():
            i = L.marks.index(mark)
            row[2 + 2 * i], row[3 + 2 * i] = T0 + ns, C0 + int(RATE * ns)
        for c, v in counters.items():
            row[2 + 2 * len(L.marks) + L.counters.index(c)] = v + 1   # the kernel stores value + 1
    return raw


SMLA_PLAN = {
    0: (0, {"entry": 0, "init": 200, "q": 300, "rows0": 1500, "issued0": 1700, "full0": 3200, "done0": 4000,
            "issued": 9000, "drained": 10500, "loop": 14000, "exit": 15000},
        {"full_wait_cycles": 6000, "empty_wait_cycles": 2000, "tiles": 9}),
    1: (1, {"entry": 100, "init": 300, "q": 400, "rows0": 1900, "issued0": 2100, "full0": 3900, "done0": 4600,
            "issued": 9100, "drained": 10000, "loop": 15100, "exit": 16100},
        {"full_wait_cycles": 8000, "empty_wait_cycles": 3000, "tiles": 9}),
}


def test_sparse_mla_marks_of_two_writers_order_on_one_clock_and_give_intervals():
    L = smla.LAYOUT
    raw = _smla_buffer(SMLA_PLAN, 2)
    marks = L.parse(raw, 2)
    assert marks[marks.cta == 0].mark.tolist() == ["entry", "init", "q", "rows0", "issued0", "full0", "done0",
                                                    "issued", "drained", "loop", "exit"]
    iv = L.interval_table(marks).set_index("interval")
    cold = iv.loc["to tile 0 landed (cold chain)"]
    assert (cold["from"], cold["to"]) == ("init", "full0")
    assert cold.p50_us == pytest.approx(3.3) and cold.max_us == pytest.approx(3.6) and cold.min_us == pytest.approx(3.0)
    assert iv.loc["epilogue (partials issued)", "p50_us"] == pytest.approx(1.0)
    assert iv.loc["tile 0's copies in flight", "max_us"] == pytest.approx(1.8)
    assert (iv.ctas == 2).all() and len(iv) == len(smla.INTERVALS)
    counters = L.counter_table(raw, 2)
    assert counters.columns.tolist() == list(smla.COUNTERS)
    assert counters.full_wait_cycles.tolist() == [6000, 8000] and counters.tiles.tolist() == [9, 9]
    assert L.span(marks)["span_us"] == pytest.approx(16.1)


def test_an_interval_whose_marks_a_form_does_not_write_is_left_out():
    """The alternate-tile form's consumers write no full0 / done0 / loop: those intervals drop out
    instead of failing or reading as zero."""
    L = smla.LAYOUT
    plan = {0: (0, {k: v for k, v in SMLA_PLAN[0][1].items() if k not in ("full0", "done0", "loop")}, {})}
    iv = L.interval_table(L.parse(_smla_buffer(plan, 1), 1))
    assert set(iv.interval) == {"to tile 0's rows", "producer: all issued", "producer thread 0: its last copies land"}


def test_a_layout_refuses_too_few_slots_and_unknown_interval_marks():
    with pytest.raises(ValueError, match="need 9 slots; the layout has 8"):
        ProbeLayout(marks=("entry", "a", "exit"), slots=8, capacity=64, symbol="x", option="-DX", counters=("c",))
    with pytest.raises(ValueError, match=r"intervals name marks \['b'\]"):
        ProbeLayout(marks=("entry", "exit"), slots=8, capacity=64, symbol="x", option="-DX",
                    intervals=(("i", "entry", "b"),))


def test_sparse_mla_reader_constants_match_the_cuda_header():
    src = (REPO_ROOT / "kernels/sparse_mla/sparse_mla_timeline.cuh").read_text()
    assert int(re.search(r"^#define SMT_SLOTS (\d+)$", src, re.M).group(1)) == smla.SMT_SLOTS
    assert re.search(r"^#define SMT_CAPACITY \(1 << (\d+)\)$", src, re.M).group(1) == "16"
    assert smla.SMT_CAPACITY == 1 << 16
    defs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define SMT_([A-Z0-9_]+) (\d+)\b", src, re.M)}
    marks = {k.lower(): v for k, v in defs.items() if not k.startswith("C_") and k not in ("MARKS", "COUNTERS", "SLOTS")}
    assert [n for n, _ in sorted(marks.items(), key=lambda x: x[1])] == list(smla.MARKS)
    counters = {k[2:].lower(): v for k, v in defs.items() if k.startswith("C_")}
    names = [n for n, _ in sorted(counters.items(), key=lambda x: x[1])]
    assert [f"{n}_cycles" if n.endswith("wait") else n for n in names] == list(smla.COUNTERS)
    assert defs["MARKS"] == len(smla.MARKS) and defs["COUNTERS"] == len(smla.COUNTERS)


def test_a_counter_no_thread_wrote_reads_missing_and_a_zero_count_reads_zero():
    """The alternate-tile form's consumers count no full waits: NaN, not 0; a producer that never
    waited for room (one tile) counted 0: 0."""
    L = smla.LAYOUT
    plan = {0: (0, SMLA_PLAN[0][1], {"empty_wait_cycles": 0, "tiles": 1})}
    counters = L.counter_table(_smla_buffer(plan, 1), 1)
    assert np.isnan(counters.full_wait_cycles[0])
    assert counters.empty_wait_cycles[0] == 0 and counters.tiles[0] == 1


def _combine_words(blocks: list[dict[str, int]]) -> np.ndarray:
    """What the combine's blocks leave in its grid probe: each block's {mark: ns from T0} folded by
    min and max as smc_mark does on the GPU, the exits counted."""
    probe = smla.COMBINE_PROBE
    w = probe.fresh()
    for block in blocks:
        for mark, ns in block.items():
            n = probe.marks.index(mark)
            w[2 * n] = min(int(w[2 * n]), T0 + ns)
            w[2 * n + 1] = max(int(w[2 * n + 1]), T0 + ns)
        w[-1] += 1
    return w


def test_the_combine_grid_probe_reads_its_first_and_last_blocks_on_the_split_ctas_axis():
    """Two programmatic combine blocks: one launched early (in at 2 µs, on an idle SM) that waits
    until the split grid is done, one launched after; the times are from the split's first CTA entry
    (entry_ns of its per-CTA buffer), and the line the tool prints says the gap after the last CTA."""
    raw = _smla_buffer(SMLA_PLAN, len(SMLA_PLAN))
    t0 = smla.LAYOUT.entry_ns(raw, len(SMLA_PLAN))
    assert t0 == T0 + min(marks["entry"] for _, marks, _ in SMLA_PLAN.values())   # CTA 0's, at 0 ns
    w = _combine_words([{"entry": 2000, "waited": 40000, "exit": 41000},
                        {"entry": 39500, "waited": 39600, "exit": 42500}])
    got = smla.COMBINE_PROBE.read(w, T0)
    assert got == pytest.approx({"combine_entry_first_us": 2.0, "combine_entry_last_us": 39.5,
                                 "combine_waited_first_us": 39.6, "combine_waited_last_us": 40.0,
                                 "combine_exit_first_us": 41.0, "combine_exit_last_us": 42.5, "combine_blocks": 2})
    tool = _tool()
    line = tool.grid_probe_line(smla.COMBINE_PROBE, got, span_us=38.0)
    assert "2 blocks" in line and "+1.60 after the last CTA's exit" in line and "last out at 42.50 (2.90" in line


def test_a_step_without_the_combine_reads_nothing_and_a_half_written_probe_is_refused():
    """A cooperative design (its combine in the split kernel) leaves the buffer as reset: no columns,
    no line; a buffer with one mark missing was not reset before the launch: refused."""
    probe = smla.COMBINE_PROBE
    assert probe.read(probe.fresh(), T0) == {}
    assert _tool().grid_probe_line(probe, {}, span_us=1.0) == ""
    w = _combine_words([{"entry": 1000, "exit": 3000}])
    with pytest.raises(ValueError, match="'waited'"):
        probe.read(w, T0)
    with pytest.raises(ValueError, match="holds 3 words"):
        probe.read(np.zeros(3, np.uint64), T0)


def test_the_combine_probe_constants_match_the_cuda_header():
    src = (REPO_ROOT / "kernels/sparse_mla/sparse_mla_combine.cuh").read_text()
    defs = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"^#define SMC_([A-Z]+) (\d+)$", src, re.M)}
    n = defs.pop("marks")
    assert [k for k, _ in sorted(defs.items(), key=lambda x: x[1])] == list(smla.COMBINE_MARKS) and n == 3
    assert f"sparse_mla_combine_timeline[2 * SMC_MARKS + 1]" in src and smla.COMBINE_PROBE.words == 2 * n + 1
    # every combine kernel marks its entry, its wait's end and its exit, the wait between the first two
    for m in re.finditer(r"__global__ void[^\n]*\n(sparse_mla_combine\w*)\(.*?\n}", src, re.S):
        body = m.group(0)
        at = [body.index(f"SMC_MARK(SMC_{k.upper()})") for k in smla.COMBINE_MARKS]
        assert at == sorted(at), m.group(1)
        if m.group(1).endswith("_pdl"):
            assert at[0] < body.index("SMLA_GRID_WAIT()") < at[1], m.group(1)
