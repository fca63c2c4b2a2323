"""The kda_decode component end to end on the CPU reference backend: inputs, the definition
reference, the lazy reference variant through the runner, byte counts and the sweep config."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import accounting, backends, registry, runner
from kernels.kda_decode import spec

QUICK = SimpleNamespace(warmup=1, min_reps=3, max_reps=10, min_time_ms=0.0, max_noise=1.0,
                        timeout_s=10.0, cache="auto", graph=False)


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
def test_inputs_shapes_dtypes_and_ranges(geometry, state_dtype):
    x = spec.make_inputs(geometry, {"M": 3, "state_dtype": state_dtype}, np.random.default_rng(0))
    assert x["q"].shape == (3, 64, 128) and x["q"].dtype == np.uint16
    assert x["g"].dtype == np.float32 and (x["g"] > geometry.kda.gate_lower_bound).all() and (x["g"] < 0).all()
    assert x["beta"].shape == (3, 64) and ((x["beta"] > 0) & (x["beta"] < 1)).all()
    assert x["state"].dtype == (np.uint16 if state_dtype == "bf16" else np.float32)
    assert x["state"].shape == (3, 64, 128, 128)
    decoded = spec.decoded(x)
    assert all(np.isfinite(a).all() and np.abs(a).max() > 0 for a in decoded.values())


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
def test_cpu_reference_variant_through_the_runner(geometry, state_dtype):
    comp = registry.get("kda_decode")
    row = runner.measure(comp, comp.variant("ref_lazy"), {"M": 2, "state_dtype": state_dtype}, geometry,
                         backends.CpuBackend(), QUICK, seed=3, roofline={"gbps": 1.0})
    assert row["status"] == "ok", row["reason"]
    # Lazy and definition forms agree to float64 rounding, far inside the stated tolerance.
    assert row["rel_err"] < 1e-12
    assert row["layers"] == 34 and row["ms_all_layers"] == pytest.approx(34 * row["ms_p50"])


def test_bytes_and_flops(geometry):
    point = {"M": 32, "state_dtype": "bf16"}
    state = 32 * accounting.kda_state_bytes_per_layer(geometry, "bf16")
    assert spec.bytes_moved(geometry, point) - 2 * state == 32 * 64 * (3 * 128 * 2 + 128 * 4 + 4 + 128 * 2)
    fp32 = spec.bytes_moved(geometry, {"M": 32, "state_dtype": "fp32"}) - spec.bytes_moved(geometry, point)
    assert fp32 == 2 * state
    assert spec.flops(geometry, point) / (32 * 64) == 114688  # seed 003: about 115K FLOPs per head


def test_kda_sweep_on_cpu_skips_big_points(cli, tmp_path):
    root = tmp_path / "store"
    res = cli("-m", "component=kda_decode", "backend=cpu", "timing=quick", "M=1,32", "state_dtype=fp32",
              f"store.root={root}")
    assert res.returncode == 0, res.stderr
    from harness import store

    df = store.load(root).sort_values("M")
    assert list(df["status"]) == ["ok", "skipped"]
    assert "CPU reference backend" in df.iloc[1]["reason"]


def test_ring_launch_table_matches_the_cuda_source():
    """The launcher sizes shared memory and the persistent grid from RING_CONFIGS; the kernels are
    instantiated by DEFINE_RING lines in the design files. A mismatch would launch with the wrong
    shared memory (the kernel traps) or the wrong tile count, so the two tables must agree line for
    line, and each ring's lines must be in the file its launcher compiles."""
    import re

    from kernels.kda_decode import variants

    found: dict[tuple[str, str], tuple[int, int, int, str, str, str]] = {}
    for path in sorted(variants.HERE.glob("*.cu")):
        for m in re.finditer(r"^DEFINE_RING\((\w+), (\w+), (\w+), (\d+), (\d+), (\d+), (\w+), (\w+), (\w+)\)",
                             path.read_text(), re.M):
            name, suffix, ctype, cols, threads, stages, keep, loader, overlap = m.groups()
            assert (name, suffix) not in found, f"{name} {suffix} defined twice"
            found[(name, suffix)] = (int(cols), int(threads), int(stages), keep, loader, overlap)
            assert ctype == {"bf16": "bf16", "f32": "float"}[suffix]
            assert path == variants.design_source(name), (name, path.name)
    expected = {}
    for name, (tile_bytes, threads, stages, keep, loader, overlap) in variants.RING_CONFIGS.items():
        for dtype, suffix in (("bf16", "bf16"), ("fp32", "f32")):
            expected[(name, suffix)] = (variants.ring_cols(name, dtype), threads, stages, keep, loader, overlap)
            design = variants._DESIGNS[name]
            assert design.persistent and design.threads == threads and design.pdl == (overlap == "PDL")
            assert design.tiles_per_head(dtype) * variants.ring_cols(name, dtype) == 128
    assert found == expected


