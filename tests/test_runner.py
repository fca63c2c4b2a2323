"""The measurement path with real and deliberately broken variants: verification gates timing."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from harness import backends, registry, runner

QUICK = SimpleNamespace(warmup=1, min_reps=5, max_reps=20, min_time_ms=0.0, max_noise=0.5,
                        timeout_s=5.0, cache="auto", graph=False)


class _Lazy(registry.Launch):
    """A CPU launch that forgets to write the second half of its output."""

    def __init__(self, inputs):
        self.src = inputs["src"]
        self.dst = np.empty_like(self.src)

    def poison(self):
        self.dst.fill(np.uint32(0xFFFFFFFF))

    def __call__(self):
        half = self.src.size // 2
        self.dst[:half] = self.src[:half]

    def outputs(self):
        return {"dst": self.dst.copy()}


class _NoPoison(_Lazy):
    """Writes everything but skips poisoning: still exact, so it must pass."""

    def __call__(self):
        np.copyto(self.dst, self.src)


def _comp():
    return registry.get("roofline")


def test_every_variant_is_declared_once_with_a_reason():
    for comp in registry.components().values():
        names = comp.variant_names()
        assert len(names) == len(set(names))
        for v in comp.variants:
            assert v.backend in ("cuda", "cpu") and v.why.strip()
        assert comp.variant_names("cpu"), f"{comp.name} has no CPU reference variant"


def test_real_cpu_variant_is_exact(geometry):
    comp = _comp()
    row = runner.measure(comp, comp.variant("numpy_copy"), {"copy_mib": 1}, geometry, backends.CpuBackend(),
                         QUICK, seed=1, roofline={"gbps": 10.0})
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] == 0 and row["n"] >= 5 and row["gbps"] > 0
    assert row["roofline_fraction"] == row["gbps"] / 10.0


def test_unwritten_output_fails_and_is_not_timed(geometry):
    comp = _comp()
    broken = registry.Variant("broken", "cpu", lambda g, p, i, b: _Lazy(i), why="test")
    row = runner.measure(comp, broken, {"copy_mib": 1}, geometry, backends.CpuBackend(), QUICK, 1, None)
    assert row["status"] == "failed"
    assert "differ" in row["reason"] and row["n"] == 0 and np.isnan(row["ms_p50"])


def test_exception_in_variant_is_a_failed_row(geometry):
    comp = _comp()

    def boom(g, p, i, b):
        raise RuntimeError("no such kernel")

    row = runner.measure(comp, registry.Variant("boom", "cpu", boom, why="test"), {"copy_mib": 1}, geometry,
                         backends.CpuBackend(), QUICK, 1, None)
    assert row["status"] == "failed" and "no such kernel" in row["reason"]


def test_unsupported_point_is_skipped_with_reason(geometry):
    comp = _comp()
    v = dataclasses.replace(comp.variant("numpy_copy"), supports=lambda g, p: "not at this size")
    row = runner.measure(comp, v, {"copy_mib": 1}, geometry, backends.CpuBackend(), QUICK, 1, None)
    assert (row["status"], row["reason"]) == ("skipped", "not at this size")


def test_cpu_size_cap_skips(geometry):
    comp = dataclasses.replace(_comp(), cpu_max_bytes=1 << 20)
    row = runner.measure(comp, comp.variant("numpy_copy"), {"copy_mib": 1}, geometry, backends.CpuBackend(),
                         QUICK, 1, None)
    assert row["status"] == "skipped" and "CPU reference backend" in row["reason"]


def test_fresh_inputs_per_seed(geometry):
    comp = _comp()
    a = comp.make_inputs(geometry, {"copy_mib": 1}, np.random.default_rng(1))["src"]
    b = comp.make_inputs(geometry, {"copy_mib": 1}, np.random.default_rng(2))["src"]
    assert not np.array_equal(a, b) and np.all(a != 0)


class _Sleeper(registry.Launch):
    """A CPU launch that copies exactly, takes a known time and logs which launch ran."""

    SECONDS = 0.002

    def __init__(self, inputs, calls: list):
        self.src, self.calls = inputs["src"], calls
        self.dst = np.empty_like(self.src)

    def poison(self):
        self.dst.fill(np.uint32(0xFFFFFFFF))

    def __call__(self):
        import time

        np.copyto(self.dst, self.src)
        self.calls.append(id(self))
        time.sleep(self.SECONDS)

    def outputs(self):
        return {"dst": self.dst.copy()}


def test_chain_runs_distinct_launches_per_sample_and_reports_per_launch(geometry):
    comp = _comp()
    calls: list = []
    built: list = []

    def build(g, p, i, b):
        built.append(_Sleeper(i, calls))
        return built[-1]

    conf = SimpleNamespace(**{**vars(QUICK), "chain": 3, "min_reps": 6, "max_reps": 6})
    row = runner.measure(comp, registry.Variant("sleeper", "cpu", build, why="test"), {"copy_mib": 1},
                         geometry, backends.CpuBackend(), conf, seed=1, roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["chain"] == 3 and len(built) == 3 and len({id(b) for b in built}) == 3
    # One verification call on the first launch, one checked replay of the chain, then warmup +
    # samples run all three in order.
    assert calls[1:4] == [id(b) for b in built]
    timed = calls[4:]
    assert len(timed) == 3 * (conf.warmup + 10) and timed[:3] == [id(b) for b in built]
    assert timed == timed[:3] * (len(timed) // 3)
    # Per launch, not per sample: each launch sleeps 2 ms, a sample of three at least 6 ms.
    assert _Sleeper.SECONDS * 1e3 <= row["ms_p50"] < 3 * _Sleeper.SECONDS * 1e3


def test_chain_zero_is_the_components_layers_per_step(geometry):
    kda = registry.get("kda_decode")
    assert runner.chain_length(SimpleNamespace(chain=0), kda, geometry) == geometry.n_kda_layers == 34
    assert runner.chain_length(SimpleNamespace(chain=5), kda, geometry) == 5
    assert runner.chain_length(QUICK, kda, geometry) == 1  # a config without the field: one launch


def test_replay_without_graph_runs_launches_in_order():
    order: list = []

    class Logged(registry.Launch):
        def __init__(self, i):
            self.i = i

        def poison(self): ...
        def outputs(self): return {}
        def __call__(self): order.append(self.i)

    launches = [Logged(i) for i in range(4)]
    step = runner.replay(launches, backends.CpuBackend(), use_graph=False)
    step()
    step()
    assert order == [0, 1, 2, 3, 0, 1, 2, 3]
    assert runner.replay(launches[:1], backends.CpuBackend(), use_graph=False) is launches[0]


class _SharedCounter(_Sleeper):
    """Launches that share hidden state: only the first call after a poison is right, so one
    launch passes verification but a chain of them is wrong from its second launch on."""

    SECONDS = 0.0

    def __init__(self, inputs, box: dict):
        super().__init__(inputs, [])
        self.box = box

    def poison(self):
        super().poison()
        self.box["calls"] = 0

    def __call__(self):
        self.box["calls"] += 1
        np.copyto(self.dst, self.src if self.box["calls"] == 1 else self.src ^ np.uint32(1))


def test_a_chain_whose_later_launches_are_wrong_fails_before_timing(geometry):
    comp = _comp()
    box: dict = {"calls": 0}
    variant = registry.Variant("shared", "cpu", lambda g, p, i, b: _SharedCounter(i, box), why="test")
    one = runner.measure(comp, variant, {"copy_mib": 1}, geometry, backends.CpuBackend(), QUICK, 1, None)
    assert one["status"] == "ok", one["reason"]  # a single launch is right
    conf = SimpleNamespace(**{**vars(QUICK), "chain": 3})
    row = runner.measure(comp, variant, {"copy_mib": 1}, geometry, backends.CpuBackend(), conf, 1, None)
    assert row["status"] == "failed" and row["n"] == 0 and row["chain"] == 3
    assert "timed replay, launch 2 of 3" in row["reason"]


def test_replay_uses_a_launch_class_own_chaining():
    log: list = []

    class Chained(registry.Launch):
        captures_itself = True

        def __init__(self, i):
            self.i = i

        def poison(self):
            pass

        def outputs(self):
            return {}

        def __call__(self, programmatic=False):
            log.append((self.i, programmatic))

        @classmethod
        def run_many(cls, launches):
            def run():
                for k, ln in enumerate(launches):
                    ln(programmatic=k > 0)
            return run

        @classmethod
        def capture_many(cls, launches):
            return lambda: log.append(("graph", len(launches)))

    launches = [Chained(i) for i in range(3)]
    runner.replay(launches, backends.CpuBackend(), use_graph=False)()
    assert log == [(0, False), (1, True), (2, True)]
    log.clear()
    runner.replay(launches, backends.CpuBackend(), use_graph=True)()
    assert log == [("graph", 3)]


def test_selected_variants_keeps_the_listed_order_on_the_backend():
    comp = registry.get("roofline")
    names = lambda vs: [v.name for v in vs]  # noqa: E731
    assert names(runner.selected_variants(comp, "cuda", "all", ["torch_copy", "copy_v4"])) == ["torch_copy", "copy_v4"]
    assert names(runner.selected_variants(comp, "cpu", "all", ["torch_copy", "numpy_copy"])) == ["numpy_copy"]
    assert names(runner.selected_variants(comp, "cpu", "all")) == ["numpy_copy"]
    assert names(runner.selected_variants(comp, "cuda", "copy_v4")) == ["copy_v4"]


def test_the_ceiling_copy_is_one_plain_launch_whatever_the_sweeps_timing(geometry, tmp_path, monkeypatch):
    """A chained, graphed sweep (roofline_step: chain 34) still measures its ceiling as single plain
    copies: 34 chained 1 GiB copies per sample stalled that sweep on the H200."""
    seen = []
    measure = runner.measure

    def spy(*args, **kwargs):
        row = measure(*args, **kwargs)
        seen.append((row["chain"], row["graph"], row["status"]))
        return row

    monkeypatch.setattr(runner, "measure", spy)
    ctx = runner.JobContext(sweep_dir=tmp_path, job_dir=tmp_path, job="0", overrides=[])
    chained = SimpleNamespace(**{**vars(QUICK), "chain": 34, "graph": True})
    roof = runner.sweep_roofline(ctx, backends.CpuBackend(), geometry, chained)
    assert seen == [(1, False, "ok")]
    assert roof["gbps"] > 0 and (tmp_path / "roofline.json").is_file()


def test_a_launch_note_is_kept_in_the_row(geometry):
    """A launch that says how it ran (fla's convolution says the config it tuned) has that in the
    row's reason, next to any timing note."""
    comp = _comp()
    real = next(v for v in comp.variants if v.name == "numpy_copy")

    def build(geometry, point, inputs, backend):
        launch = real.build(geometry, point, inputs, backend)
        launch.note = "tuned: BD=64"
        return launch

    noted = dataclasses.replace(real, name="noted_copy", build=build)
    row = runner.measure(comp, noted, {"copy_mib": 1}, geometry, backends.CpuBackend(), QUICK, seed=1,
                         roofline=None)
    assert row["status"] == "ok" and "tuned: BD=64" in row["reason"].split("; ")


def test_a_build_that_returns_no_launch_is_a_failed_row(geometry):
    """The Launch contract is a base class, not duck typing: an object that merely looks like a
    launch is refused with a reason naming it."""
    class Lookalike:
        def poison(self): ...
        def __call__(self): ...
        def outputs(self): return {}

    comp = _comp()
    odd = registry.Variant("lookalike", "cpu", lambda g, p, i, b: Lookalike(), why="test")
    row = runner.measure(comp, odd, {"copy_mib": 1}, geometry, backends.CpuBackend(), QUICK, 1, None)
    assert row["status"] == "failed" and "not a harness.registry.Launch" in row["reason"]


def test_replay_does_not_let_a_class_capture_itself_unless_it_says_so():
    """Only a class with captures_itself records its own graph; any other is captured by the
    backend from its run_many step."""
    captured = []

    class Plain(registry.Launch):
        def poison(self): ...
        def outputs(self): return {}
        def __call__(self): captured.append("call")

        @classmethod
        def capture_many(cls, launches):  # must not be used: captures_itself is False
            raise AssertionError("capture_many called")

    backend = SimpleNamespace(capture=lambda run: (lambda: (captured.append("graph"), run())))
    runner.replay([Plain(), Plain()], backend, use_graph=True)()
    assert captured == ["graph", "call", "call"]


def test_a_slow_stage_is_announced_and_a_fast_one_is_not(caplog, monkeypatch):
    import logging
    import time

    from harness import stages

    monkeypatch.setattr(stages, "SLOW_S", 0.2)
    monkeypatch.setattr(stages, "REPEAT_S", 100.0)
    with caplog.at_level(logging.INFO, logger="attnbench"):
        with stages.stage("compiling", "toy/fast"):
            pass
        with stages.stage("compiling", "toy/slow"):
            time.sleep(1.2)
        time.sleep(0.6)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still ")]
    assert len(said) == 1 and said[0].startswith("still compiling toy/slow ("), said
