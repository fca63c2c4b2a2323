"""The stop rule, the statistics kept, cache modes and per-launch times (the comparison
helper's tests are in test_verify.py)."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import pytest

from harness import timing


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


class _FakeCuda:
    """Just enough of CuPy and a backend for time_cuda: events that log their records, a stream,
    an elapsed time of 1 ms a sample; everything enqueued goes to ``log``."""

    def __init__(self, log):
        self.log = log
        fake = self

        class Event:
            def record(self, stream):
                fake.log.append("record")

            def synchronize(self):
                fake.log.append("sync")

        self.cuda = SimpleNamespace(Event=Event, get_elapsed_time=lambda s, e: 1.0)
        self.stream = SimpleNamespace(synchronize=lambda: None)


class _FakeHold:
    def __init__(self, log, expire=False):
        self.log, self.expire = log, expire

    def hold(self):
        self.log.append("hold")

    def release(self):
        self.log.append("release")

    def timed_out(self):
        return self.expire


@pytest.mark.parametrize("hold", [False, True], ids=["plain", "held"])
def test_a_held_batch_is_enqueued_whole_behind_the_hold(hold):
    """timing.hold: every batch of BATCH repetitions is enqueued between the hold and its release,
    and synchronized only after the release (else the GPU would wait on the host inside a sample);
    the rows say so by their clock. Without hold nothing holds the stream."""
    log = []
    cp = _FakeCuda(log)
    backend = SimpleNamespace(cp=cp, stream=cp.stream, _attnbench_host_hold=_FakeHold(log))
    res = timing.time_cuda([lambda: log.append("step")], backend, conf(hold=hold, min_reps=20, max_reps=20), "warm")
    assert res.n == 20 and res.clock == ("cuda-events-held" if hold else "cuda-events")
    first = next(i for i, x in enumerate(log) if x != "step")
    assert first == 1 and log[0] == "step"                 # the warm-up (1 step) is never held
    timed = log[first:]
    batches = [list(g) for is_sync, g in itertools.groupby(timed, lambda x: x == "sync") if not is_sync]
    assert len(batches) == 2
    for b in batches:
        body = ["record", "step", "record"] * timing.BATCH
        assert b == (["hold", *body, "release"] if hold else body)


def test_an_expired_hold_drops_its_batch_and_times_the_step_unheld(caplog):
    """A hold that gave up before the host released it (the host took over 1 s to enqueue a batch)
    may have let host time into that batch's samples: they are dropped, every later batch runs
    without a hold, and the row's clock says so."""
    log = []
    cp = _FakeCuda(log)
    backend = SimpleNamespace(cp=cp, stream=cp.stream, _attnbench_host_hold=_FakeHold(log, expire=True))
    with caplog.at_level("WARNING", logger="attnbench"):
        res = timing.time_cuda([lambda: log.append("step")], backend, conf(hold=True, min_reps=20, max_reps=20), "warm")
    assert res.clock == "cuda-events" and res.n == 20
    batches = [list(g) for is_sync, g in itertools.groupby(log[1:], lambda x: x == "sync") if not is_sync]
    assert len(batches) == 3                               # the expired batch, then two that count
    body = ["record", "step", "record"] * timing.BATCH
    assert batches[0] == ["hold", *body, "release"] and batches[1] == batches[2] == body
    assert "the hold expired" in caplog.text and "timed unheld" in caplog.text