class _HostStream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


class _HostBackend:
    """Runs the launcher's kernel launches on the host, on the very buffers it is given, and
    captures 'graphs' the way CUDA does: the arguments are frozen at capture, a replay re-submits
    them. Subclasses say what one launch computes (``_submit``)."""

    def __init__(self, eps, scale):
        self.cp, self.stream, self.eps, self.scale = np, _HostStream(), eps, scale
        self._recording = None

    def to_host(self, a):
        return np.array(a, copy=True)

    def launch(self, kernel, grid, block, args, shared_mem=0, programmatic=False):
        if self._recording is not None:
            self._recording.append((args, programmatic))
        else:
            self._submit(args, programmatic)

    def _submit(self, args, programmatic):
        raise NotImplementedError

    @staticmethod
    def _store_o(o, out):
        o[...] = (out.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    def capture(self, step):
        self._recording = []
        try:
            step()
        finally:
            frozen, self._recording = self._recording, None

        def replay():
            for args, programmatic in frozen:
                self._submit(args, programmatic)
        return replay


class _RecordingBackend(_HostBackend):
    """A lazy step in float64 per launch, at once: enough to check the launcher's buffer
    bookkeeping."""

    def _submit(self, args, programmatic):
        from kernels.kda_decode.reference import bf16_to_float, ref_lazy_step

        q, k, v, g, beta, state, kprev, dprev, knew, dnew, o = args[:11]
        f = lambda a: bf16_to_float(a).astype(np.float64)  # noqa: E731
        out, stored, kn, d = ref_lazy_step(f(q), f(k), f(v), g, beta, state, kprev, dprev, self.eps, self.scale)
        state[...] = stored
        knew[...], dnew[...] = kn, d
        self._store_o(o, out)


def test_lazy_launch_buffers_stay_right_through_poison_capture_and_chains(geometry):
    """The lazy designs ping-pong (kn, d) pairs; after poison, a plain launch, a captured replay
    and a captured chain of three must each leave every launch exactly one step ahead."""
    from harness import runner
    from kernels.kda_decode import spec, variants

    point = {"M": 1, "state_dtype": "fp32"}
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(5))
    ref = spec.reference(geometry, point, inputs)
    backend = _RecordingBackend(geometry.kda.l2norm_eps, geometry.kda.q_scale)
    design = variants._DESIGNS["lazy_v16"]

    def build():
        dev = {n: np.array(inputs[n], copy=True) for n in ("q", "k", "v", "g", "beta", "state")}
        dev["o"] = np.empty((1, 64, 128), np.uint16)
        dev["kn"] = [np.zeros((1, 64, 128)) for _ in range(2)]
        dev["d"] = [np.zeros((1, 64, 128)) for _ in range(2)]
        launch = variants._CudaLaunch(backend, design, None, 1, 0, dev, inputs["state"].copy(), 1, 64,
                                      geometry.kda.l2norm_eps, geometry.kda.q_scale)
        launch.poison()
        return launch

    def one_step_ahead(launch):
        out = launch.outputs()
        for name in ("o", "state"):
            err = np.linalg.norm(out[name] - ref[name]) / np.linalg.norm(ref[name])
            assert err < spec.TOLERANCE[(point["state_dtype"], name)], f"{name}: rel err {err:.2e}"

    first = build()
    first()
    one_step_ahead(first)                      # plain launch (measure's verification)
    replay = runner.replay([first], backend, True)
    first.poison()
    replay()
    one_step_ahead(first)                      # the captured graph of one launch
    chain = [build() for _ in range(3)]
    replay = runner.replay(chain, backend, True)
    for launch in chain:
        launch.poison()
    replay()
    for launch in chain:                       # each layer of the chain, on its own buffers
        one_step_ahead(launch)
    first.poison()
    first()
    first()
    out = first.outputs()                      # two plain steps: no longer one step ahead
    assert np.linalg.norm(out["state"] - ref["state"]) / np.linalg.norm(ref["state"]) > spec.TOLERANCE[(point["state_dtype"], "state")]


