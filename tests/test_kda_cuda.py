"""GPU tests: every KDA decode CUDA variant (and the fla peer when importable) against the float64
definition reference. Skipped when no GPU is visible."""

from __future__ import annotations

import types

import numpy as np
import pytest

from harness.backends import gpu_visible
from harness.fuel import load_fuel
from harness.runner import replay
from harness.verify import compare_all
from kda_chain import check_dependent_chain
from kernels.kda_decode import spec
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16, ref_step
from kernels.kda_decode.variants import CUDA_VARIANTS, PEER_VARIANTS

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

# The real geometry, from the fuel (64 heads x 128 x 128, q scale 1/sqrt(128), eps 1e-6).
GEOMETRY = load_fuel()



def assert_checked(point: dict, out: dict, o_ref, s_ref, what: str = "") -> None:
    """The outputs against the reference by the component's own checks (spec.checks: the same
    rule the sweep's verification applies)."""
    bad = [c.describe() for c in compare_all(out, {"o": o_ref, "state": s_ref}, spec.checks(point)) if not c.ok]
    assert not bad, f"{what}{'; '.join(bad)}"


def make_inputs(M: int, state_dtype: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, K, V = GEOMETRY.kda.heads, GEOMETRY.kda.head_k_dim, GEOMETRY.kda.head_v_dim
    bf = lambda shape: float_to_bf16(rng.standard_normal(shape))  # noqa: E731
    # Log-decays: a third spread over (-5, -0.01), a third near zero (-1e-4 .. -1e-2: channels that
    # barely forget, where alpha ~ 1 stresses accumulation), a third moderate (-1 .. -0.01).
    pick = rng.integers(0, 3, (M, H, K))
    g = np.select([pick == 0, pick == 1],
                  [rng.uniform(-5.0, -0.01, (M, H, K)), -np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), (M, H, K)))],
                  rng.uniform(-1.0, -0.01, (M, H, K))).astype(np.float32)
    state = rng.normal(0.0, 0.1, (M, H, K, V)).astype(np.float32)
    return {
        "q": bf((M, H, K)), "k": bf((M, H, K)), "v": bf((M, H, V)), "g": g,
        "beta": rng.uniform(0.05, 0.95, (M, H)).astype(np.float32),
        "state": float_to_bf16(state) if state_dtype == "bf16" else state,
    }


def reference(inputs: dict, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` repeated decode steps with the same token (exercises the lazy carry and ping-pong)."""
    S = inputs["state"]
    S = bf16_to_float(S).astype(np.float64) if S.dtype == np.uint16 else S.astype(np.float64)
    q, k, v = (bf16_to_float(inputs[n]) for n in ("q", "k", "v"))
    for _ in range(steps):
        o, S = ref_step(q, k, v, inputs["g"], inputs["beta"], S,
                        GEOMETRY.kda.l2norm_eps, GEOMETRY.kda.q_scale)
    return o, S


@pytest.fixture(scope="module")
def backend():
    from harness.backends import get

    return get("cuda")


def _run_and_check(variant, backend, M, state_dtype, steps, use_graph=False):
    point = {"M": M, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = make_inputs(M, state_dtype, seed=1000 * M + steps + (state_dtype == "fp32"))
    launch = variant.build(GEOMETRY, point, inputs, backend)

    launch.poison()
    poisoned = launch.outputs()
    assert np.isnan(poisoned["o"]).all(), "poison() must fill o with NaN"

    step = replay([launch], backend, True) if use_graph else launch
    for _ in range(steps):
        step()
    out = launch.outputs()
    o_ref, s_ref = reference(inputs, steps)

    assert_checked(point, out, o_ref, s_ref, f"{steps} step(s): ")

    # poison() must restore the initial state: one more step from it reproduces the 1-step reference.
    launch.poison()
    launch()
    assert_checked(point, launch.outputs(), *reference(inputs, 1), "after poison: ")


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("M", [1, 3, 32])
@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=lambda v: v.name)
def test_cuda_variant_matches_definition(variant, backend, state_dtype, M, steps):
    _run_and_check(variant, backend, M, state_dtype, steps)


@pytest.mark.parametrize("M", [1, 32])
@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", PEER_VARIANTS, ids=lambda v: v.name)
def test_peer_matches_definition(variant, backend, state_dtype, M):
    _run_and_check(variant, backend, M, state_dtype, steps=1)
    _run_and_check(variant, backend, M, state_dtype, steps=1, use_graph=True)


CHAINED = [v for v in CUDA_VARIANTS if v.name in ("lazy_v16", "regs_wide3", "ring32k_reread")
           or v.name.endswith("_pdl")] + list(PEER_VARIANTS)


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", CHAINED, ids=lambda v: v.name)
def test_chain_graph_steps_every_layer_once(variant, backend, state_dtype):
    """timing.chain: N launches of one variant captured into one graph; one replay must advance
    each launch's own state by exactly one step (a graph that replayed one buffer N times, or
    shared buffers between layers, leaves one state 3 steps ahead and the others untouched)."""
    M = 3
    point = {"M": M, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = make_inputs(M, state_dtype, seed=77 + (state_dtype == "fp32"))
    launches = [variant.build(GEOMETRY, point, inputs, backend) for _ in range(3)]
    for launch in launches:
        launch.poison()
    replay(launches, backend, True)()
    o_ref, s_ref = reference(inputs, 1)
    for i, launch in enumerate(launches):
        assert_checked(point, launch.outputs(), o_ref, s_ref, f"layer {i}: ")


PDL_VARIANTS = [v for v in CUDA_VARIANTS if v.name.endswith("_pdl")]


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "stream"])
@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", PDL_VARIANTS, ids=lambda v: v.name)
def test_pdl_layer_reads_its_input_after_the_layer_before(variant, backend, state_dtype, use_graph):
    """A programmatic dependent starts before the layer ahead of it has finished, so it may read
    what that layer writes only after griddepcontrol.wait (tests/kda_chain.py; its CPU stand-in in
    test_kda_component shows the check fails for a launch that reads early)."""
    M, layers = 8, 4
    point = {"M": M, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = make_inputs(M, state_dtype, seed=91 + (state_dtype == "fp32"))
    launches = [variant.build(GEOMETRY, point, inputs, backend) for _ in range(layers)]
    check_dependent_chain(launches, backend, inputs, use_graph, GEOMETRY, point, spec.checks(point))
