"""Committed GPU reports stay reproducible: each renders again from its stored rows, and every
p50 in the stored rows appears in the rendered table."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness import report, store
from harness.fuel import REPO_ROOT

SWEEPS = sorted(p.parent for p in (REPO_ROOT / "reports").glob("*/store/*/provenance.json"))


@pytest.mark.parametrize("sweep_dir", SWEEPS, ids=[s.parent.parent.name for s in SWEEPS])
def test_report_renders_from_its_store(sweep_dir, tmp_path):
    readme = report.render_sweep(sweep_dir, tmp_path)
    text = readme.read_text()
    rows = store.load_sweep(sweep_dir)
    prov = json.loads((sweep_dir / "provenance.json").read_text())
    assert prov["backend"] == "cuda" and prov["commit"] != "unknown"
    assert prov["commit"][:12] in text or prov["commit"] in text
    ok = rows[rows["status"] == "ok"]
    assert len(ok) > 0
    for ms in ok["ms_p50"]:
        assert f"{ms * 1e3:.2f}" in text
    committed = pd.read_csv(sweep_dir.parent.parent / "rows.csv")
    # Failed and skipped rows have no time (NaN): compare them by count, the times as sorted lists.
    times = lambda df: sorted(df["ms_p50"].dropna().round(9))  # noqa: E731
    assert times(committed) == times(rows)
    assert committed["ms_p50"].isna().sum() == rows["ms_p50"].isna().sum()
    assert sorted(committed["status"]) == sorted(rows["status"])
