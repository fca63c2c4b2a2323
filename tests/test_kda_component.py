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
    instantiated by DEFINE_RING lines in the .cu. A mismatch would launch with the wrong shared
    memory (the kernel traps) or the wrong tile count, so the two tables must agree line for line."""
    import re

    from kernels.kda_decode import variants

    src = variants.SOURCE.read_text()
    found: dict[tuple[str, str], tuple[int, int, int, str, str, str]] = {}
    for m in re.finditer(r"^DEFINE_RING\((\w+), (\w+), (\w+), (\d+), (\d+), (\d+), (\w+), (\w+), (\w+)\)",
                         src, re.M):
        name, suffix, ctype, cols, threads, stages, keep, loader, overlap = m.groups()
        found[(name, suffix)] = (int(cols), int(threads), int(stages), keep, loader, overlap)
        assert ctype == {"bf16": "bf16", "f32": "float"}[suffix]
    expected = {}
    for name, (tile_bytes, threads, stages, keep, loader, overlap) in variants.RING_CONFIGS.items():
        for dtype, suffix in (("bf16", "bf16"), ("fp32", "f32")):
            expected[(name, suffix)] = (variants.ring_cols(name, dtype), threads, stages, keep, loader, overlap)
            design = variants._DESIGNS[name]
            assert design.persistent and design.threads == threads and design.pdl == (overlap == "PDL")
            assert design.tiles_per_head(dtype) * variants.ring_cols(name, dtype) == 128
    assert found == expected
