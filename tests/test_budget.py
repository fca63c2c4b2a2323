"""Where the step goes (harness/budget.py): a budget file's terms priced from published rows: our
fastest verified row per part (never a peer's, never a failed one), times the fuel's layer count;
a part without a row leaves its term open; totals per key-caching strategy; one-line errors."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import budget, store
from harness.fuel import REPO_ROOT


def _rows():
    frames = []
    for rows in sorted((REPO_ROOT / "reports").glob("*/rows.csv")):
        df = store.read_rows_table(rows)
        df["source"] = f"reports/{rows.parent.name}"
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def test_each_term_is_our_fastest_verified_row_times_its_layers(geometry):
    spec = budget.load_budget("decode_step", geometry)
    rows = budget.published_rows(REPO_ROOT / "reports")
    costs = budget.price(spec, rows, geometry)
    raw = _rows()
    kda = raw[(raw["component"] == "kda_decode") & (raw["status"] == "ok") & (~raw["peer"].astype(bool))
              & (raw["M"] == 32) & (raw["state_dtype"] == "bf16")]
    (kda_cost,) = [c for c in costs[32] if c.term.layers == "n_kda_layers"]
    assert kda_cost.layers == geometry.n_kda_layers == 34
    assert math.isclose(kda_cost.per_layer_us, kda["ms_p50"].min() * 1e3)
    assert math.isclose(kda_cost.per_step_us, 34 * kda["ms_p50"].min() * 1e3)
    peers = raw[(raw["component"] == "kda_decode") & raw["peer"].astype(bool)]
    assert kda_cost.parts[0][1]["variant"] not in set(peers["variant"])
    totals = budget.step_totals(spec, costs[32])
    assert set(totals) == {"pooled", "pooled_fp8", "compress", "per_token", "per_token_fp8"}
    common = sum(c.per_step_us for c in costs[32] if c.term.strategy is None)
    for strategy, total in totals.items():
        extra = sum(c.per_step_us for c in costs[32] if c.term.strategy == strategy)
        assert total == pytest.approx(common + extra) or (math.isnan(total) and math.isnan(common + extra))


def test_a_part_without_a_row_leaves_its_term_open(geometry):
    spec = budget.load_budget("decode_step", geometry)
    rows = budget.published_rows(REPO_ROOT / "reports")
    rows = rows[rows["component"] != "dsa_topk"]
    costs = budget.price(spec, rows, geometry)
    for c in costs[32]:
        if any(p.component == "dsa_topk" for p in c.term.parts):
            assert math.isnan(c.per_step_us), c.term.label
        else:
            assert not math.isnan(c.per_step_us), c.term.label
    text = budget.markdown(spec, costs, None)
    assert "dsa_topk: not measured" in text and "open (a part is not measured at M = 32)" in text


def test_failed_rows_never_price_a_term(geometry):
    rows = budget.published_rows(REPO_ROOT / "reports")
    part = budget.Part("kda_decode", {"state_dtype": "bf16"})
    best = budget.pick(rows, part, 32, 262144)
    faster = rows.iloc[[0]].copy()
    faster[["component", "variant", "M", "state_dtype", "status", "peer", "ms_p50"]] = \
        ["kda_decode", "broken", 32, "bf16", "failed", False, best["us"] / 1e3 / 10]
    assert budget.pick(pd.concat([rows, faster]), part, 32, 262144)["variant"] == best["variant"]


def test_budget_cli_and_its_errors(cli, tmp_path):
    res = cli("budget", "--out", str(tmp_path / "b"), "--moe-us", "1000")
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "b" / "README.md").read_text()
    assert "## Where the step goes" in text and "1,000.0 µs per step (given on the command line)" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text("terms:\n  - {label: x, layers: n_moe_layers, parts: [{component: kda_decode}]}\n")
    res = cli("budget", str(bad))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "terms[0].layers: 'n_moe_layers'" in lines[0], res.stderr


def test_a_write_up_whose_experiment_names_a_budget_prices_the_step_from_published_rows(cli, tmp_path, geometry):
    """The README's main job (quickstart names decode_step): on a CPU machine its write-up still
    carries Where the step goes, priced from the published H200 rows, with the plot."""
    root, out = tmp_path / "store", tmp_path / "reports"
    res = cli("-m", "component=roofline", "copy_mib=1", "backend=cpu", "timing=quick", "step_budget=decode_step",
              f"store.root={root}")
    assert res.returncode == 0, res.stderr
    res = cli("report", "latest", "--root", str(root), "--out", str(out))
    assert res.returncode == 0, res.stderr
    (folder,) = list(out.iterdir())
    text = (folder / "README.md").read_text()
    assert "## Where the step goes (decode_step, context 262,144)" in text
    spec = budget.load_budget("decode_step", geometry)
    costs = budget.price(spec, budget.on_device(budget.published_rows(REPO_ROOT / "reports"), spec.device), geometry)
    kda = next(c for c in costs[32] if c.term.layers == "n_kda_layers")
    assert f"| {kda.per_step_us:,.1f} |" in text
    assert (folder / "budget-decode_step.png").is_file()


def test_a_removed_variants_row_never_prices_a_term(geometry):
    """A published row of a variant the registry no longer has (its report keeps it) is dropped
    before pricing: a reader could not run it. A component the registry does not know keeps its
    rows."""
    rows = budget.published_rows(REPO_ROOT / "reports")
    part = budget.Part("kda_decode", {"state_dtype": "bf16"})
    best = budget.pick(rows, part, 32, 262144)
    gone = rows.iloc[[0, 0]].copy()
    gone[["component", "variant", "M", "state_dtype", "status", "peer", "ms_p50"]] = \
        ["kda_decode", "removed_design", 32, "bf16", "ok", False, best["us"] / 1e3 / 10]
    gone.iloc[1, gone.columns.get_loc("component")] = "not_a_registered_component"
    both = pd.concat([rows, gone])
    assert budget.pick(both, part, 32, 262144)["variant"] == "removed_design"   # pick itself takes any row
    kept = budget.drop_removed(both)
    assert budget.pick(kept, part, 32, 262144)["variant"] == best["variant"]
    assert (kept["component"] == "not_a_registered_component").sum() == 1
    assert len(budget.drop_removed(both, variants={})) == len(both)


def test_a_budget_is_priced_from_its_cards_rows_only(geometry, tmp_path, cli):
    """decode_step names the H200: a faster row measured on another card (an H100's) never prices a
    term of it, so the step is one card's; --device any lifts the cut, a bad device key is one line."""
    spec = budget.load_budget("decode_step", geometry)
    assert spec.device == "h200"
    rows = budget.published_rows(REPO_ROOT / "reports")
    part = budget.Part("kda_decode", {"state_dtype": "bf16"})
    best = budget.pick(budget.on_device(rows, spec.device), part, 32, 262144)
    other = rows.iloc[[0]].copy()
    other[["component", "variant", "M", "state_dtype", "status", "peer", "ms_p50", "device_short", "source"]] = \
        ["kda_decode", best["variant"], 32, "bf16", "ok", False, best["us"] / 1e3 / 10, "h100", "reports/elsewhere"]
    both = pd.concat([rows, other])
    assert budget.pick(both, part, 32, 262144)["device"] == "h100"          # pick alone takes any card
    on_card = budget.on_device(both, spec.device)
    assert budget.pick(on_card, part, 32, 262144)["us"] == pytest.approx(best["us"])
    assert set(on_card["device_short"].astype(str).str.lower()) == {"h200"}
    text = budget.render(spec, both, geometry, tmp_path)
    assert "reports/elsewhere" not in text and "measured on the h200" in text
    assert len(budget.on_device(both, None)) == len(both)
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: 7\nterms:\n  - {label: x, layers: n_kda_layers, parts: [{component: kda_decode}]}\n")
    res = cli("budget", str(bad))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].count("device: 7") == 1, res.stderr
    res = cli("budget", "--device", "any")
    assert res.returncode == 0 and "measured on the" not in res.stdout, res.stderr
