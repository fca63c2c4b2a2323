"""Computed verdicts: claims as rules over stored rows, decided from the p20-p80 intervals.

Rows are written through ``harness.store`` into small synthetic sweeps of the real kda_decode
component (tests/synthetic_store.py), then loaded back as a report would."""

from __future__ import annotations

import pytest

from harness import report, store, verdicts
from harness.axes import ConfigError
from synthetic_store import POINT, row as _row, sweep


def _sweep(tmp_path, rows, name="syn", claims=None, stamp="2026-12-01_10-00-00"):
    return sweep(tmp_path, rows, name=name, claims=claims, stamp=stamp)


def _claim(op="<=", factor=1.0, num="bulk32k_early_pdl", den="bulk32k_early", **rule):
    r = {"numerator": {"component": "kda_decode", "variant": num, "point": dict(POINT)}, "op": op}
    if "value" in rule:
        r.update(rule)
    else:
        r.update(factor=factor, denominator={"component": "kda_decode", "variant": den, "point": dict(POINT)}, **rule)
    return {"id": "c", "text": "a claim", "rule": r}


def _decide(tmp_path, rows, claim, geometry):
    (checked,) = verdicts.check_claims([claim], geometry)
    return verdicts.evaluate_claim(checked, store.load_sweep(_sweep(tmp_path, rows)))


# A: 0.034-0.036 ms, B: 0.038-0.040 ms: the ratio lies in 0.034/0.040 = 0.85 .. 0.036/0.038 = 0.947.
AB = [_row("bulk32k_early_pdl", 0.034, 0.035, 0.036), _row("bulk32k_early", 0.038, 0.039, 0.040)]


@pytest.mark.parametrize("op,factor,want", [
    ("<=", 0.95, "accepted"),    # the whole range 0.85..0.947 is <= 0.95
    ("<=", 0.84, "rejected"),    # none of it is <= 0.84
    ("<=", 0.90, "inconclusive"),  # the range straddles 0.90, though the p50 ratio 0.897 is below it
    (">=", 0.84, "accepted"),
    (">=", 0.95, "rejected"),
    (">", 0.90, "inconclusive"),
])
def test_the_interval_decides_not_the_medians(tmp_path, geometry, op, factor, want):
    res = _decide(tmp_path, AB, _claim(op, factor), geometry)
    assert res["verdict"] == want, res
    lo, mid, hi = res["ratio"]
    assert lo == pytest.approx(0.034 / 0.040) and hi == pytest.approx(0.036 / 0.038)
    assert mid == pytest.approx(0.035 / 0.039)
    assert "35 µs (34–36" in res["figures"] and "39 µs (38–40" in res["figures"]


@pytest.mark.parametrize("change,why", [
    ({"noisy": True}, "noisy"),
    ({"status": "failed", "reason": "out: rel_err 3e-1"}, "failed (out: rel_err 3e-1)"),
    ({"status": "skipped", "reason": "no such shape"}, "skipped"),
])
def test_a_claim_on_a_noisy_failed_or_skipped_row_is_inconclusive(tmp_path, geometry, change, why):
    rows = [{**AB[0], **change}, AB[1]]
    res = _decide(tmp_path, rows, _claim("<=", 0.95), geometry)  # accepted on clean rows
    assert res["verdict"] == "inconclusive" and why in res["why"] and "bulk32k_early_pdl" in res["why"]


# A noisy peer (p20-p80 0.050-0.080 ms) whose fastest sample took 0.045 ms, against ours at 0.034-0.036.
NOISY_PEER = _row("bulk32k_early", 0.050, 0.060, 0.080, noisy=True, ms_min=0.045)


