"""Sparse MLA on the CPU: the paged arena and its page table, every selection generator, the
float64 reference against torch's own softmax attention, the byte-exact gather check, a row with
no valid slot, and both components through the runner."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness import backends, registry, runner
from kernels.kda_decode.reference import bf16_to_float
from kernels.sparse_mla import spec

QUICK = SimpleNamespace(warmup=0, min_reps=2, max_reps=3, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)


def _point(**kw):
    return {"M": 5, "context": 4096, "selection": "grouped", "page_size": 64, "arena_scale": 1, **kw}


def test_width_is_topk_plus_the_longest_tail_padded_to_64(geometry):
    assert spec.width(geometry, _point()) == 2112            # ceil((2048 + 3) / 64) * 64, seed 003 §8.5
    assert spec.width(geometry, _point(selection="dense")) == 8192


@pytest.mark.parametrize("selection", ["grouped", "scattered", "dense"])
def test_selection_rows_hold_distinct_visible_tokens_the_tail_then_minus_one(geometry, selection):
    point = _point(selection=selection, M=8, context=12288)
    rng = np.random.default_rng(3)
    kpool, topk = geometry.indexer.kpool, geometry.indexer.index_topk
    tails = set()
    for m in range(8):
        row = spec.selection_row(geometry, point, m, rng)
        n = spec.visible(geometry, point, m)                 # the query at n - 1
        valid = row[row >= 0]
        assert row.dtype == np.int32 and len(row) == spec.width(geometry, point)
        assert (row[len(valid):] == -1).all(), "all -1 slots come after the tokens"
        assert len(np.unique(valid)) == len(valid) and valid.min() >= 0 and valid.max() < n
        if selection == "dense":
            assert np.array_equal(np.sort(valid), np.arange(n - 8192, n))
            continue
        tail = np.arange(n // kpool * kpool, n)
        tails.add(len(tail))
        assert np.array_equal(valid[topk:], tail), "the tail follows the top-k"
        chosen = valid[:topk]
        assert chosen.max() < n // kpool * kpool, "only complete pools are selected"
        if selection == "grouped":
            pools = chosen.reshape(-1, kpool)
            assert (pools == pools[:, :1] + np.arange(kpool)).all() and (pools[:, 0] % kpool == 0).all()
            assert len(np.unique(pools[:, 0])) == topk // kpool
    assert selection == "dense" or tails == {0, 1, 2, 3}, "the streams' tails cover 0..kpool-1 tokens"


def test_page_table_maps_every_stream_to_its_own_pages(geometry):
    point = _point(M=4, arena_scale=3)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(0))
    table = inputs["page_table"]
    assert table.shape == (4, 4096 // 64) and table.dtype == np.int32
    assert len(np.unique(table)) == table.size and table.min() >= 0 and table.max() < spec.arena_pages(point)
    rows = spec.arena_rows(point, table, inputs["selection"])
    m, j = 2, 17
    t = inputs["selection"][m, j]
    assert rows[m, j] == table[m, t // 64] * 64 + t % 64
    assert (rows[inputs["selection"] < 0] == -1).all()
    assert spec.arena_nbytes(geometry, point) == 4 * 64 * 3 * 64 * 512 * 2


def test_page_size_1_is_a_token_level_page_table(geometry):
    point = _point(M=2, page_size=1)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(1))
    rows = spec.arena_rows(point, inputs["page_table"], inputs["selection"])
    sel = inputs["selection"]
    assert (rows[sel >= 0] == inputs["page_table"][np.nonzero(sel >= 0)[0], sel[sel >= 0]]).all()


def test_arena_is_generated_on_the_backend_as_bf16_normals(geometry):
    point = _point(M=2)
    arena = spec.build_arena(geometry, point, backends.CpuBackend(), seed=9)
    assert arena.dtype == np.uint16 and arena.nbytes == spec.arena_nbytes(geometry, point)
    values = bf16_to_float(arena)
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1) < 0.01 and np.isfinite(values).all()
    assert np.array_equal(arena, spec.build_arena(geometry, point, backends.CpuBackend(), seed=9))


def test_reference_matches_torch_attention_and_an_empty_row(geometry):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((64, 512))
    c = rng.standard_normal((300, 512))
    out, lse = spec.attend(q, c, 1 / 16)
    s = torch.from_numpy(q) @ torch.from_numpy(c).T / 16
    assert np.allclose(out, (torch.softmax(s, -1) @ torch.from_numpy(c)).numpy(), rtol=1e-12, atol=1e-12)
    assert np.allclose(lse, torch.logsumexp(s, -1).numpy(), rtol=1e-12)
    out, lse = spec.attend(q, c[:0], 1 / 16)
    assert (out == 0).all() and np.isneginf(lse).all()


@pytest.mark.parametrize("component,variant", [("sparse_mla", "ref_sparse_mla"), ("sparse_gather", "numpy_gather")])
@pytest.mark.parametrize("selection", ["grouped", "dense"])
def test_cpu_variants_pass_on_a_sample_of_streams(geometry, component, variant, selection):
    comp = registry.get(component)
    point = _point(selection=selection, context=8192)
    row = runner.measure(comp, comp.variant(variant), point, geometry, backends.CpuBackend(), QUICK, seed=2,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["ref_sample"] == "streams 0, 1, 3, 4 of 5"
    assert row["resident_bytes"] == spec.arena_nbytes(geometry, point)


def test_the_gather_check_is_byte_exact(geometry):
    """One flipped bit in one selected row changes the checksum: a gather that read a wrong row
    (or a neighbour of the right one) fails."""
    comp = registry.get("sparse_gather")
    point = _point(M=3)
    inputs, ref = runner._case(comp, geometry, point, 4, None, backends.CpuBackend())
    launch = comp.variant("numpy_gather").build(geometry, point, inputs, backends.CpuBackend())
    launch.poison()
    launch()
    assert all(c.ok for c in runner.checked(comp, point, launch.outputs(), ref, None))
    rows = spec.arena_rows(point, inputs["page_table"], inputs["selection"])
    arena = inputs.resident["arena"]
    arena[rows[1, 7], 100] ^= np.uint16(1)
    launch()
    bad = [c for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok]
    assert bad and bad[0].first_bad[0][0] == 1, bad


def test_context_too_short_for_the_selection_is_one_line(geometry):
    assert "allowed: context >= 2051" in spec.check_point(geometry, _point(context=2048))
    assert spec.check_point(geometry, _point(context=2048, selection="dense")) is None
    assert "multiple of the pool size" in spec.check_point(geometry, _point(context=4097))


def test_bytes_count_the_selected_rows_once(geometry):
    point = _point(M=4)
    tails = sum((4096 - m % 4) % 4 for m in range(4))  # stream m sees 4096 - m % 4 tokens
    assert spec.valid_slots(geometry, point) == 4 * 2048 + tails
    assert spec.bytes_moved(geometry, point) - spec.gather_bytes(geometry, point) == \
        2 * 4 * 64 * 512 * 2 + 4 * 64 * 4 - 4 * 16


def test_one_token_pages_count_only_the_entries_the_selection_reads(geometry):
    """With page_size 1 the page table is context entries long; a gather reads one entry a valid
    slot, so that (not the table) is in the byte count, as with 64-token pages."""
    p64, p1 = _point(M=2, context=262144), _point(M=2, context=262144, page_size=1)
    slots = spec.valid_slots(geometry, p64)
    assert spec.page_entries_bytes(geometry, p1) == spec.page_entries_bytes(geometry, p64) == slots * 4
    assert spec.bytes_moved(geometry, p1) == spec.bytes_moved(geometry, p64)
    short = _point(M=1, context=4096, selection="dense")      # 64 pages, 4096 slots: the whole table
    assert spec.page_entries_bytes(geometry, short) == 64 * 4


def test_a_split_design_is_launched_with_what_its_source_declares():
    """The dynamic shared memory a split kernel expects is read from its own #define, so the
    launcher and the kernel cannot disagree."""
    from kernels.sparse_mla import variants

    for name, (source, _, smem_define, threads_define) in variants.SPLIT_DESIGNS.items():
        assert variants.source_define(source, smem_define) > 48 * 1024, name
        if threads_define:
            assert variants.source_define(source, threads_define) % 32 == 0, name
    with pytest.raises(RuntimeError, match="defines no NOPE"):
        variants.source_define("split_cc.cu", "NOPE")


@pytest.mark.parametrize("M,W,expect", [(32, 2112, 11), (8, 2112, 33), (1, 2112, 66), (64, 8192, 4)])
def test_splits_fill_the_device(M, W, expect):
    from kernels.sparse_mla.variants import pick_splits

    splits = pick_splits(M, W, 132, 32)
    assert splits == expect and (W // 32) % splits == 0
