"""A discoverable CLI and clean errors: --help names every verb, --version the commit, a missing +
before experiment= gets a hint, an unwritable store or an invalid-YAML fuel is one line with status
2, a corrupt job is skipped by the loader with a warning naming it, `sweeps` lists stored sweeps."""

from __future__ import annotations

import pytest

from harness import cli as cli_module
from harness import store


def _one_line(res, code=2):
    lines = res.stderr.strip().splitlines()
    assert res.returncode == code and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_help_lists_every_verb_and_version_names_the_commit(cli):
    for args in (["--help"], ["help"]):
        res = cli(*args)
        assert res.returncode == 0, res.stderr
        listed = {ln.split()[0] for ln in res.stdout.split("verbs:")[1].split("running:")[0].splitlines() if ln.strip()}
        assert set(cli_module.SUBCOMMANDS) | {"help"} == listed, res.stdout
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.startswith("attnbench 0.1.0 (commit "), res.stdout


def test_experiment_without_plus_gets_a_hint(cli):
    line = _one_line(cli("experiment=quickstart"))
    assert "write +experiment=quickstart" in line and "allowed: " in line and "quickstart" in line.split("allowed: ")[1]


@pytest.mark.parametrize("root", ["/proc/attnbench", "/dev/null/x"])
def test_an_unwritable_store_root_is_one_line(cli, root):
    line = _one_line(cli("component=roofline", "backend=cpu", f"store.root={root}"))
    assert line == f"attnbench: store.root: {root} cannot be created or written; allowed: a writable directory path"


def test_invalid_yaml_fuel_names_file_and_line(cli, tmp_path):
    bad = tmp_path / "fuel.yaml"
    bad.write_text("schema: 1\nkda:\n  heads: [1, 2\n")
    for args in (["fuel", "check", str(bad)], ["component=roofline", "backend=cpu", f"fuel={bad}"]):
        line = _one_line(cli(*args))
        assert line.startswith(f"attnbench: fuel: {bad} line 4, column 1: invalid YAML"), line


def test_a_corrupt_job_is_skipped_with_a_warning_and_sweeps_lists_the_rest(cli, tmp_path):
    root = tmp_path / "store"
    res = cli("-m", "component=roofline", "copy_mib=1,2", "backend=cpu", "timing=quick", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    (folder / "1" / store.ROWS).write_bytes(b"not a parquet file")
    with pytest.warns(UserWarning, match=rf"store: skipping job {folder / '1'} \(unreadable"):
        rows = store.load(root)
    assert set(rows["job"]) == {"0"}
    res = cli("sweeps", "--root", str(root))
    assert res.returncode == 0, res.stderr
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith(folder.name)]
    assert line.split()[2] == "2/2", line       # both jobs stored under their keys (one unreadable)


def test_a_report_is_whole_or_absent_and_a_partial_sweep_says_how_much_is_stored(cli, tmp_path, monkeypatch):
    import pandas as pd

    from harness import sweep

    root, out = tmp_path / "store", tmp_path / "reports"
    res = cli("-m", "component=roofline", "copy_mib=1,2", "backend=cpu", "timing=quick", f"store.root={root}")
    assert res.returncode == 0, res.stderr
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    # a plan of three jobs of which two are stored: the write-up says so
    plan = sweep.read_plan(folder)
    plan["jobs"].append({"num": 2, "overrides": ["copy_mib=3"], "key": "not-stored"})
    store.atomic_write_json(folder / sweep.PLAN, plan)
    res = cli("report", str(folder), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (report,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert "2 of 3 planned job(s) stored" in (report / "README.md").read_text()
    # a job whose rows lack a column is skipped by the loader, with a warning naming it
    rows = folder / "0" / store.ROWS
    pd.read_parquet(rows).drop(columns=["status", "ms_p50"]).to_parquet(rows)
    with pytest.warns(UserWarning, match=r"rows lack status, ms_p50"):
        assert set(store.load_sweep(folder)["job"]) == {"1"}
    # a render that breaks half-way leaves the folder as it was (no half-written files)
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    monkeypatch.setattr("harness.report.accounting_markdown", lambda g: 1 / 0)
    from harness import report as report_module

    with pytest.raises(ZeroDivisionError):
        report_module.render_sweep(folder, out)
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before
    assert [p.name for p in out.iterdir()] == [report.name]      # no staging folder left behind


def test_report_into_an_unwritable_folder_is_one_line(monkeypatch, capsys, tmp_path):
    """In process (root may write a mode-555 folder, so the refusal is simulated where the render
    writes): status 2 and one line naming the folder."""
    from harness import report, store as store_module

    monkeypatch.setattr(store_module, "find_sweep", lambda root, name: tmp_path / "sweep")

    def refuse(sweep_dir, out_root, also=(), rules_now=False):
        raise PermissionError(13, "Permission denied", str(out_root))

    monkeypatch.setattr(report, "render_sweep", refuse)
    with pytest.raises(SystemExit) as exit_info:
        cli_module.main(["report", "latest", "--out", str(tmp_path / "ro")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert err[0] == f"attnbench: report: cannot write under {tmp_path / 'ro'} (Permission denied); allowed: a writable --out folder"
