"""GPU: every CUDA variant of sparse_mla and sparse_gather against the float64 reference, through
the runner's own verification (the component's checks, on the reference's sample of streams), at
irregular and model shapes of both latent dtypes, chunks that end mid-tile among them (a variant
that reads the other dtype is skipped with its reason); a stream whose selection is empty; and each
last-CTA-combine variant against its two-kernel twin, to the bit, two launches in a row (the
counter each launch resets). Skipped without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.backends import gpu_visible
from harness.fuel import load_fuel
from kernels.sparse_mla.variants import LAST_CTA_TWINS

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
CASES = [(c, v) for c in ("sparse_mla", "sparse_gather") for v in registry.get(c).variants if v.backend == "cuda"]


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


# M = 1: 33 splits of one tile (one CTA merges 33 x 128 KiB); M = 7, one-token pages: ragged chunks;
# M = 32 at the model's context: 4 splits (split_wgmma_lc: 11, several waves of CTAs)
LC_SHAPES = [
    {"M": 1, "context": 262144, "selection": "grouped", "page_size": 64, "arena_scale": 1},
    {"M": 7, "context": 8192, "selection": "scattered", "page_size": 1, "arena_scale": 1},
    {"M": 32, "context": 262144, "selection": "grouped", "page_size": 64, "arena_scale": 1},
]


@pytest.mark.parametrize("shape", LC_SHAPES, ids=lambda p: f"M{p['M']}-{p['context']}-{p['selection']}-ps{p['page_size']}")
@pytest.mark.parametrize("name", sorted(LAST_CTA_TWINS))
def test_the_last_cta_combine_is_the_combine_to_the_bit_launch_after_launch(backend, name, shape):
    """The split kernel is the twin's, so its partials are the same bits; the merge must then give
    sparse_mla_combine's out and lse exactly, at the second launch too (which starts from the
    counter the first one reset, its partials poisoned again), and leave every counter at 0."""
    comp = registry.get("sparse_mla")
    lc, twin = comp.variant(name), comp.variant(LAST_CTA_TWINS[name])
    points = [{**shape, "latent_dtype": latent} for latent in ("bf16", "fp8")]
    reasons = [lc.supports(GEOMETRY, p) for p in points]
    if all(reasons):
        pytest.skip(reasons[0])
    point = points[reasons.index(None)]
    inputs, ref = runner._case(comp, GEOMETRY, point, 29, None, backend)
    streams = runner.reference_streams(comp, GEOMETRY, point)
    two = twin.build(GEOMETRY, point, inputs, backend)
    two.poison()
    two()
    want = two.outputs()
    one = lc.build(GEOMETRY, point, inputs, backend)
    assert one.note.startswith(two.note), (one.note, two.note)  # the same splits
    for launch in range(2):
        one.poison()
        one()
        got = one.outputs()
        bad = [c.describe() for c in runner.checked(comp, point, got, ref, streams) if not c.ok]
        assert not bad, (launch, bad)
        for key in ("out", "lse"):
            same = np.asarray(got[key]).view(np.uint64) == np.asarray(want[key]).view(np.uint64)
            assert same.all(), f"launch {launch}: {key} differs from {twin.name} at {np.argwhere(~same)[:4].tolist()} " \
                               f"({int((~same).sum())} of {same.size})"
        counts = backend.to_host(one.dev["count"])
        assert (counts == 0).all(), (launch, counts)
