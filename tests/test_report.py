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
    assert folder.name.endswith("-quickstart-cpu") and folder.name[:4].isdigit()
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
