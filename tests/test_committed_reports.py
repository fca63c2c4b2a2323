"""The committed reports/ holds published reports only: each folder has what a reader needs and no
raw store, every ok row of its rows.csv appears in its README, and the index is current.
(Rendering from a store is tested on the small fixtures, tests/test_publish.py.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness import publish

FOLDERS = publish.published(publish.REPORTS)


def test_reports_folder_holds_published_reports_only():
    assert len(FOLDERS) > 0
    others = sorted(p.name for p in publish.REPORTS.iterdir()
                    if p not in FOLDERS and p.name not in (*publish.NOT_REPORTS, publish.INDEX))
    assert others == [], "every folder of reports/ is a published report (README.md, rows.csv, provenance.json)"


def test_the_committed_step_budget_is_what_the_reports_give(tmp_path):
    """reports/budget/README.md is generated from the published rows (attnbench budget): a report
    published since, or a budget file changed, makes it stale."""
    from harness import budget
    from harness.fuel import load_fuel

    geometry = load_fuel()
    spec = budget.load_budget("decode_step", geometry)
    budget.render(spec, budget.priced_rows([publish.REPORTS]), geometry, tmp_path)
    committed = publish.REPORTS / publish.BUDGET / "README.md"
    assert committed.read_text() == (tmp_path / "README.md").read_text(), \
        "stale: run python3 -m harness budget --out reports/budget"
    assert (publish.REPORTS / publish.BUDGET / f"{spec.name}.png").is_file()


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_published_report_is_complete_and_its_rows_are_in_its_readme(folder):
    for name in publish.REQUIRED:
        assert (folder / name).is_file(), f"{folder.name} lacks {name}"
    raw = [p.relative_to(folder).as_posix() for p in folder.rglob("*")
           if p.name in publish.STORE_DIRS or (p.is_file() and publish.is_store_file(p.relative_to(folder)))]
    assert raw == [], f"{folder.name} holds store or render files"
    text = (folder / "README.md").read_text()
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["backend"] == "cuda" and prov["commit"] != "unknown"
    # how to reproduce it: the commit and the sweep's command line
    assert prov["commit"] in text and f"`attnbench {prov['argv']}`" in text
    rows = pd.read_csv(folder / "rows.csv")
    ok = rows[rows["status"] == "ok"]
    assert len(ok) > 0
    for ms in ok["ms_p50"]:
        assert f"{ms * 1e3:.2f}" in text


def test_index_is_current():
    committed = (publish.REPORTS / publish.INDEX).read_text()
    assert committed == publish.index_markdown(publish.REPORTS), (
        "reports/README.md is stale: regenerate it with python3 -m harness publish --index-only")
    for folder in FOLDERS:
        assert f"]({folder.name}/README.md)" in committed