@pytest.mark.parametrize("op,factor,want", [
    ("<", 1.0, "accepted"),       # 0.036 / 0.045 = 0.8: ours is faster than the peer's fastest launch
    ("<=", 0.85, "accepted"),     # 0.8 <= 0.85
    ("<=", 0.75, "inconclusive"),  # the peer's time is only bounded below: 0 .. 0.8 straddles 0.75
    (">=", 0.5, "inconclusive"),  # a ratio bounded only above (0 .. 0.8) cannot be >= anything
    (">", 0.9, "rejected"),       # no value in 0 .. 0.8 is > 0.9
])
def test_a_noisy_row_decides_only_through_its_fastest_sample(tmp_path, geometry, op, factor, want):
    res = _decide(tmp_path, [AB[0], NOISY_PEER], _claim(op, factor), geometry)
    assert res["verdict"] == want, res
    lo, _, hi = res["ratio"]
    assert lo == 0.0 and hi == pytest.approx(0.036 / 0.045)
    assert "bulk32k_early" in res["why"] and "noisy" in res["why"] and "fastest sample 45 µs" in res["why"]


def test_a_noisy_numerator_is_rejected_by_its_fastest_sample_never_accepted(tmp_path, geometry):
    noisy_ours = {**AB[0], "noisy": True, "ms_min": 0.033}
    assert _decide(tmp_path, [noisy_ours, AB[1]], _claim("<=", 0.80), geometry)["verdict"] == "rejected"  # 0.033 / 0.040 > 0.8
    assert _decide(tmp_path / "b", [noisy_ours, AB[1]], _claim("<=", 5.0), geometry)["verdict"] == "inconclusive"
    # a rate: the fastest sample bounds the rate above; 64e6 B / 0.033 ms = 1939 GB/s
    rate = _claim(">=", num="bulk32k_early_pdl", value=2000.0, metric="gbps")
    assert _decide(tmp_path / "c", [noisy_ours, AB[1]], rate, geometry)["verdict"] == "rejected"
    rate = _claim(">=", num="bulk32k_early_pdl", value=1000.0, metric="gbps")
    assert _decide(tmp_path / "d", [noisy_ours, AB[1]], rate, geometry)["verdict"] == "inconclusive"


def test_a_missing_or_ambiguous_row_is_inconclusive(tmp_path, geometry):
    res = _decide(tmp_path, AB[:1], _claim("<=", 0.95), geometry)
    assert res["verdict"] == "inconclusive" and "no row matches" in res["why"]
    fp32 = _row("bulk32k_early", 0.07, 0.071, 0.072, state_dtype="fp32")
    claim = _claim("<=", 0.95)
    del claim["rule"]["denominator"]["point"]["state_dtype"]
    res = _decide(tmp_path / "b", AB + [fp32], claim, geometry)
    assert res["verdict"] == "inconclusive" and "2 rows match (they differ in state_dtype)" in res["why"]


def test_fastest_is_ours_and_a_value_rule_uses_the_rate_interval(tmp_path, geometry):
    rows = AB + [_row("fla_fused_recurrent", 0.020, 0.021, 0.022)]  # a faster peer is never "fastest"
    claim = _claim(">=", num="fastest", value=0.44, metric="roofline_fraction")
    # bulk32k_early_pdl: 64e6 bytes / 0.036 ms = 1778 GB/s .. / 0.034 ms = 1882 GB/s; over 4000: 0.444..0.471
    res = _decide(tmp_path, rows, claim, geometry)
    assert res["verdict"] == "accepted" and "(= bulk32k_early_pdl)" in res["figures"]
    assert res["ratio"][0] == pytest.approx(64e6 / 0.036e6 / 4000) and res["ratio"][2] == pytest.approx(64e6 / 0.034e6 / 4000)
    claim = _claim(">=", num="fastest", value=1850.0, metric="gbps")
    assert _decide(tmp_path / "b", rows, claim, geometry)["verdict"] == "inconclusive"


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c["rule"]["numerator"].update(component="nope"), "claims.c.rule.numerator.component: unknown value 'nope'; allowed:"),
    (lambda c: c["rule"]["numerator"].update(variant="nope"), "claims.c.rule.numerator.variant: unknown value 'nope' for component kda_decode; allowed: fastest,"),
    (lambda c: c["rule"]["denominator"]["point"].update(context=8), "claims.c.rule.denominator.point.context: unknown axis for component kda_decode; allowed: M, state_dtype"),
    (lambda c: c["rule"]["numerator"]["point"].update(M=0), "claims.c.rule.numerator.point.M: 0 is out of range"),
    (lambda c: c["rule"].update(op="=="), "claims.c.rule.op: unknown value '=='; allowed: <=, <, >=, >"),
    (lambda c: c["rule"].update(metric="tflops"), "claims.c.rule.metric: unknown value 'tflops'"),
    (lambda c: c["rule"].update(value=1.0), "claims.c.rule: give a denominator (with an optional factor) or a value, not both"),
    (lambda c: c["rule"].update(factor=-1), "claims.c.rule.factor: -1 is not a positive number"),
    (lambda c: c["rule"].update(nummerator={}), "claims.c.rule.nummerator: unknown key; allowed:"),
    (lambda c: c.pop("text"), "claims[0].text: missing"),
])
def test_bad_rules_fail_in_one_line(geometry, mutate, message):
    claim = _claim()
    mutate(claim)
    with pytest.raises(ConfigError) as exc:
        verdicts.check_claims([claim], geometry)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_every_experiments_rules_validate(geometry):
    names = [p.stem for p in (verdicts.EXPERIMENTS / "experiment").glob("*.yaml")]
    ruled = {n: verdicts.experiment_claims(n, geometry) for n in names}
    assert all(ruled[n] for n in ("kda_decode", "kda_decode_step", "kda_decode_conv", "sparse_mla", "gather_locality"))


