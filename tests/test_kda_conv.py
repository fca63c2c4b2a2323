"""The kda_decode_conv component on the CPU: the short-convolution reference against torch's
conv1d, the lazy reference variant through the runner, byte counts, input checks, the launch
protocol of our fused / unfused steps, and what the CUDA source declares."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness import accounting, backends, registry, runner
from harness.fuel import load_fuel
from harness.cuda import KernelCall, KernelStep
from kernels.kda_decode import conv_spec, conv_variants, spec
from kernels.kda_decode.reference import ref_short_conv

QUICK = SimpleNamespace(warmup=1, min_reps=3, max_reps=10, min_time_ms=0.0, max_noise=1.0,
                        timeout_s=10.0, cache="auto", graph=False)


def test_short_conv_steps_equal_a_causal_depthwise_conv1d():
    """T tokens stepped one at a time from zero taps give torch's depthwise conv1d with causal
    (left) padding, SiLU after it; the taps end as the last W - 1 inputs."""
    rng = np.random.default_rng(5)
    M, C, W, T = 2, 24, 4, 7
    x = rng.standard_normal((M, T, C))
    weight = rng.uniform(-0.5, 0.5, (C, W))
    taps = np.zeros((M, C, W - 1))
    out_y = []
    for t in range(T):
        y, taps = ref_short_conv(x[:, t], taps, weight)
        out_y.append(y)
    xt = torch.from_numpy(x).transpose(1, 2)  # [M, C, T]
    conv = torch.nn.functional.conv1d(torch.nn.functional.pad(xt, (W - 1, 0)),
                                      torch.from_numpy(weight)[:, None, :], groups=C)
    ref_y = torch.nn.functional.silu(conv).transpose(1, 2).numpy()
    np.testing.assert_allclose(np.stack(out_y, axis=1), ref_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(taps, x[:, T - (W - 1):].transpose(0, 2, 1))


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
def test_inputs_shapes_and_reference_outputs(geometry, state_dtype):
    point = {"M": 2, "state_dtype": state_dtype}
    x = conv_spec.make_inputs(geometry, point, np.random.default_rng(0))
    assert x["x_q"].shape == (2, 64, 128) and x["x_q"].dtype == np.uint16
    assert x["conv_state"].shape == (2, 3, 8192, 3) and x["conv_weight"].shape == (3, 8192, 4)
    assert all(np.abs(a).max() > 0 for a in spec.decoded(x).values())
    ref = conv_spec.reference(geometry, point, x)
    assert set(ref) == {"o", "state", "conv_state"}
    # The new taps are the old ones shifted by one, the projections last.
    old, new = spec.decoded(x)["conv_state"], ref["conv_state"]
    np.testing.assert_array_equal(new[..., :2], old[..., 1:])
    np.testing.assert_array_equal(new[:, 2, :, 2], spec.decoded(x)["x_v"].reshape(2, -1))


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
def test_cpu_reference_variant_through_the_runner(geometry, state_dtype):
    comp = registry.get("kda_decode_conv")
    row = runner.measure(comp, comp.variant("ref_conv_lazy"), {"M": 2, "state_dtype": state_dtype}, geometry,
                         backends.CpuBackend(), QUICK, seed=4, roofline={"gbps": 1.0})
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] < 1e-12 and "conv_state=0.000e+00" in row["errors"]
    assert row["layers"] == 34


def test_bytes_add_the_taps_twice_and_the_weights_once(geometry):
    point = {"M": 32, "state_dtype": "bf16"}
    assert accounting.kda_conv_bytes_per_layer(geometry) == 147456  # seed 000: 3 x 8192 x 3 x 2
    extra = conv_spec.bytes_moved(geometry, point) - spec.bytes_moved(geometry, point)
    assert extra == 2 * 32 * 147456 + 3 * 8192 * 4 * 2
    touched = conv_spec.footprint(geometry, point) - spec.footprint(geometry, point)
    assert touched == 32 * 147456 + 3 * 8192 * 4 * 2


def test_bad_input_is_refused_naming_it(geometry):
    point = {"M": 2, "state_dtype": "bf16"}
    x = conv_spec.make_inputs(geometry, point, np.random.default_rng(1))
    x["conv_state"] = x["conv_state"][..., :2].copy()
    with pytest.raises(ValueError, match=r"input 'conv_state': expected uint16\[2, 3, 8192, 3\]") as err:
        conv_variants.build_cpu_conv_lazy(geometry, point, x, backends.CpuBackend())
    assert "\n" not in str(err.value)


def test_a_fuel_the_kernels_do_not_fit_is_a_skip_reason(fuel_text, tmp_path, geometry):
    path = tmp_path / "attention.yaml"
    text = re.sub(r"(conv_kernel:\n\s+value:) 4", r"\1 3", fuel_text)
    assert text != fuel_text
    path.write_text(text)
    other = load_fuel(path)
    reason = conv_variants.supports_conv_cuda(other, {"M": 8, "state_dtype": "bf16"})
    assert reason and "kernel 4" in reason and "kernel 3" in reason
    assert conv_variants._conv_fits(geometry) is None


class _RecordingBackend:
    """Records (kernel, programmatic) per launch instead of running anything."""

    def __init__(self):
        self.calls = []

    def launch(self, fn, grid, block, args, shared_mem=0, programmatic=False):
        self.calls.append((fn, programmatic))


def test_every_kernel_after_the_first_waits_for_the_one_before():
    """The unfused step's second kernel reads what the first wrote, so it is always a programmatic
    dependent; in a chain, every step but the first is one too (its first kernel waits for the
    step before), and the first step launches plainly."""
    rec = _RecordingBackend()
    kernels = [KernelCall(name, 1, 32, 0, lambda d: ()) for name in ("conv", "step")]
    launches = [KernelStep(rec, kernels, {}, {}, {}, read=dict) for _ in range(3)]
    launches[0]()
    assert rec.calls == [("conv", False), ("step", True)]
    rec.calls.clear()
    KernelStep.run_many(launches)()
    assert rec.calls == [("conv", False), ("step", True)] + [("conv", True), ("step", True)] * 2


def test_cuda_source_declares_what_the_launchers_call():
    """Symbols the conv launchers look up exist in the files they compile, with the thread count and
    stage count the launcher sizes the grid and shared memory from."""
    from kernels.kda_decode.variants import HERE, design_source

    fused = [m for name in conv_variants.FUSED_CONFIGS for m in re.findall(
        r"^DEFINE_RING_CONV\((\w+), (\w+), \w+, (\d+), (\d+), (\d+), \w+, \w+, \w+, (\w+)\)",
        design_source(name).read_text(), re.M)]
    assert sorted((name, sfx, mode) for name, sfx, _, _, _, mode in fused) == sorted(
        (name, sfx, mode) for name, mode in conv_variants.FUSED_CONFIGS.items() for sfx in ("bf16", "f32"))
    for name, sfx, cols, threads, stages, _ in fused:
        assert (int(cols), int(threads), int(stages)) == (128, conv_variants._FUSED_THREADS,
                                                          conv_variants._FUSED_STAGES), (name, sfx)
    assert re.search(r"__launch_bounds__\(%d\)\nkda_conv_update\(" % conv_variants._CONV_THREADS,
                     design_source("conv_update").read_text())
    assert re.search(r"TAP_BYTES = 3 \* KDIM \* 3 \* 2;", (HERE / "short_conv.cuh").read_text())
    assert conv_variants._TAP_BYTES == 3 * 128 * 3 * 2


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
def test_fla_tensors_carry_our_inputs(geometry, state_dtype):
    """What the fla peer is handed, built on the CPU: the same values in fla's shapes, the state in
    its own dtype, and fla's 4-slot caches holding our 3 taps after a slot it shifts out unread."""
    from kernels.kda_decode import variants
    from kernels.kda_decode.reference import bf16_to_float

    point = {"M": 2, "state_dtype": state_dtype}
    x = conv_spec.make_inputs(geometry, point, np.random.default_rng(2))
    M, H, K, V = 2, 64, 128, 128
    t, state0 = variants.fla_step_tensors(x, M, H, K, V, "cpu")
    assert t["g"].shape == (M, 1, H, K) and t["beta"].shape == (M, 1, H) and t["o"].shape == (M, 1, H, V)
    assert t["o"].dtype == torch.bfloat16 and t["g"].dtype == torch.float32
    assert state0.dtype == (torch.bfloat16 if state_dtype == "bf16" else torch.float32)
    np.testing.assert_array_equal(state0.to(torch.float64).numpy(), spec.decoded(x)["state"])
    np.testing.assert_array_equal(t["g"].numpy().reshape(M, H, K), x["g"])
    xq = variants.torch_on(x["x_q"], (M, H * K), "cpu")
    np.testing.assert_array_equal(xq.to(torch.float32).numpy(), bf16_to_float(x["x_q"]).reshape(M, -1))
    caches = conv_variants.fla_caches(variants.torch_on(x["conv_state"], x["conv_state"].shape, "cpu"))
    assert len(caches) == 3 and caches[0].shape == (M, H * K, 4) and caches[0].is_contiguous()
    for i, cache in enumerate(caches):
        np.testing.assert_array_equal(cache[..., 1:].to(torch.float32).numpy(), bf16_to_float(x["conv_state"][:, i]))
        assert (cache[..., 0] == 0).all()


