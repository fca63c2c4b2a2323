"""GPU tests: the kda_decode_conv variants (ours, and fla's when importable) against the float64
definition: the short convolution, then the decode step. Skipped when no GPU is visible."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends import gpu_visible
from harness.fuel import load_fuel
from harness.runner import replay
from harness.verify import compare_all
from kda_chain import check_dependent_chain
from kernels.kda_decode import conv_spec
from kernels.kda_decode.reference import float_to_bf16
from kernels.kda_decode.conv_variants import CUDA_VARIANTS, PEER_VARIANTS

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()


@pytest.fixture(scope="module")
def backend():
    from harness.backends import get

    return get("cuda")


def reference_steps(point: dict, inputs: dict, steps: int) -> dict:
    """``steps`` decode steps with the same projections: the taps shift in a new x each step (so
    step 3 convolves x with itself), the state carried in float64."""
    current = dict(inputs)
    for _ in range(steps):
        ref = conv_spec.reference(GEOMETRY, point, current)
        current.update(state=ref["state"], conv_state=float_to_bf16(ref["conv_state"]))  # taps are bf16 words
    return ref


def assert_matches(point: dict, out: dict, ref: dict, what: str) -> None:
    bad = [c.describe() for c in compare_all(out, ref, conv_spec.checks(point)) if not c.ok]
    assert not bad, f"{what}: " + "; ".join(bad)


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("M", [1, 3, 32])
@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", CUDA_VARIANTS + PEER_VARIANTS, ids=lambda v: v.name)
def test_conv_variant_matches_definition(variant, backend, state_dtype, M, steps):
    point = {"M": M, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = conv_spec.make_inputs(GEOMETRY, point, np.random.default_rng(500 * M + steps))
    launch = variant.build(GEOMETRY, point, inputs, backend)
    launch.poison()
    assert np.isnan(launch.outputs()["o"]).all(), "poison() must fill o with NaN"
    for _ in range(steps):
        launch()
    assert_matches(point, launch.outputs(), reference_steps(point, inputs, steps), f"{steps} step(s)")
    # poison() restores both states: one step from it is the 1-step reference again.
    launch.poison()
    launch()
    assert_matches(point, launch.outputs(), reference_steps(point, inputs, 1), "after poison")


@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", CUDA_VARIANTS + PEER_VARIANTS, ids=lambda v: v.name)
def test_conv_chain_graph_steps_every_layer_once(variant, backend, state_dtype):
    point = {"M": 3, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = conv_spec.make_inputs(GEOMETRY, point, np.random.default_rng(78))
    launches = [variant.build(GEOMETRY, point, inputs, backend) for _ in range(3)]
    for launch in launches:
        launch.poison()
    replay(launches, backend, True)()
    ref = reference_steps(point, inputs, 1)
    for i, launch in enumerate(launches):
        assert_matches(point, launch.outputs(), ref, f"layer {i}")


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "stream"])
@pytest.mark.parametrize("state_dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("variant", CUDA_VARIANTS, ids=lambda v: v.name)
def test_conv_pdl_layer_reads_its_input_after_the_layer_before(variant, backend, state_dtype, use_graph):
    """Layer i's x_v is layer i-1's o: our launches are programmatic dependents, so a read of x_v
    (or, unfused, of q, k, v) ahead of griddepcontrol.wait would show."""
    M = 8
    point = {"M": M, "state_dtype": state_dtype}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs = conv_spec.make_inputs(GEOMETRY, point, np.random.default_rng(92))
    launches = [variant.build(GEOMETRY, point, inputs, backend) for _ in range(4)]
    check_dependent_chain(launches, backend, inputs, use_graph, GEOMETRY, point,
                          conv_spec.checks(point), linked="x_v",
                          reference=conv_spec.reference)
