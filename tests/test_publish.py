"""Render, then publish: two small H200 stores under tests/fixtures/ (no GPU needed) render beside
their store, and ``publish`` copies only a report's reader files into a reports folder whose
generated index lists it."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from harness import publish, report, store
from harness.fuel import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "h200_store"
SWEEP_NAMES = ["kda_decode_step", "roofline"]


@pytest.fixture()
def store_root(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    return root


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_fixtures_are_small_h200_stores():
    sweeps = store.sweep_dirs(FIXTURES)
    assert sorted(str(store.load_sweep(s)["sweep"].iloc[0]) for s in sweeps) == sorted(SWEEP_NAMES)
    for s in sweeps:
        prov = json.loads((s / "provenance.json").read_text())
        assert prov["backend"] == "cuda" and prov["device_short"] == "h200" and prov["commit"] != "unknown"
    assert all(p.stat().st_size < 64 * 1024 for p in FIXTURES.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", SWEEP_NAMES)
def test_fixture_renders_every_ok_p50(name, store_root, tmp_path):
    sweep = store.find_sweep(store_root, name)
    text = report.render_sweep(sweep, tmp_path / "out").read_text()
    rows = store.load_sweep(sweep)
    prov = json.loads((sweep / "provenance.json").read_text())
    ok = rows[rows["status"] == "ok"]
    assert len(ok) > 0
    for ms in ok["ms_p50"]:
        assert f"{ms * 1e3:.2f}" in text
    # how to reproduce it: the commit and the sweep's command line
    assert prov["commit"] in text and f"`attnbench {prov['argv']}`" in text


def test_report_renders_beside_its_store_by_default(cli, store_root):
    res = cli("report", "roofline", "--root", str(store_root))
    assert res.returncode == 0, res.stderr
    (folder,) = (store_root / "reports").iterdir()
    assert folder.name.startswith("2026-11-29-roofline-h200-")  # the sweep's start time follows
    assert (folder / "README.md").is_file() and str(folder) in res.stdout
    # the rendered reports do not look like a sweep to the store
    assert len(store.sweep_dirs(store_root)) == 2


def _rendered_with_tools(store_root):
    """The step fixture rendered beside its store, with what a session adds by hand: a tool's
    timeline, GPU test output, a FINDINGS.md citing one raw CSV, and a stray copy of a store."""
    out = report.render_sweep(store.find_sweep(store_root, "kda_decode_step"), store_root / "reports").parent
    tl = out / "timeline"
    tl.mkdir()
    (tl / "summary.csv").write_text("variant,span_us\nbulk32k_early_pdl,37.6\n")
    (tl / "timeline.png").write_bytes(b"\x89PNG fake")
    (tl / "kda_timeline_output.txt").write_text("launch floor 2.9 us\n")
    for raw in ("bulk32k_early_pdl_ctas.csv", "bulk32k_early_pdl_tiles.csv", "bulk32k_early_ctas.csv"):
        (tl / raw).write_text("cta,entry_us\n0,0.1\n")
    (tl / "bulk32k_early_pdl_chain.csv").write_text("layer,period_us\n1,38.5\n")
    (out / "gpu_tests.txt").write_text("26 passed\n")
    (out / "FINDINGS.md").write_text("# Findings\n\nTile gaps from `timeline/bulk32k_early_pdl_tiles.csv`.\n")
    (out / "scratch.log").write_text("not a reader file\n")
    stray = out / "store" / "sweep" / "0"
    stray.mkdir(parents=True)
    (stray / "rows.parquet").write_bytes(b"PAR1")
    (stray / "meta.json").write_text("{}")
    return out


def test_publish_copies_reader_files_and_indexes(store_root, tmp_path):
    rendered = _rendered_with_tools(store_root)
    reports = tmp_path / "reports"
    dest = publish.publish(rendered, reports)
    assert dest == reports / rendered.name
    assert _files(dest) == [
        "FINDINGS.md", "README.md", "gpu_tests.txt", "provenance.json", "reopen.json", "roofline.json", "rows.csv",
        "timeline/bulk32k_early_pdl_chain.csv", "timeline/bulk32k_early_pdl_tiles.csv",
        "timeline/kda_timeline_output.txt", "timeline/summary.csv", "timeline/timeline.png",
    ]
    assert (dest / "README.md").read_text() == (rendered / "README.md").read_text()
    index = (reports / "README.md").read_text()
    assert index == publish.index_markdown(reports)
    assert f"]({dest.name}/README.md)" in index and f"]({dest.name}/FINDINGS.md)" in index
    assert "`d338284`" in index and "`kda_decode_step`" in index
    # the headline: our fastest ok row at the largest point (FP32, M = 32), not fla's
    assert "kda_decode: `bulk32k_early_pdl` at M=32 state_dtype=fp32: 65.53 µs/layer, 4144 GB/s, 97.5% of roofline" in index
    assert not [p for p in reports.iterdir() if p.name.startswith(".")], "no temporary folder is left"


def test_publish_refuses_a_different_report_of_the_same_name(cli, store_root, tmp_path):
    rendered = report.render_sweep(store.find_sweep(store_root, "roofline"), store_root / "reports").parent
    reports = tmp_path / "reports"
    res = cli("publish", str(rendered), "--reports", str(reports))
    assert res.returncode == 0, res.stderr
    res = cli("publish", str(rendered), "--reports", str(reports))
    assert res.returncode == 0, "the same report (same provenance) publishes again: " + res.stderr
    other = tmp_path / "elsewhere" / rendered.name
    shutil.copytree(rendered, other)
    prov = json.loads((other / "provenance.json").read_text())
    prov["timestamp_utc"] = "2026-11-29T23:59:59+00:00"
    (other / "provenance.json").write_text(json.dumps(prov))
    before = (reports / rendered.name / "provenance.json").read_text()
    res = cli("publish", str(other), "--reports", str(reports))
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "different report" in res.stderr and "--force" in res.stderr
    assert (reports / rendered.name / "provenance.json").read_text() == before
    res = cli("publish", str(other), "--reports", str(reports), "--force")
    assert res.returncode == 0, res.stderr
    assert json.loads((reports / rendered.name / "provenance.json").read_text()) == prov
    assert "2026-11-29 23:59" in (reports / "README.md").read_text()


def test_publish_refuses_a_store_and_a_missing_folder(cli, store_root, tmp_path):
    sweep = store.find_sweep(store_root, "roofline")
    for target, said in ((sweep, "results store"), (tmp_path / "nope", "not a folder")):
        res = cli("publish", str(target), "--reports", str(tmp_path / "reports"))
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and said in res.stderr
    assert not (tmp_path / "reports").exists()


def test_publish_is_whole_or_absent(monkeypatch, store_root, tmp_path):
    rendered = _rendered_with_tools(store_root)
    reports = tmp_path / "reports"
    dest = publish.publish(rendered, reports)
    before = {f: (dest / f).read_bytes() for f in _files(dest)}
    (rendered / "FINDINGS.md").write_text("# Findings, revised\n")
    copied, copy = [], shutil.copyfile

    def failing_copy(src, dst):  # the second file of the new copy fails
        if copied:
            raise OSError("disk full")
        copied.append(dst)
        copy(src, dst)

    monkeypatch.setattr(publish.shutil, "copyfile", failing_copy)
    with pytest.raises(OSError):
        publish.publish(rendered, reports)
    assert {f: (dest / f).read_bytes() for f in _files(dest)} == before
    assert {p.name for p in reports.iterdir()} == {"README.md", dest.name}, "no temporary folder is left"


def test_index_only_and_headline_rule(cli, tmp_path):
    res = cli("publish", "--index-only", "--reports", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "No report is published yet." in (tmp_path / "README.md").read_text()
    res = cli("publish", "--reports", str(tmp_path))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    base = {"component": "c", "status": "ok", "peer": False, "M": 1, "state_dtype": "bf16", "point_axes": "M,state_dtype",
            "bytes": 100, "ms_p50": 0.001, "gbps": 100.0, "roofline_fraction": 0.5, "noisy": False}
    rows = pd.DataFrame([
        {**base, "variant": "small_fast"},
        {**base, "variant": "big_slow", "M": 8, "bytes": 800, "ms_p50": 0.010},
        {**base, "variant": "big_fast", "M": 8, "bytes": 800, "ms_p50": 0.008, "gbps": 100.0},
        {**base, "variant": "peer_faster", "M": 8, "bytes": 800, "ms_p50": 0.004, "peer": True},
        {**base, "variant": "failed_faster", "M": 8, "bytes": 800, "ms_p50": float("nan"), "status": "failed"},
        {**base, "variant": "bigger_failed", "M": 64, "bytes": 6400, "ms_p50": float("nan"), "status": "failed"},
    ])
    (head,) = publish.headlines(rows)
    assert head["variant"] == "big_fast" and head["point"] == "M=8 state_dtype=bf16" and head["us"] == pytest.approx(8.0)
