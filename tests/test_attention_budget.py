"""The attention budget's write-up pieces: the step priced from a sweep's own rows, the per-layer
curve against the context and where its terms cross, claims over sums of rows, the plots a family
declares, and a headline's run-to-run spread over published runs. Rows are built in memory with
the store's columns (times in ms); nothing here runs a kernel."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import budget, registry, report, store, verdicts
from harness.axes import ConfigError
from synthetic_store import POINT, row as kda_row, sweep

BUDGET_YAML = """
name: tiny
context: 262144
M: [32]
terms:
  - label: reader
    layers: n_dsa_layers
    parts:
      - {component: sparse_mla, point: {selection: grouped}}
  - label: chooser
    strategy: pooled
    layers: n_dsa_layers
    parts:
      - {component: indexer_scan, point: {pooling: pooled}}
      - {component: dsa_expand, point: {}}
context_curve:
  against: reader
  derived_crossover: {tokens: 131072, source: a derivation}
"""


def _row(component, context, ms, variant="ours", M=32, **axes):
    r = {c: None for c in store.ROW_COLUMNS}
    r.update(component=component, variant=variant, peer=False, status="ok", M=M, context=context,
             ms_p20=ms * 0.99, ms_p50=ms, ms_p80=ms * 1.01, noisy=False, bytes=1e6, commit="abc1234",
             device_short="h200", sweep="syn", sweep_dir="results/syn", **axes)
    return r


def _frame(scan_ms):
    """reader 0.100 ms at every context; chooser = scan (given per context) + 0.005 expand."""
    rows = []
    for ctx, ms in scan_ms.items():
        rows.append(_row("sparse_mla", ctx, 0.100, selection="grouped"))
        rows.append(_row("indexer_scan", ctx, ms, pooling="pooled"))
        rows.append(_row("dsa_expand", ctx, 0.005))
    return pd.DataFrame(rows)


@pytest.fixture()
def tiny(tmp_path, geometry):
    path = tmp_path / "tiny.yaml"
    path.write_text(BUDGET_YAML)
    return budget.load_budget(path, geometry)


def test_the_crossing_is_interpolated_in_log_context_between_the_bracketing_points(tiny, geometry):
    # chooser - reader: 65536: 0.045 - 0.1 = -0.055 ms; 131072: 0.125 - 0.1 = +0.025 ms
    rows = _frame({65536: 0.040, 131072: 0.120, 262144: 0.300})
    by_context = budget.curve(tiny, rows, geometry)
    assert sorted(by_context) == [65536, 131072, 262144]
    (x,) = budget.crossovers(tiny, by_context)
    assert x["bracket"] == (65536, 131072)
    t = 55 / (55 + 25)
    assert x["tokens"] == pytest.approx(math.exp(math.log(65536) + t * math.log(2)))
    text = budget.curve_markdown(tiny, by_context, None)
    assert f"near **{x['tokens']:,.0f}**" in text and "131,072 tokens" in text and "a derivation" in text
    # the per-layer table: chooser at 262144 = 300 + 5 µs
    assert "| 32 | 262,144 | 100.0 | 305.0 |" in text


def test_a_term_that_never_crosses_says_on_which_side_it_stays(tiny, geometry):
    by_context = budget.curve(tiny, _frame({65536: 0.200, 262144: 0.400}), geometry)
    (x,) = budget.crossovers(tiny, by_context)
    assert x["tokens"] is None and x["side"].startswith("it costs more at every measured context")


def test_the_step_is_priced_from_the_sweeps_own_rows_when_they_hold_every_part(tiny, geometry):
    rows = _frame({262144: 0.300})
    assert budget.complete(budget.price(tiny, rows, geometry))
    assert not budget.complete(budget.price(tiny, rows[rows["component"] != "dsa_expand"], geometry))
    sentence = budget.finding(tiny, budget.price(tiny, rows, geometry))
    # 11 DSA layers: reader 1100 µs, chooser 11 x 305 = 3355 µs: 4455 µs, the chooser 75% of it
    assert "4,455 µs at M = 32" in sentence and "chooser (75%–75% of it)" in sentence


def test_a_context_curve_against_an_unknown_term_fails_in_one_line(tmp_path, geometry):
    path = tmp_path / "bad.yaml"
    path.write_text(BUDGET_YAML.replace("against: reader", "against: chooser"))
    with pytest.raises(budget.BudgetError, match=r"context_curve.against: 'chooser' is not a term without a strategy; allowed: 'reader'"):
        budget.load_budget(path, geometry)


def _sum_claim(parts, op=">", factor=1.0):
    return {"id": "s", "text": "a sum", "rule": {
        "numerator": [{"component": "kda_decode", "variant": v, "point": dict(POINT)} for v in parts],
        "op": op, "factor": factor,
        "denominator": {"component": "kda_decode", "variant": "fla_fused_recurrent", "point": dict(POINT)}}}


def test_a_sum_of_rows_adds_their_intervals_and_judges_its_own_noise(tmp_path, geometry):
    rows = [kda_row("bulk32k_early", 0.0405, 0.041, 0.0415), kda_row("bulk32k_early_pdl", 0.0019, 0.002, 0.0021,
                                                                      noisy=True, spread=0.1),
            kda_row("fla_fused_recurrent", 0.030, 0.031, 0.032)]
    (claim,) = verdicts.check_claims([_sum_claim(["bulk32k_early", "bulk32k_early_pdl"])], geometry)
    got = verdicts.evaluate_claim(claim, store.load_sweep(sweep(tmp_path, rows)))
    # the sum 0.0424-0.0436 ms (2.8% spread) over 0.030-0.032: 1.325..1.453, all > 1; the noisy part
    # (10% spread of its own) widens the sum by 0.5%
    assert got["verdict"] == "accepted", got["why"]
    assert got["ratio"][0] == pytest.approx(0.0424 / 0.032) and got["ratio"][2] == pytest.approx(0.0436 / 0.030)
    assert "(noisy)" in got["figures"]
    noisy = [kda_row("bulk32k_early", 0.030, 0.041, 0.050, noisy=True, spread=0.5)] + rows[1:]
    got = verdicts.evaluate_claim(claim, store.load_sweep(sweep(tmp_path / "n", noisy)))
    assert got["verdict"] == "inconclusive" and "the sum is noisy" in got["why"]
    missing = verdicts.evaluate_claim(claim, store.load_sweep(sweep(tmp_path / "m", rows[1:])))
    assert missing["verdict"] == "inconclusive" and "no row matches" in missing["why"]


def test_a_sum_needs_the_time_metric(geometry):
    claim = _sum_claim(["bulk32k_early", "bulk32k_early_pdl"])
    claim["rule"]["metric"] = "gbps"
    with pytest.raises(ConfigError, match=r"claims.s.rule.numerator: a sum of rows needs metric us, not 'gbps'; allowed: us"):
        verdicts.check_claims([claim], geometry)


def test_a_family_declares_its_plots_and_a_pin_the_rows_lack_falls_back(tmp_path):
    rows = pd.DataFrame([kda_row(v, ms * 0.99, ms, ms * 1.01, M=M, bytes=2e6 * M)
                         for v in ("bulk32k_early", "fla_fused_recurrent") for M, ms in ((8, 0.012), (32, 0.036))])
    got = report.component_plots(rows, "kda_decode", 4000.0, tmp_path, "t")
    declared = registry.get("kda_decode").plots
    assert [p["file"] for p in got] == [f"kda_decode-{i + 1}.png" for i in range(len(declared))]
    assert all((tmp_path / p["file"]).stat().st_size > 0 for p in got)
    # sparse_mla pins context 262144: rows at 65536 only leave its M plot out
    mla = rows.assign(component="sparse_mla", context=65536, selection="grouped", latent_dtype="bf16", page_size=64)
    plot = registry.get("sparse_mla").plots[0]
    assert not report.plot_declared(plot, mla, "sparse_mla", None, tmp_path / "x.png", "t")


def test_a_plot_naming_an_axis_its_component_lacks_is_refused():
    comp = registry.get("kda_decode")
    import dataclasses

    bad = dataclasses.replace(comp, name="kda_bad_plot", plots=(registry.Plot(x="context"),))
    with pytest.raises(ValueError, match=r"plots\[0\]: axis 'context' is not one of its axes \(M, state_dtype\)"):
        registry.register(bad)


def test_the_headline_states_its_spread_across_published_runs():
    here = pd.DataFrame([kda_row("bulk32k_early", 0.035, 0.036, 0.037, sweep_dir="results/now", device_short="h200")])
    here["M"] = here["M"].astype("int64")  # a stored axis comes back as a NumPy integer
    published = pd.DataFrame([kda_row("bulk32k_early", 0.033, 0.034, 0.035, sweep_dir="results/a", device_short="h200"),
                              kda_row("bulk32k_early", 0.037, 0.038, 0.039, sweep_dir="results/b", device_short="h200"),
                              kda_row("bulk32k_early", 0.010, 0.010, 0.010, sweep_dir="results/c", device_short="gb10"),
                              kda_row("bulk32k_early", 0.010, 0.010, 0.010, sweep_dir="results/d", device_short="h200",
                                      chain=1)])
    published["source"] = published["sweep_dir"].str.replace("results/", "reports/")
    published["M"] = published["M"].astype(float)  # a published rows.csv's axis reads back as float
    (line,) = report.headline(here, cpu=False, published=published)
    # the other device and the other chain length are other measurements: only a and b count
    assert "across 2 other published run(s)" in line and "`a`, `b`" in line
    assert "its p50 ran 34.00–38.00 µs, this run +0.0% from their median" in line
    (alone,) = report.headline(here, cpu=False, published=published.iloc[2:])
    assert "no other published run measured that point" in alone


def test_a_components_reproduce_command_lists_the_values_its_jobs_took():
    jobs = [["component=kda_decode", "M=1", "context=65536", "+experiment=attention_budget"],
            ["component=kda_decode", "M=8", "context=65536", "+experiment=attention_budget"],
            ["component=kda_decode", "M=8", "context=65536", "+experiment=attention_budget", "hydra.sweep.dir=x"]]
    assert report.reproduce_command(jobs, skip=["context"]) == \
        "attnbench -m +experiment=attention_budget component=kda_decode M=1,8"
