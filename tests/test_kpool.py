"""kpool compress and DSA expand on the CPU: the specs' references against the rules in
``kernels/dsa_indexer/reference.py`` (reused, not copied), incomplete pools, every tail, the dense
rule, -1 pools, the 2112-slot width, the resident key and gate build, a NumPy emulation of the
compress kernel's work-item and address math, the torch peer's math on CPU tensors, the CPU
variants through the runner, bytes and the axis rules."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness import backends, registry, runner
from harness.fuel import load_fuel
from harness.verify import INDEX_POISON_BYTE
from kernels.dsa_indexer import expand_spec, kpool_spec, kpool_variants
from kernels.dsa_indexer import reference as rules
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16

QUICK = SimpleNamespace(warmup=0, min_reps=2, max_reps=3, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)
CPU = backends.CpuBackend()


def _case(component: str, point: dict, seed: int = 1):
    """The component, and the runner's inputs (resident ones built on the CPU backend) and reference."""
    comp = registry.get(component)
    return comp, *runner._case(comp, load_fuel(), point, seed, None, CPU)


# -- kpool compress ---------------------------------------------------------------------------------


def test_compress_reference_is_the_rule_per_stream_with_zeros_past_the_complete_pools(geometry):
    point = {"M": 5, "context": 64}
    comp, inputs, ref = _case("kpool_compress", point)
    P, D = 16, 128
    assert ref["pooled"].shape == (4, P, D) and comp.reference_streams(geometry, point) == [0, 1, 2, 3]
    for i, m in enumerate([0, 1, 2, 3]):
        n = 64 - m % 4
        k = bf16_to_float(inputs.resident["keys"][m])
        g = bf16_to_float(inputs.resident["gates"][m])
        want = rules.kpool_compress(k, g, inputs["ape"], n - 1)
        assert len(want) == n // 4
        assert np.array_equal(ref["pooled"][i, :n // 4], want)
        assert (ref["pooled"][i, n // 4:] == 0).all()
        # one element by the formula itself, from the four token rows of pool 3, channel 77
        logits = g[12:16, 77].astype(np.float64) + inputs["ape"][:, 77]
        w = np.exp(logits) / np.exp(logits).sum()
        assert ref["pooled"][i, 3, 77] == pytest.approx(float(w @ k[12:16, 77]), rel=1e-12)
    assert (ref["incomplete"] == 0).all() and ref["incomplete"].dtype == np.uint16


def test_the_reference_sample_covers_every_tail(geometry):
    for Mn in range(5, 65):
        streams = kpool_spec.reference_streams(geometry, {"M": Mn, "context": 8192})
        assert len(streams) == 4 and {m % 4 for m in streams} == {0, 1, 2, 3}, Mn
        assert streams[0] == 0 and streams[-1] >= Mn - 4 and max(streams) < Mn, Mn
    assert kpool_spec.reference_streams(geometry, {"M": 32, "context": 8192}) == [0, 9, 22, 31]
    assert kpool_spec.reference_streams(geometry, {"M": 4, "context": 8192}) is None


def test_incomplete_pools_are_only_the_last_of_streams_with_a_tail(geometry):
    point = {"M": 8, "context": 40}
    assert list(kpool_spec.complete(geometry, point)) == [10, 9, 9, 9, 10, 9, 9, 9]
    bits = np.arange(8 * 10 * 128, dtype=np.uint16).reshape(8, 10, 128)
    got = kpool_spec.incomplete_bits(geometry, point, bits)
    for m in range(8):
        assert np.array_equal(got[m], bits[m, 9] if m % 4 else np.zeros(128, np.uint16)), m


def test_a_nonzero_incomplete_pool_fails_byte_exact_even_when_tiny(geometry):
    """The incomplete pools must be exactly 0: a value far below RelErr's element bound (and
    NaN poison left unwritten) fails the byte-exact check."""
    point = {"M": 4, "context": 32}
    comp, inputs, ref = _case("kpool_compress", point)
    launch = comp.variant("ref_compress").build(geometry, point, inputs, CPU)
    launch.poison()
    launch()
    assert all(c.ok for c in runner.checked(comp, point, launch.outputs(), ref, None))
    launch.bits[2, -1, 5] = float_to_bf16(np.array([1e-30]))[0]
    bad = {c.name: c for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok}
    assert list(bad) == ["incomplete"] and bad["incomplete"].first_bad[0] == (2, 5)
    launch.poison()   # never run: NaN everywhere
    bad = {c.name: c for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok}
    assert set(bad) == {"pooled", "incomplete"} and bad["pooled"].unwritten == 4 * 8 * 128


def test_a_slot_mix_up_fails_the_tolerance(geometry):
    """Swapping the slot bias of two slots (a plausible indexing bug) is far outside 2^-8."""
    point = {"M": 4, "context": 64}
    comp, inputs, ref = _case("kpool_compress", point)
    swapped = inputs["ape"][[1, 0, 2, 3]]
    bits = kpool_variants.compress_numpy(inputs.resident["keys"], inputs.resident["gates"], swapped,
                                         kpool_spec.complete(geometry, point))
    bad = [c for c in runner.checked(comp, point, kpool_variants.compress_outputs(geometry, point, bits), ref, None)
           if not c.ok]
    assert [c.name for c in bad] == ["pooled"] and bad[0].rel_err > 10 * kpool_spec.TOLERANCE


def test_resident_keys_and_gates_are_bf16_normals_built_on_the_backend(geometry):
    point = {"M": 3, "context": 4096}
    keys = kpool_spec.KEYS.build(geometry, point, CPU, 11)
    assert keys.dtype == np.uint16 and keys.shape == (3, 4096, 128)
    assert keys.nbytes == kpool_spec.token_nbytes(geometry, point)
    values = bf16_to_float(keys)
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1) < 0.01 and np.isfinite(values).all()
    assert np.array_equal(keys, kpool_spec.KEYS.build(geometry, point, CPU, 11))
    assert not np.array_equal(keys, kpool_spec.GATES.build(geometry, point, CPU, 12))


def _emulate_compress_kernel(keys, gates, ape, lengths, M, P, grid, threads=256):
    """kpool_compress_v1's work items, addresses and arithmetic in NumPy, thread by thread of a
    grid-stride loop: returns the pooled bits and how often each key / gate element was read and
    each output element written."""
    D, G = 128, 16
    kf, gf = keys.reshape(-1), gates.reshape(-1)
    out = np.full(M * P * D, 0xFFFF, np.uint16)
    reads = np.zeros(kf.size, np.int64)
    writes = np.zeros(out.size, np.int64)
    stride, total = grid * threads, M * P * G
    e = np.arange(8)
    for first in range(min(stride, total)):
        g = first % G
        for i in range(first, total, stride):
            assert i % G == g, "a thread's channel group changed along its grid-stride loop"
            pp = i // G
            m, p = pp // P, pp % P
            dst = pp * D + 8 * g + e
            writes[dst] += 1
            if p >= lengths[m] // 4:
                out[dst] = 0
                continue
            src = (pp * 4 + np.arange(4)[:, None]) * D + 8 * g + e[None, :]     # [slot, element]
            reads[src] += 1
            logits = bf16_to_float(gf[src]) + ape[:, 8 * g + e]
            w = np.exp(logits - logits.max(axis=0))
            out[dst] = float_to_bf16((w * bf16_to_float(kf[src])).sum(axis=0) / w.sum(axis=0))
    return out.reshape(M, P, D), reads, writes


@pytest.mark.parametrize("grid", [1, 3, 64])
def test_compress_kernel_emulation_reads_each_complete_token_once_and_writes_each_output_once(geometry, grid):
    point = {"M": 5, "context": 48}
    comp, inputs, ref = _case("kpool_compress", point)
    out, reads, writes = _emulate_compress_kernel(inputs.resident["keys"], inputs.resident["gates"], inputs["ape"],
                                                  inputs["lengths"], 5, 12, grid)
    assert (writes == 1).all()
    want = np.zeros((5, 48, 128), np.int64)
    for m, n in enumerate(inputs["lengths"]):
        want[m, :n // 4 * 4] = 1                                      # the complete pools' tokens only
    assert np.array_equal(reads.reshape(5, 48, 128), want)
    assert all(c.ok for c in runner.checked(comp, point, kpool_variants.compress_outputs(geometry, point, out),
                                            ref, comp.reference_streams(geometry, point)))


def test_the_torch_peers_math_matches_the_reference_on_cpu_tensors(geometry):
    point = {"M": 4, "context": 64}
    comp, inputs, ref = _case("kpool_compress", point)
    as_bf16 = lambda bits: torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).view(4, 16, 4, 128)
    incomplete = torch.arange(16)[None, :] >= torch.from_numpy(kpool_spec.complete(geometry, point))[:, None]
    out = kpool_variants.torch_compress(as_bf16(inputs.resident["keys"]), as_bf16(inputs.resident["gates"]),
                                        torch.from_numpy(inputs["ape"]), incomplete).to(torch.bfloat16)
    bits = out.view(torch.int16).numpy().view(np.uint16)
    assert all(c.ok for c in runner.checked(comp, point, kpool_variants.compress_outputs(geometry, point, bits),
                                            ref, None))


def test_the_torch_peer_skips_points_whose_temporaries_do_not_fit(geometry):
    assert "160 GiB" in kpool_variants.torch_temporaries_reason(geometry, {"M": 64, "context": 1048576})
    assert kpool_variants.torch_temporaries_reason(geometry, {"M": 32, "context": 262144}) is None


def test_compress_bytes_are_the_complete_pools_read_once_and_every_pool_written(geometry):
    point = {"M": 4, "context": 1024}
    tokens = 1024 + 3 * 1020                                         # streams 1..3 lose their last pool
    want = tokens * 128 * 2 * 2 + 4 * 128 * 4 + 4 * 4 + 4 * 256 * 128 * 2
    assert kpool_spec.bytes_moved(geometry, point) == want
    assert kpool_spec.flops(geometry, point) == tokens // 4 * 128 * 29
    model = {"M": 32, "context": 262144}
    assert kpool_spec.token_nbytes(geometry, model) == 2 << 30      # 2 GiB each, as the issue says


def test_compress_axis_rules(geometry):
    assert "multiple of the pool size" in kpool_spec.check_point(geometry, {"M": 2, "context": 1026})
    assert kpool_spec.check_point(geometry, {"M": 2, "context": 1024}) is None


@pytest.mark.parametrize("point", [{"M": 5, "context": 1024}, {"M": 3, "context": 1028}], ids=str)
def test_ref_compress_passes_through_the_runner(geometry, point):
    comp = registry.get("kpool_compress")
    row = runner.measure(comp, comp.variant("ref_compress"), point, geometry, CPU, QUICK, seed=2, roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["resident_bytes"] == 2 * kpool_spec.token_nbytes(geometry, point)
    assert 0 < row["rel_err"] <= kpool_spec.TOLERANCE


# -- expand ------------------------------------------------------------------------------------------


def _expand_point(**kw):
    return {"M": 6, "context": 2052, "topk": 2048, **kw}


def test_width_is_2112_at_the_model_point(geometry):
    assert expand_spec.width(geometry, _expand_point()) == 2112 == rules.selection_width(2048, 4, 64)
    assert expand_spec.k_pools(geometry, _expand_point()) == 512
    assert expand_spec.width(geometry, _expand_point(topk=64)) == 128


def test_expand_inputs_look_like_a_topk_output(geometry):
    point = _expand_point(M=8, context=8192)
    inputs = expand_spec.make_inputs(geometry, point, np.random.default_rng(4))
    assert inputs["pools"].shape == (8, 512) and inputs["pools"].dtype == np.int32
    for m in range(8):
        row, t = inputs["pools"][m], int(inputs["positions"][m])
        assert t == 8192 - m % 4 - 1
        chosen = row[row >= 0]
        assert len(np.unique(chosen)) == len(chosen) and chosen.max() < rules.complete_pools(t, 4)
        assert (len(chosen) == 512) == (m == 0), "stream 0 has no -1 pool, every other stream some"
        assert not (np.diff(chosen) > 0).all(), "random order, not sorted"


def test_expand_reference_is_the_rule_every_stream(geometry):
    point = _expand_point()
    comp, inputs, ref = _case("dsa_expand", point)
    for m in range(6):
        assert np.array_equal(ref["selection"][m], rules.expand_selection(inputs["pools"][m],
                                                                          int(inputs["positions"][m]), 4, 2048, 2112))


def test_all_four_tails_and_minus_one_pools(geometry):
    point = _expand_point(M=4, context=2052)
    comp, inputs, ref = _case("dsa_expand", point)
    for m in range(4):
        n = 2052 - m
        row, pools = ref["selection"][m], inputs["pools"][m]
        tail = np.arange(n // 4 * 4, n)
        assert len(tail) == (n % 4) and np.array_equal(row[2048:2048 + len(tail)], tail)
        assert (row[2048 + len(tail):] == -1).all()
        for i in np.flatnonzero(pools < 0):
            assert (row[4 * i:4 * i + 4] == -1).all()
    assert {(2052 - m) % 4 for m in range(4)} == {0, 1, 2, 3}


@pytest.mark.parametrize("context", [1024, 2048])
def test_the_dense_rule_below_index_topk(geometry, context):
    point = _expand_point(M=4, context=context)
    assert expand_spec.dense(geometry, point).all()
    comp, inputs, ref = _case("dsa_expand", point)
    for m in range(4):
        n = context - m
        assert np.array_equal(ref["selection"][m, :n], np.arange(n)) and (ref["selection"][m, n:] == -1).all()
    assert expand_spec.bytes_moved(geometry, point) == 4 * 4 + 4 * 2112 * 4   # no pools read


def test_expand_numpy_is_the_rule_on_many_rows(geometry):
    """The kernel's per-chunk formula (expand_numpy) against the rule row by row: dense and sparse
    positions, every tail, random -1 pools, two top-k sizes."""
    rng = np.random.default_rng(8)
    for k in (16, 512):
        W = rules.selection_width(4 * k, 4, 64)
        positions = rng.integers(0, 12 * k, size=64).astype(np.int32)
        positions[:4] = [4 * k - 1, 4 * k, 4 * k + 1, 4 * k + 2]                 # the dense boundary
        pools = np.stack([expand_spec.pool_row(rules.complete_pools(int(t), 4), k, rng, int(rng.integers(0, 4)))
                          for t in positions])
        got = kpool_variants.expand_numpy(pools, positions, 4, W)
        want = np.stack([rules.expand_selection(p, int(t), 4, 4 * k, W) for p, t in zip(pools, positions)])
        assert np.array_equal(got, want), k


def test_a_wrong_or_unwritten_slot_fails(geometry):
    point = _expand_point(M=3)
    comp, inputs, ref = _case("dsa_expand", point)
    launch = comp.variant("ref_expand").build(geometry, point, inputs, CPU)
    launch.poison()
    assert (launch.outputs()["selection"].view(np.uint8) == INDEX_POISON_BYTE).all()
    assert not runner.checked(comp, point, launch.outputs(), ref, None)[0].ok
    launch()
    assert runner.checked(comp, point, launch.outputs(), ref, None)[0].ok
    launch.selection[1, 2050] = -1 if launch.selection[1, 2050] >= 0 else 7
    assert not runner.checked(comp, point, launch.outputs(), ref, None)[0].ok


def test_expand_bytes(geometry):
    point = _expand_point(M=4, context=8192)
    assert expand_spec.bytes_moved(geometry, point) == 4 * 512 * 4 + 4 * 4 + 4 * 2112 * 4


def test_expand_axis_rules(geometry):
    assert expand_spec.check_point(geometry, _expand_point(context=1024)) is None   # below topk: dense
    assert "multiple of the pool size" in expand_spec.check_point(geometry, _expand_point(context=1026))
    assert "whole number of pools" in expand_spec.check_point(geometry, _expand_point(topk=2046))


@pytest.mark.parametrize("point", [_expand_point(), _expand_point(context=1024),
                                   _expand_point(M=5, topk=64, context=8196)], ids=str)
def test_ref_expand_passes_through_the_runner(geometry, point):
    comp = registry.get("dsa_expand")
    row = runner.measure(comp, comp.variant("ref_expand"), point, geometry, CPU, QUICK, seed=3, roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["bytes"] == expand_spec.bytes_moved(geometry, point)


def test_every_point_of_the_experiment_is_valid(geometry):
    """The sweep's grid (experiments/experiment/kpool_compress.yaml) passes each component's rules."""
    import itertools

    import yaml

    from harness.fuel import REPO_ROOT

    conf = yaml.safe_load((REPO_ROOT / "experiments/experiment/kpool_compress.yaml").read_text())
    params = {k: str(v).split(",") for k, v in conf["hydra"]["sweeper"]["params"].items()}
    assert conf["timing"]["cache"] == "flush"
    for name, Mn, context in itertools.product(params["component"], params["M"], params["context"]):
        comp = registry.get(name)
        point = {"M": int(Mn), "context": int(context)}
        if "topk" in comp.axis_names:
            point["topk"] = geometry.indexer.index_topk
        assert comp.check_point(geometry, point) is None, (name, point)


@pytest.mark.parametrize("t", [4094, 4095, 4096, 4099, 17])
def test_the_chunked_reference_is_the_rule_itself(t):
    """reference_pools splits the complete pools into chunks (every pool of a chunk complete) and
    must give the rule's own result, bit for bit, whatever the tail."""
    rng = np.random.default_rng(t)
    k, g, ape = rng.standard_normal((4100, 128)), rng.standard_normal((4100, 128)), rng.standard_normal((4, 128))
    want = rules.kpool_compress(k, g, ape, t)
    got = kpool_spec.reference_pools(k, g, ape, t, chunk=100)
    assert got.shape == want.shape == (rules.complete_pools(t, 4), 128) and np.array_equal(got, want)