def test_fla_convolution_runs_the_pinned_config(monkeypatch):
    """fla's convolution autotunes on (D, W) only, on a warm-cache call, and caches the pick on
    disk; the peer replaces its candidates with FLA_CONV_CONFIG alone (so nothing is tuned or
    cached) and drops an earlier pick, once: a chain's later builds keep the pinned entry."""
    import sys

    class Config:
        def __init__(self, kwargs, num_warps):
            self.kwargs, self.num_warps = kwargs, num_warps

    tuner = SimpleNamespace(configs=[Config({"BD": 8}, 16), Config({"BD": 128}, 4)],
                            cache={("8192", 4): "picked at M=1"}, cache_results=True)
    ops = SimpleNamespace(causal_conv1d_update_kernel=SimpleNamespace(fn=tuner))  # heuristics around it
    for name, module in (("fla", SimpleNamespace()), ("fla.modules", SimpleNamespace()),
                         ("fla.modules.causal_conv1d", SimpleNamespace(ops=ops)),
                         ("triton", SimpleNamespace(Config=Config))):
        monkeypatch.setitem(sys.modules, name, module)
    assert conv_variants.pin_fla_conv() is tuner
    assert [(c.kwargs, c.num_warps) for c in tuner.configs] == [({"BD": 128}, 4)]
    assert tuner.cache == {} and not tuner.cache_results
    tuner.cache[("8192", 4)] = tuner.configs[0]
    conv_variants.pin_fla_conv()
    assert tuner.cache == {("8192", 4): tuner.configs[0]}
