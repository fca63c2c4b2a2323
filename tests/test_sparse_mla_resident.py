"""The resident-tile component (sparse_mla_math, split_wgmma.cu's sparse_mla_split_wgmma_resident) on
the CPU: its op is the attention over each stream's first 64 selected slots; the kernel runs each
split's whole chunk of iterations over that one tile and lowers the partial max by
log(ntiles x splits). A NumPy model of exactly that arithmetic (split_wgmma's per-tile steps, the
split's repeated tile, the combine) must give the float64 attention over the tile, for ragged
chunk counts; and the component's reference must be the layer's over the truncated selection."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness import registry
from harness.fuel import REPO_ROOT
from kernels.sparse_mla import spec
from test_sparse_mla_wgmma import bf16, combine, split_model

SRC = (REPO_ROOT / "kernels/sparse_mla/split_wgmma.cu").read_text()


def test_the_resident_slots_are_the_kernels_tile():
    assert int(re.search(r"#define WG_TILE (\d+)", SRC).group(1)) == spec.RESIDENT_SLOTS
    assert "WG_PARTIALS_KERNEL(sparse_mla_split_wgmma_resident, WG_ARGS(WG_TILE, 2, 0, true))" in SRC


def resident_partials(q, c, valid, scale, W, splits):
    """Each split: ceil(chunk / 64) iterations of split_wgmma's tile step over tile 0, then the max lowered."""
    tile = 64
    c0, v0 = c[:tile], valid[:tile]
    parts = []
    for s in range(splits):
        start, end = s * W // splits, (s + 1) * W // splits
        nt = -(-(end - start) // tile)
        reps_c = np.concatenate([c0] * nt) if nt else c0[:0]
        reps_v = np.concatenate([v0] * nt) if nt else v0[:0]
        acc, m, l = split_model(q, reps_c, reps_v, scale, 0, nt * tile)
        m = np.where(np.isneginf(m), m, m - np.log(np.float32(nt) * np.float32(splits))).astype(np.float32)
        parts.append((acc, m, l))
    return parts


@pytest.mark.parametrize("splits", [4, 3, 33])
@pytest.mark.parametrize("empty_tile", [False, True])
def test_the_resident_arithmetic_is_the_attention_over_the_first_tile(splits, empty_tile):
    rng = np.random.default_rng(splits)
    H, D, W, scale = 64, 512, 2112, 1 / 16
    q = bf16(rng.standard_normal((H, D)))
    c = bf16(rng.standard_normal((W, D)))
    valid = rng.random(W) < 0.8
    if empty_tile:
        valid[:64] = False
    out, lse = combine(resident_partials(q, c, valid, scale, W, splits))
    want_out, want_lse = spec.attend(q.astype(np.float64), c[:64][valid[:64]].astype(np.float64), scale)
    if empty_tile:
        assert not out.any() and np.isneginf(lse).all()
        return
    for name, got, want in (("out", out, want_out), ("lse", lse, want_lse)):
        rule = spec.checks({})[name]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rule.tolerance, (name, err)
    # lse within 1e-3 of its size only with the lowered max (without it: off by log(ntiles x splits))
    assert np.abs(lse - want_lse).max() < 1e-3 * np.abs(want_lse).max()


class _Inputs(dict):
    backend = None

    def resident_rows(self, name, rows):
        return self.resident[name][rows]


def test_the_component_reference_is_the_layers_over_the_first_slots(geometry):
    point = {"M": 2, "context": 8192, "selection": "scattered", "page_size": 64, "arena_scale": 1,
             "latent_dtype": "bf16"}
    rng = np.random.default_rng(3)
    inputs = _Inputs(spec.make_inputs(geometry, point, rng))
    rows = spec.arena_total_rows(point)
    inputs.resident = {"arena": rng.integers(0, 1 << 14, (rows, 512)).astype(np.uint16)}
    got = registry.get("sparse_mla_math").reference(geometry, point, inputs)
    cut = _Inputs({**inputs, "selection": np.where(np.arange(inputs["selection"].shape[1]) < 64,
                                                   inputs["selection"], -1)})
    cut.resident = inputs.resident
    want = spec.reference(geometry, point, cut)
    assert set(got) == {"out", "lse"}
    assert np.array_equal(got["out"], want["out"]) and np.array_equal(got["lse"], want["lse"])
    full = spec.reference(geometry, point, inputs)
    assert not np.allclose(got["lse"], full["lse"])   # the op is not the layer's
