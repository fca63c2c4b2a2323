"""The write-up's order and its numbers: the committed H200 fixture rendered, each section in the
order the issue lists, the headline and the geometry checked against the rows and the fuel."""

from __future__ import annotations

import re
import shutil

from harness import report, store
from synthetic_store import FIXTURES, row, sweep

ORDER = ["**Headline**", "**Summary.**", "**Question.**", "**Verdict.**", "## Setup", "## Geometry",
         "## Bytes per stream and streams per memory budget", "## Roofline", "## Results", "## Verdict",
         "## Reopen if", "## Reproduce"]


def test_the_write_up_has_its_sections_in_order_and_its_numbers_from_rows_and_fuel(tmp_path, geometry):
    root = tmp_path / "results"
    shutil.copytree(FIXTURES, root)
    sweep = store.find_sweep(root, "kda_decode_step")
    text = report.render_sweep(sweep, tmp_path / "out").read_text()
    at = [text.index(h) for h in ORDER]
    assert at == sorted(at), "sections out of order"
    # headline: our fastest ok row (fla is a peer) at the largest point, from the stored rows
    rows = store.load_sweep(sweep)
    ours = rows[(rows["status"] == "ok") & ~rows["peer"].astype(bool)]
    big = ours[ours["bytes"] == ours["bytes"].max()]
    best = big.loc[big["ms_p50"].idxmin()]
    head = text.split("**Headline**")[1].split("**Summary.**")[0]
    assert f"`{best['variant']}` at M=32 state_dtype={best['state_dtype']}" in head
    assert f"**{best['ms_p50'] * 1e3:.2f} µs**" in head
    assert f"p20–p80 across repetitions {best['ms_p20'] * 1e3:.2f}–{best['ms_p80'] * 1e3:.2f}" in head
    # across runs: the published H200 reports that measured the same point say how far it moved
    assert "other published run(s) of that point on this device" in head or "no other published run" in head
    # the summary counts the rows by status
    summary = text.split("**Summary.**")[1].split("\n")[0]
    counts = rows["status"].value_counts()
    assert f"in {len(rows)} rows: {counts.get('ok', 0)} ok" in summary
    # geometry: every fact with its source; the open ones say so with their alternatives
    geo = text.split("## Geometry")[1].split("## Bytes per stream")[0]
    # the fixture rows were measured with an earlier fuel file once the fuel changes: it says which
    measured_with = store.read_provenance(sweep)["fuel_sha256"]
    if measured_with == geometry.sha256:
        assert ", the file these rows were\nmeasured with" in geo
    else:
        assert f"**not** the file these rows were measured with (`{measured_with[:16]}`)" in geo
    for key, fact in geometry.facts.items():
        line = next(ln for ln in geo.splitlines() if ln.startswith(f"| `{key}` |"))
        assert fact.source.replace("|", "\\|") in line
        assert ("**open**" in line) == (not fact.established)
    assert re.search(r"\| KDA state, all layers, BF16 \| \d+ MiB \|", text)


def test_next_steps_and_manual_reopen_conditions_come_from_the_experiment(tmp_path):
    rows = [row("bulk32k_early", 0.038, 0.039, 0.040, source_sha="bbbb")]
    s = sweep(tmp_path, rows, meta={"next_steps": ["measure M = 64"], "reopen_if": ["fla changes its kernel"]})
    text = report.render_sweep(s, tmp_path / "out").read_text()
    steps = text.split("## Next steps")[1].split("## Reopen if")[0]
    assert "- measure M = 64" in steps
    assert "- (manual) fla changes its kernel" in text.split("## Reopen if")[1]
    bare = report.render_sweep(sweep(tmp_path / "b", rows), tmp_path / "out2").read_text()
    assert "## Next steps" not in bare