def test_a_bad_rule_stops_the_sweep_before_anything_runs(cli, tmp_path):
    root = tmp_path / "store"
    bad = ("claims=[{id: x, text: y, rule: {numerator: {component: roofline, variant: copy_v17}, "
           "op: '<=', value: 1.0}}]")
    res = cli("backend=cpu", "timing=quick", "copy_mib=1", bad, f"store.root={root}")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "claims.x.rule.numerator.variant: unknown value 'copy_v17' for component roofline" in lines[0]
    assert not root.exists()


def test_the_write_up_shows_the_verdict_computed_from_stored_rules(tmp_path, geometry):
    claims = verdicts.check_claims([_claim("<=", 0.95), {**_claim("<=", 0.90), "id": "tight"}], geometry)
    sweep = _sweep(tmp_path, AB, claims=claims)
    text = report.render_sweep(sweep, tmp_path / "out").read_text()
    assert "**Verdict.** 1 accepted, 0 rejected, 1 inconclusive of 2 claim(s)" in text
    section = text.split("## Verdict")[1]
    assert "stored with the sweep's jobs" in section
    assert "| `c`: a claim | **accepted** | <= 0.95 × denominator |" in section
    assert "| `tight`: a claim | **inconclusive** |" in section and "straddles 0.9" in section


def test_a_write_up_draws_on_another_sweep_and_says_it_is_another_commit(tmp_path, geometry):
    rmw = {**_row("rmw_v16", 0.0351, 0.0352, 0.0353), "component": "roofline_rmw", "point_axes": "copy_mib",
           "copy_mib": 64, "M": None, "state_dtype": None}
    claim = {"id": "vs_rmw", "text": "t", "rule": {
        "numerator": {"component": "kda_decode", "variant": "fastest", "point": dict(POINT)}, "op": ">=",
        "factor": 0.95, "denominator": {"component": "roofline_rmw", "variant": "rmw_v16",
                                        "point": {"copy_mib": 64}, "sweep": "roofline_step"}}}
    sweep = _sweep(tmp_path, AB, claims=verdicts.check_claims([claim], geometry))
    other = _sweep(tmp_path, [rmw], name="roofline_step", stamp="2026-11-29_16-43-15")
    store.write_provenance(other, {**store.read_provenance(other), "commit": "9ed0c6e" * 6})
    alone = report.render_sweep(sweep, tmp_path / "a").read_text()
    assert "in roofline_step: no row matches" in alone
    both = report.render_sweep(sweep, tmp_path / "b", also=[other]).read_text()
    # 0.034 / 0.0353 = 0.963 .. 0.036 / 0.0351 = 1.026: all of it >= 0.95
    assert "| `vs_rmw`: t | **accepted** |" in both
    assert "`roofline_step` measured" in both and "**another commit**" in both