class _OverlappingBackend(_HostBackend):
    """Exact-form launches (the float64 definition) with one launch in flight, as a stream with
    programmatic dependent launches has: a launch runs when the next is submitted or the host
    reads. ``early_reads`` models a dependent that reads v before its wait, i.e. while the launch
    ahead of it is still running."""

    def __init__(self, eps, scale, early_reads: bool):
        super().__init__(eps, scale)
        self.early_reads = early_reads
        self._pending = None

    def to_host(self, a):
        self._drain()
        return super().to_host(a)

    def _submit(self, args, programmatic):
        v_seen = np.array(args[2], copy=True) if programmatic and self.early_reads else None
        self._drain()  # the launch ahead finishes only now: after an early read, before a late one
        self._pending = (args, v_seen)

    def _drain(self):
        if self._pending is None:
            return
        from kernels.kda_decode.reference import bf16_to_float, ref_step

        (q, k, v, g, beta, state, o), v_seen = self._pending[0][:7], self._pending[1]
        self._pending = None
        f = lambda a: bf16_to_float(a).astype(np.float64)  # noqa: E731
        out, new = ref_step(f(q), f(k), f(v if v_seen is None else v_seen), g, beta,
                            state.astype(np.float64), self.eps, self.scale)
        state[...] = new
        self._store_o(o, out)


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "stream"])
def test_dependent_chain_check_catches_an_early_input_read(geometry, use_graph):
    """tests/kda_chain.py (run on the GPU for every _pdl variant) passes for launches that read their
    input after the layer ahead has written it, and fails for one that reads it early."""
    from kda_chain import check_dependent_chain
    from kernels.kda_decode import spec, variants

    point = {"M": 1, "state_dtype": "fp32"}
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(8))
    design = variants._DESIGNS["ring32k_reread_pdl"]
    assert design.pdl and not design.lazy
    eps, scale = geometry.kda.l2norm_eps, geometry.kda.q_scale

    def chain(backend):
        def build():
            dev = {n: np.array(inputs[n], copy=True) for n in ("q", "k", "v", "g", "beta", "state")}
            dev["o"] = np.empty((1, 64, 128), np.uint16)
            launch = variants._CudaLaunch(backend, design, None, 1, 0, dev, inputs["state"].copy(),
                                          1, 64, eps, scale)
            launch.poison()
            return launch
        return [build() for _ in range(3)]

    tol = spec.checks(point)
    waits = _OverlappingBackend(eps, scale, early_reads=False)
    check_dependent_chain(chain(waits), waits, inputs, use_graph, geometry, point, tol)
    early = _OverlappingBackend(eps, scale, early_reads=True)
    with pytest.raises(AssertionError, match="layer 1: o has NaN"):
        check_dependent_chain(chain(early), early, inputs, use_graph, geometry, point, tol)
