"""GPU: every CUDA variant of sparse_mla and sparse_gather against the float64 reference, through
the runner's own verification (the component's checks, on the reference's sample of streams), at
irregular and model shapes of both latent dtypes, chunks that end mid-tile among them (a variant
that reads the other dtype is skipped with its reason); and a stream whose selection is empty. Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel

pytestmark = pytest.mark.skipif(not gpu_visible(), reason="no GPU visible (cupy finds no CUDA device)")

GEOMETRY = load_fuel()
ONCE = SimpleNamespace(warmup=0, min_reps=1, max_reps=2, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                       cache="flush", graph=False, chain=1)
SHAPES = [
    {"M": 3, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 2},
    {"M": 5, "context": 12288, "selection": "scattered", "page_size": 1, "arena_scale": 1},
    {"M": 2, "context": 16384, "selection": "dense", "page_size": 64, "arena_scale": 1},
    # irregular M, one-token pages; chunks ending mid-tile for the 64-slot designs come from M = 3
    # and 5 (split_wgmma: 66 splits of 32 slots) and here and at M = 32 (split_wgmma_1wave: 18
    # chunks of 117-118 slots; 4 of 528)
    {"M": 7, "context": 8192, "selection": "grouped", "page_size": 1, "arena_scale": 1},
    {"M": 32, "context": 262144, "selection": "grouped", "page_size": 64, "arena_scale": 1},
]
POINTS = [{**shape, "latent_dtype": latent} for latent in ("bf16", "fp8") for shape in SHAPES]
CASES = [(c, v) for c in ("sparse_mla", "sparse_gather", "sparse_mla_math") for v in registry.get(c).variants
         if v.backend == "cuda"]


@pytest.fixture(scope="module")
def backend():
    return backends.get("cuda")


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"M{p['M']}-{p['context']}-{p['selection']}-ps{p['page_size']}-"
                                                        f"{p['latent_dtype']}")
@pytest.mark.parametrize("component,variant", CASES, ids=[f"{c}-{v.name}" for c, v in CASES])
def test_cuda_variant_matches_the_reference(backend, component, variant, point):
    comp = registry.get(component)
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    row = runner.measure(comp, variant, point, GEOMETRY, backend, ONCE, seed=17, roofline=None)
    assert row["status"] == "ok", row["reason"]


@pytest.mark.parametrize("latent", ["bf16", "fp8"])
@pytest.mark.parametrize("variant", [v for v in registry.get("sparse_mla").variants
                                     if v.backend == "cuda" and not v.peer], ids=lambda v: v.name)
def test_a_stream_with_no_valid_slot_gives_zeros_and_minus_inf(backend, variant, latent):
    """Ours only: torch's softmax over a row of -inf is NaN, as an engineer's code would leave it."""
    comp = registry.get("sparse_mla")
    # M = 4: the least M the cluster form (split_wgmma_t32_cluster) runs
    point = {"M": 4, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 1, "latent_dtype": latent}
    reason = variant.supports(GEOMETRY, point)
    if reason:
        pytest.skip(reason)
    inputs, _ = runner._case(comp, GEOMETRY, point, 23, None, backend)
    inputs["selection"][1] = -1
    ref = comp.reference(GEOMETRY, point, inputs)
    assert np.isneginf(ref["lse"][1]).all() and (ref["out"][1] == 0).all()
    launch = variant.build(GEOMETRY, point, inputs, backend)
    launch.poison()
    launch()
    bad = [c.describe() for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok]
    assert not bad, bad


@pytest.mark.parametrize("name", ["split_wgmma_coop_1wave", "split_wgmma_lean_coop_1wave"])
@pytest.mark.parametrize("M", [1, 5, 32])
def test_the_cooperative_combine_is_right_launch_after_launch(backend, M, name):
    """The cooperative forms' row counters are never reset (a launch's tickets are the next
    multiple of splits): three launches in a row, each on re-poisoned outputs, each the reference's,
    and every row's counter at 3 x splits after them. M = 1: 33 splits a row, M = 32: 4."""
    comp = registry.get("sparse_mla")
    variant = next(v for v in comp.variants if v.name == name)
    point = {"M": M, "context": 262144 if M == 32 else 16384, "selection": "grouped", "page_size": 64,
             "arena_scale": 1, "latent_dtype": "bf16"}
    inputs, _ = runner._case(comp, GEOMETRY, point, 29, None, backend)
    ref = comp.reference(GEOMETRY, point, inputs)
    streams = runner.reference_streams(comp, GEOMETRY, point)
    launch = variant.build(GEOMETRY, point, inputs, backend)
    for _ in range(3):
        launch.poison()
        launch()
        bad = [c.describe() for c in runner.checked(comp, point, launch.outputs(), ref, streams) if not c.ok]
        assert not bad, bad
    splits = int(launch.kernels[0].grid[0])
    assert (backend.to_host(launch.dev["row_count"]) == 3 * splits).all()
