"""The README's main job on the CPU backend: a sweep, then a dated report with real rows."""

from __future__ import annotations

import pandas as pd


def test_quickstart_sweep_and_report(cli, tmp_path):
    root, out = tmp_path / "store", tmp_path / "reports"
    res = cli("-m", "+experiment=quickstart", "backend=cpu", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    res = cli("report", "latest", "--root", str(root), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (folder,) = list(out.iterdir())
    name = folder.name.split("-")
    assert name[3:5] == ["quickstart", "cpu"] and len(name) == 6 and name[0].isdigit() and name[5].isdigit()
    text = (folder / "README.md").read_text()
    assert "CPU reference backend" in text
    assert "numpy_copy" in text and "GB/s" in text and "## Roofline" in text
    rows = pd.read_csv(folder / "rows.csv")
    assert len(rows) == 3 and set(rows["status"]) == {"ok"} and (rows["gbps"] > 0).all()
    # Every number in the table is one of the stored rows: check the p50s appear as rendered.
    for ms in rows["ms_p50"]:
        assert f"{ms * 1e3:.2f}" in text
    assert (folder / "roofline.png").stat().st_size > 1000


def test_report_of_unknown_sweep_is_one_line(cli, tmp_path):
    res = cli("report", "nope", "--root", str(tmp_path))
    assert res.returncode != 0
    assert len(res.stderr.strip().splitlines()) == 1 and "sweep:" in res.stderr


def test_reports_of_two_sweeps_do_not_overwrite_each_other(cli, tmp_path):
    root, out = tmp_path / "store", tmp_path / "reports"
    for mib in ("1", "2"):
        res = cli("backend=cpu", "timing=quick", f"copy_mib={mib}", "sweep=dup", f"store.root={root}")
        assert res.returncode == 0, res.stderr
    from harness import report, store

    sweeps = store.sweep_dirs(root)
    assert len(sweeps) == 2
    first = report.render_sweep(sweeps[0], out).parent
    second = report.render_sweep(sweeps[1], out).parent
    assert first != second and first.is_dir() and second.is_dir()
    (first / "stale.png").write_text("x")
    manifest = (first / ".generated").read_text().split()
    (first / ".generated").write_text("\n".join(manifest + ["stale.png"]))
    (first / "NOTES.md").write_text("hand-written")
    again = report.render_sweep(sweeps[0], out).parent
    assert again == first
    assert not (first / "stale.png").exists(), "a file an earlier render wrote is removed"
    assert (first / "NOTES.md").exists(), "hand-written files are kept"


def test_scaling_fit_recovers_rate_and_fixed_cost():
    """Rows built from time = 5 us + bytes / 4000 GB/s (with one small latency-bound point far
    off the line) give back 4000 GB/s and 5 us, and the small point is left out of the fit."""
    import pandas as pd

    from harness import report

    rows = []
    for dtype, rate, fixed in (("bf16", 4000e9, 5e-6), ("fp32", 3000e9, 2e-6)):
        for M in (1, 16, 24, 32, 64):
            nbytes = M * 4.3e6
            seconds = fixed + nbytes / rate if M > 1 else 40e-6  # M=1: latency-bound, off the line
            rows.append({"component": "kda_decode", "variant": "v", "M": M, "state_dtype": dtype,
                         "point_axes": "M,state_dtype",
                         "bytes": nbytes, "ms_p50": seconds * 1e3, "status": "ok", "peer": False})
    fits = {f["others"]["state_dtype"]: f for f in report.scaling_fits(pd.DataFrame(rows))}
    assert set(fits) == {"bf16", "fp32"}
    assert abs(fits["bf16"]["rate_gbps"] - 4000) < 1e-6 and abs(fits["bf16"]["fixed_us"] - 5) < 1e-6
    assert abs(fits["fp32"]["rate_gbps"] - 3000) < 1e-6 and abs(fits["fp32"]["fixed_us"] - 2) < 1e-6
    assert fits["bf16"]["sizes"] == [16, 24, 32, 64] and fits["bf16"]["max_dev"] < 1e-9
    table = report.scaling_table(pd.DataFrame(rows), roofline_gbps=4000.0)
    assert "| v | bf16 | 16, 24, 32, 64 | 4000 | 100.0 | 5.00 | 0.0% |" in table
    # Two points are not a line: no fit.
    assert report.scaling_fits(pd.DataFrame([r for r in rows if r["M"] in (32, 64)])) == []


def test_a_timeline_kept_beside_a_report_is_rendered_into_it(cli, tmp_path):
    root, out = tmp_path / "store", tmp_path / "reports"
    res = cli("backend=cpu", "timing=quick", "copy_mib=1", "sweep=tl", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    from harness import report, store

    (sweep,) = store.sweep_dirs(root)
    folder = report.render_sweep(sweep, out).parent
    assert "Per-CTA timeline" not in (folder / "README.md").read_text()
    (folder / "timeline").mkdir()
    (folder / "timeline" / "summary.csv").write_text(
        "variant,grid,floor_us,span_us\nfast_one,396,2.98,33.604\nslow_one,264,2.98,40.1\n")
    text = report.render_sweep(sweep, out).read_text()
    assert "## Per-CTA timeline" in text
    assert "|  | fast_one | slow_one |" in text and "| span_us | 33.60 | 40.10 |" in text
    assert "| grid | 396 | 264 |" in text
    assert "timeline/timeline.png" not in text  # no plot saved, no broken image link


def test_a_chained_sweep_says_its_times_are_per_launch_of_back_to_back_layers(cli, tmp_path):
    root, out = tmp_path / "store", tmp_path / "reports"
    res = cli("backend=cpu", "timing=quick", "timing.chain=3", "copy_mib=1", "sweep=chained", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    res = cli("backend=cpu", "timing=quick", "copy_mib=1", "sweep=single", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    from harness import report, store

    chained = (report.render_sweep(store.find_sweep(root, "chained"), out)).read_text()
    single = (report.render_sweep(store.find_sweep(root, "single"), out)).read_text()
    assert "Timed as back-to-back layers" in chained and "ran 3 launches" in chained
    assert "L2 flushed" not in chained.split("Timed as back-to-back layers")[1].split("\n\n")[0]  # CPU: no L2
    assert "Timed as back-to-back layers" not in single
    df = store.load_sweep(store.find_sweep(root, "chained"))
    assert set(df["chain"]) == {3}


def test_rows_whose_graph_capture_failed_are_flagged_not_hidden():
    from harness import report

    base = {"component": "kda_decode", "status": "ok", "noisy": False, "reason": "", "M": 32, "point_axes": "M",
            "ms_p50": 1e-3, "ms_p20": 1e-3, "ms_p80": 1e-3, "gbps": 1.0, "roofline_fraction": 0.5,
            "layers": 34, "ms_all_layers": 0.034, "rel_err": 1e-3, "n": 10, "peer": False}
    df = pd.DataFrame([{**base, "variant": "a", "graph": True},
                       {**base, "variant": "b", "graph": False},
                       {**base, "variant": "c", "graph": False, "reason": "graph capture failed (X); timed as plain launches"}])
    assert list(report.graph_fallbacks(df)) == [False, True, True]
    problems = report.problems_table(df)
    assert "| kda_decode | b |" in problems and "its capture failed" in problems
    assert "graph capture failed (X)" in problems and "| kda_decode | a |" not in problems
    table = report.results_table(df, cpu=False)
    assert table.count("(no graph)") == 2
    plain = df.assign(graph=False, reason="")  # a sweep timed without graphs on purpose flags nothing
    assert not report.graph_fallbacks(plain).any() and report.problems_table(plain) == ""
    failed_everywhere = df.assign(graph=False)  # every capture failed: the reasons still say so
    assert list(report.graph_fallbacks(failed_everywhere)) == [False, False, True]


def test_a_rows_note_on_how_it_ran_is_shown_once():
    """An ok row whose launch said how it ran (fla's pinned convolution config) is listed under
    its own heading; noisy and failed rows stay in the problems table only; silent rows in neither."""
    from harness import report

    base = {"component": "kda_decode_conv", "status": "ok", "noisy": False, "reason": "", "M": 32, "point_axes": "M",
            "graph": True, "peer": False}
    df = pd.DataFrame([{**base, "variant": "ours"},
                       {**base, "variant": "fla", "peer": True, "reason": "pinned: BD: 128, num_warps: 4"},
                       {**base, "variant": "slow", "noisy": True, "reason": "noisy: spread 9.0% > 5%"},
                       {**base, "variant": "broken", "status": "failed", "reason": "RuntimeError: boom"}])
    notes = report.notes_table(df)
    assert "| kda_decode_conv | fla | 32 | pinned: BD: 128, num_warps: 4 |" in notes
    assert "| ours |" not in notes and "| slow |" not in notes and "| broken |" not in notes
    problems = report.problems_table(df)
    assert "| slow |" in problems and "| broken |" in problems and "| fla |" not in problems
    assert report.notes_table(df[df["variant"] == "ours"]) == ""


def test_compare_puts_two_sweeps_shared_rows_side_by_side(cli, tmp_path):
    root = tmp_path / "store"
    for sweep, extra in (("one", []), ("two", ["timing.chain=2"])):
        res = cli("-m", "backend=cpu", "timing=quick", "copy_mib=1,2", f"sweep={sweep}", f"store.root={root}", *extra)
        assert res.returncode == 0, res.stderr
    res = cli("compare", "one", "two", "--root", str(root))
    assert res.returncode == 0, res.stderr
    from harness import store

    a, b = (store.load_sweep(store.find_sweep(root, n)) for n in ("one", "two"))
    out = res.stdout
    assert "(single launch)" in out and "(chain 2)" in out and "2 shared rows; 0 only in A, 0 only in B" in out
    for mib in (1, 2):
        ma = a.loc[a["copy_mib"] == mib, "ms_p50"].iloc[0]
        mb = b.loc[b["copy_mib"] == mib, "ms_p50"].iloc[0]
        assert f"| {ma * 1e3:.2f} | {mb * 1e3:.2f} | {mb / ma:.3f} |" in out
    res = cli("compare", "one", "nope", "--root", str(root))
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1 and "sweep" in res.stderr
