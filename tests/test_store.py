"""The store writes atomically and loads every job with its provenance."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness import store


def _row(**over):
    row = {c: None for c in store.ROW_COLUMNS}
    row.update(sweep="s", job="0", component="c", variant="v", peer=False, backend="cpu", status="ok",
               reason="", ms_p50=1.0, bytes=10, noisy=False)
    row.update(over)
    return row


def _sweep(tmp_path):
    sweep = tmp_path / "2026-01-01_00-00-00_s"
    sweep.mkdir()
    store.atomic_write_json(sweep / "provenance.json", {"commit": "abc", "dirty": False, "device_short": "cpu"})
    return sweep


def test_write_and_load(tmp_path):
    sweep = _sweep(tmp_path)
    store.write_job(sweep / "0", [_row(), _row(variant="w", status="skipped", reason="why")], {"overrides": ["M=8"]})
    store.write_job(sweep / "1", [_row(job="1")], {"overrides": ["M=16"]})
    df = store.load(tmp_path)
    assert len(df) == 3
    assert list(df["job"]) == ["0", "0", "1"]
    assert set(df["commit"]) == {"abc"}
    assert list(df["overrides"]) == ["M=8", "M=8", "M=16"]
    assert not list(tmp_path.rglob(".rows.*")), "no temporary files left behind"


def test_bad_rows_write_nothing(tmp_path):
    sweep = _sweep(tmp_path)
    bad = _row()
    del bad["ms_p50"]
    with pytest.raises(ValueError, match="lacks columns"):
        store.write_job(sweep / "0", [bad], {})
    with pytest.raises(ValueError, match="status"):
        store.write_job(sweep / "0", [_row(status="maybe")], {})
    assert not (sweep / "0" / "rows.parquet").exists() and not (sweep / "0" / "meta.json").exists()


def test_atomic_json_replaces_whole_file(tmp_path):
    p = tmp_path / "x.json"
    store.atomic_write_json(p, {"a": 1})
    store.atomic_write_json(p, {"b": np.float64(2.5)})
    assert json.loads(p.read_text()) == {"b": 2.5}
    assert [q.name for q in tmp_path.iterdir()] == ["x.json"]


def test_find_sweep(tmp_path):
    sweep = _sweep(tmp_path)
    empty = tmp_path / "2026-01-02_00-00-00_e"  # newer, but every job failed before writing rows
    empty.mkdir()
    store.atomic_write_json(empty / "provenance.json", {})
    with pytest.raises(FileNotFoundError):
        store.find_sweep(tmp_path, "latest")
    store.write_job(sweep / "0", [_row()], {})
    assert store.find_sweep(tmp_path, "latest") == sweep
    assert store.find_sweep(tmp_path, "s").name.endswith("_s")
    with pytest.raises(FileNotFoundError, match="allowed: latest, s"):
        store.find_sweep(tmp_path, "other")


def test_a_version_1_published_table_gets_its_point_axes():
    """Rows published before schema_version existed (a committed H200 report) are read with the
    point axes their writer put after the fixed columns."""
    from harness import store
    from harness.fuel import REPO_ROOT

    df = store.read_rows_table(REPO_ROOT / "reports" / "2026-11-29-kda_decode_step-h200-163454" / "rows.csv")
    assert set(df["schema_version"]) == {1} and store.point_axes(df) == ["M", "state_dtype"]
    df = store.read_rows_table(REPO_ROOT / "reports" / "2026-11-29-roofline-h200" / "rows.csv")
    assert store.point_axes(df) == ["copy_mib"]
