"""The stop rule, the statistics kept, and the comparison helper."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import numpy as np
import pytest

from harness import timing
from harness.verify import compare, compare_all


def conf(**over):
    base = dict(warmup=1, min_reps=10, max_reps=200, min_time_ms=0.0, max_noise=0.05, timeout_s=10.0,
                cache="auto", graph=False)
    base.update(over)
    return SimpleNamespace(**base)


def test_summary_statistics():
    p50, p20, p80, mn, spread = timing.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (p50, mn) == (3.0, 1.0) and p20 == pytest.approx(1.8) and p80 == pytest.approx(4.2)
    assert spread == pytest.approx((4.2 - 1.8) / 3.0)


def test_steady_step_converges():
    res = timing.time_host(lambda: time.sleep(0.002), conf())
    assert res.stop_reason == "converged" and not res.noisy
    assert res.n >= 10 and 1.9 <= res.ms_p50 <= 10


def test_noisy_step_is_flagged_not_hidden():
    durations = itertools.cycle([0.001, 0.004])
    res = timing.time_host(lambda: time.sleep(next(durations)), conf(max_reps=40))
    assert res.noisy and res.stop_reason == "max_reps" and res.n == 40


def test_timeout_stops_the_loop_and_flags_too_few_reps():
    res = timing.time_host(lambda: time.sleep(0.01), conf(min_reps=10000, max_reps=100000, timeout_s=0.2))
    assert res.stop_reason == "timeout" and res.n < 100 and res.noisy


def test_max_reps_is_exact():
    res = timing.time_host(lambda: None, conf(min_reps=1, max_reps=15, max_noise=0.0))
    assert res.n == 15


def test_min_time_keeps_repeating():
    res = timing.time_host(lambda: time.sleep(0.001), conf(min_reps=1, min_time_ms=50.0))
    assert sum(res.samples_ms) >= 50.0


def test_cache_mode_choice():
    l2 = 60 << 20
    assert timing.choose_cache_mode("auto", 8 << 20, l2) == "rotate"
    assert timing.choose_cache_mode("auto", 256 << 20, l2) == "flush"
    assert timing.choose_cache_mode("auto", 31 << 20, l2) == "flush"   # over half the L2
    assert timing.choose_cache_mode("warm", 8 << 20, l2) == "warm"
    for fp in (2 << 20, 3 << 20, 8 << 20, 30 << 20):
        assert timing.rotation_sets(fp, l2) * fp >= 2 * l2
    # A footprint so small that the capped rotation cannot cover 2x L2 falls back to flushing.
    assert timing.choose_cache_mode("auto", 1 << 20, l2) == "flush"


def test_kda_footprint_counts_the_state_once(geometry):
    from kernels.kda_decode import spec

    point = {"M": 4, "state_dtype": "bf16"}
    state = 4 * 64 * 128 * 128 * 2
    assert spec.bytes_moved(geometry, point) - spec.footprint(geometry, point) == state


def test_compare_exact_and_unwritten():
    ref = np.arange(12, dtype=np.uint32)
    assert compare("x", ref.copy(), ref, 0.0).ok
    bad = ref.copy()
    bad[5] = 99
    c = compare("x", bad, ref, 0.0)
    assert not c.ok and c.mismatches == 1 and c.first_bad == ((5,),)
    f = np.linspace(1, 2, 10)
    poisoned = f.copy()
    poisoned[3] = np.nan
    c = compare("o", poisoned, f, 1e-2)
    assert not c.ok and c.unwritten == 1 and "unwritten" in c.describe()


def test_compare_tolerance():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000)
    noisy = ref * (1 + 1e-3 * rng.standard_normal(1000))
    c = compare("o", noisy, ref, 1e-2)
    assert c.ok and 1e-4 < c.rel_err < 2e-3
    assert not compare("o", noisy, ref, 1e-5).ok
    assert not compare("o", noisy[:10], ref, 1e-2).ok


def test_compare_catches_a_small_unwritten_region():
    """An in-place state whose last slice was never written keeps plausible initial values: the
    norm-wise error stays under tolerance at large sizes, the element check must still fail."""
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1_000_000)
    out = ref.copy()
    out[-500:] = rng.standard_normal(500)  # stale values in 0.05% of the elements
    c = compare("state", out, ref, 1e-1)
    assert c.rel_err < 1e-1 and c.mismatches > 0 and not c.ok


def test_per_launch_divides_every_time_and_keeps_the_spread():
    conf = SimpleNamespace(warmup=0, min_reps=3, max_reps=3, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0)
    whole = timing._result([30.0, 33.0, 36.0], "max_reps", conf, "host", "host", False)
    per = timing.per_launch(whole, 3)
    assert per.chain == 3 and whole.chain == 1
    assert per.samples_ms == pytest.approx((10.0, 11.0, 12.0))
    assert (per.ms_p50, per.ms_min) == pytest.approx((whole.ms_p50 / 3, 10.0))
    assert per.ms_p20 == pytest.approx(whole.ms_p20 / 3) and per.ms_p80 == pytest.approx(whole.ms_p80 / 3)
    assert per.spread == whole.spread and per.n == 3 and per.noisy == whole.noisy
    assert timing.per_launch(whole, 1) is whole


def test_compare_names_the_first_bad_elements_in_order_across_scan_chunks():
    """The first bad indices come from a chunked scan (an all-NaN output must not list every
    index); bad elements on both sides of a chunk edge still come back first-to-last."""
    from harness.verify import _first_true

    edge = 1 << 22
    ref = np.ones(edge + 16)
    out = ref.copy()
    out[[edge + 3, 5, edge - 1]] = np.nan
    c = compare("x", out, ref, 1e-3)
    assert c.unwritten == 3 and c.first_bad == ((5,), (edge - 1,), (edge + 3,)) and not c.ok
    import torch

    mask = torch.zeros((2, edge), dtype=torch.bool)
    mask[1, 0] = mask[0, edge - 1] = True
    assert _first_true(mask, 3) == ((0, edge - 1), (1, 0))


def test_compare_all_uses_each_outputs_own_tolerance():
    ref = {"o": np.ones(8), "state": np.ones(8)}
    out = {"o": np.ones(8) * 1.01, "state": np.ones(8) * 1.01, "extra": np.zeros(1)}
    got = compare_all(out, ref, {"o": 2e-2, "state": 1e-3}.__getitem__)
    assert [c.name for c in got] == ["o", "state"] and [c.ok for c in got] == [True, False]
