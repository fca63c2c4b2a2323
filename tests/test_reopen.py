"""Reopen conditions: recorded when a write-up is rendered, checked against the current fuel and
newer runs (another driver, a moved roofline, a changed kernel source), shown in the index."""

from __future__ import annotations

import json

from harness import publish, reopen, report, store
from harness.fuel import load_fuel
from synthetic_store import FIXTURES, row, sweep

ROWS = [row("bulk32k_early_pdl", 0.034, 0.035, 0.036, source_sha="aaaa"),
        row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="bbbb")]


def _roof(gbps):
    """The fixture store's roofline.json with another figure."""
    return {**store.read_roofline(store.sweep_dirs(FIXTURES)[0]), "gbps": gbps, "variant": "copy_v16"}


def _published(tmp_path, fuel_text=None):
    """A synthetic sweep rendered and published into its own reports folder; (reports, store root)."""
    root = tmp_path / "store"
    s = sweep(root, ROWS, name="kda", stamp="2026-12-01_10-00-00")
    store.write_roofline(s, _roof(4000.0))
    folder = report.render_sweep(s, tmp_path / "rendered").parent
    reports = tmp_path / "reports"
    publish.publish(folder, reports)
    return reports, root, reports / folder.name


def _fuel(tmp_path, fuel_text, old, new):
    assert old in fuel_text
    path = tmp_path / "attention.yaml"
    path.write_text(fuel_text.replace(old, new))
    return load_fuel(path)


def test_a_write_up_records_its_conditions_and_says_them(tmp_path, geometry):
    _, _, folder = _published(tmp_path)
    conds = json.loads((folder / reopen.REOPEN).read_text())["conditions"]
    kinds = {c["kind"]: c for c in conds}
    assert kinds["fuel_geometry"]["geometry_sha256"] == reopen.geometry_sha256(geometry)
    assert kinds["fuel_geometry"]["established"]["indexer.key_caching"] is False
    assert kinds["software"]["driver_version"] == store.read_provenance(store.sweep_dirs(tmp_path / "store")[0])["driver_version"]
    assert kinds["copy_bandwidth"] == {"kind": "copy_bandwidth", "gbps": 4000.0, "fraction": 0.05, "variant": "copy_v16"}
    assert kinds["kernel_sources"]["sources"] == {"kda_decode/bulk32k_early": "bbbb", "kda_decode/bulk32k_early_pdl": "aaaa"}
    text = (folder / "README.md").read_text()
    assert "## Reopen if" in text and "more than ±5% from 4000 GB/s" in text
    assert reopen.check(folder, geometry)["reasons"] == []


def test_the_fuel_reopens_on_a_changed_value_or_a_flipped_flag_not_on_a_comment(tmp_path, geometry, fuel_text):
    _, _, folder = _published(tmp_path)
    comment = _fuel(tmp_path, fuel_text, "  key_caching:\n", "  # a comment moves the file hash, not the values\n  key_caching:\n")
    assert reopen.check(folder, comment)["reasons"] == []
    flipped = _fuel(tmp_path, fuel_text, "    established: false\n    alternatives: [pooled, per_token]\n",
                    "    established: true\n")
    reasons = reopen.check(folder, flipped)["reasons"]
    assert reasons == ["fuel fact indexer.key_caching is now established (was open)"]
    value = _fuel(tmp_path, fuel_text, "  key_caching:\n    value: pooled", "  key_caching:\n    value: per_token")
    (reason,) = reopen.check(folder, value)["reasons"]
    assert reason.startswith("fuel geometry changed (values sha256 ")


def test_newer_runs_reopen_on_software_bandwidth_or_source_and_older_ones_do_not(tmp_path, geometry):
    _, root, folder = _published(tmp_path)
    base = store.read_provenance(store.sweep_dirs(root)[0])
    newer = sweep(root, [row("bulk32k_early_pdl", 0.034, 0.035, 0.036, source_sha="cccc"), ROWS[1]],
                  name="kda", stamp="2026-12-02_10-00-00", driver_version="590.1")
    store.write_roofline(newer, _roof(4300.0))  # +7.5%
    older = sweep(root, [row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="dddd")], name="kda",
                  stamp="2026-11-30_10-00-00", driver_version="1.0")
    other_device = sweep(root, [row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="eeee")], name="kda",
                         stamp="2026-12-03_10-00-00", device_short="b200")
    reasons = reopen.check(folder, geometry, [older, newer, other_device])["reasons"]
    run = f"{newer.name} at c0ffee0"
    assert reasons == [f"driver_version {base['driver_version']} → 590.1 ({run})",
                       f"copy bandwidth 4000 → 4300 GB/s (+7.5%, more than ±5%; {run})",
                       f"kda_decode/bulk32k_early_pdl source aaaa → cccc ({run})"]
    store.write_roofline(newer, _roof(4100.0))  # +2.5%: within the fraction
    assert not any("bandwidth" in r for r in reopen.check(folder, geometry, [newer])["reasons"])


def test_reopen_check_lists_the_reopened_and_the_index_shows_the_fuels_verdict(capsys, tmp_path, fuel_text):
    from harness import cli

    reports, root, folder = _published(tmp_path)
    sweep(root, [row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="ffff")], name="kda", stamp="2026-12-02_10-00-00")
    cli.main(["reopen-check", "--reports", str(reports), "--store", str(root)])
    out = capsys.readouterr().out
    assert out.startswith("1 of 1 published write-up(s) reopened")
    assert f"| `{folder.name}` | **reopened** | kda_decode/bulk32k_early source bbbb → ffff" in out
    assert f"]({folder.name}/README.md)" in publish.index_markdown(reports)
    assert "| no | [" in publish.index_markdown(reports)  # the committed fuel is the one it was measured with
    assert (reports / folder.name / reopen.REOPEN).is_file()  # published with the write-up


def test_a_folder_published_without_reopen_json_gets_derived_conditions(tmp_path, geometry):
    _, _, folder = _published(tmp_path)
    (folder / reopen.REOPEN).unlink()
    conds, own = reopen.recorded(folder, geometry)
    assert not own and {c["kind"] for c in conds} == {"fuel_geometry", "software", "copy_bandwidth", "kernel_sources"}
    prov = json.loads((folder / "provenance.json").read_text())
    prov["fuel_sha256"] = "0" * 64  # measured with another fuel file: only its hash is known
    (folder / "provenance.json").write_text(json.dumps(prov))
    assert reopen.check(folder, geometry)["reasons"] == [
        f"fuel file changed (sha256 000000000000 → {geometry.sha256[:12]}; its fact values were not recorded)"]


def test_a_cpu_sweep_records_no_driver_but_still_reopens_on_a_changed_source(tmp_path, geometry):
    cpu = dict(device_short="cpu", driver_version=None, cuda_driver_version=None, cuda_runtime_version=None)
    root = tmp_path / "store"
    s = sweep(root, ROWS, name="kda", stamp="2026-12-01_10-00-00", **cpu)
    conds = reopen.conditions(store.read_provenance(s), None, store.load_sweep(s), geometry)
    assert {c["kind"] for c in conds} == {"fuel_geometry", "kernel_sources"}
    folder = report.render_sweep(s, tmp_path / "rendered").parent
    newer = sweep(root, [row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="9999")], name="kda",
                  stamp="2026-12-02_10-00-00", **cpu)
    assert reopen.check(folder, geometry, [newer])["reasons"] == [
        f"kda_decode/bulk32k_early source bbbb → 9999 ({newer.name} at c0ffee0)"]
