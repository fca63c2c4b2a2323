"""Sparse MLA on the CPU: the paged arena and its page table, every selection generator, the
float64 reference against torch's own softmax attention, the byte-exact gather check, a row with
no valid slot, and both components through the runner; the FP8 latent (the arena built on the
backend, its encoder against kernels/fp8.py, the reference over the dequantized rows, bytes, the
variants' latent dtypes, and a NumPy model of how split_mma_fp8 folds the row scales in)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness import backends, registry, runner, verify
from kernels import fp8
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16
from kernels.sparse_mla import spec

QUICK = SimpleNamespace(warmup=0, min_reps=2, max_reps=3, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)


def _point(**kw):
    return {"M": 5, "context": 4096, "selection": "grouped", "page_size": 64, "arena_scale": 1, "latent_dtype": "bf16",
            **kw}


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
@pytest.mark.parametrize("selection,latent", [("grouped", "bf16"), ("dense", "bf16"), ("grouped", "fp8")])
def test_cpu_variants_pass_on_a_sample_of_streams(geometry, component, variant, selection, latent):
    comp = registry.get(component)
    point = _point(selection=selection, context=8192, latent_dtype=latent)
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

    for name, (source, _, smem_define, threads_define, _) in variants.SPLIT_DESIGNS.items():
        assert variants.source_define(source, smem_define) > 48 * 1024, name
        if threads_define:
            assert variants.source_define(source, threads_define) % 32 == 0, name
    with pytest.raises(RuntimeError, match="defines no NOPE"):
        variants.source_define("split_cc.cu", "NOPE")


def _kernel_body(source: str, symbol: str) -> str:
    """The text of function ``symbol`` in kernels/sparse_mla/``source`` (or a header of the folder),
    from its name (at the start of a line, or after ``void``) to the closing brace at column 0."""
    from kernels.sparse_mla import variants

    here = variants.HERE
    texts = [(here / source).read_text()] + [(here / h).read_text() for h in sorted(p.name for p in here.glob("*.cuh"))]
    for text in texts:
        found = re.search(rf"(^|void ){symbol}\(", text, re.MULTILINE)
        if found:
            return text[found.start():text.index("\n}", found.start())]
    raise AssertionError(f"{symbol} not found from {source}")


def test_a_programmatic_pair_waits_before_it_reads_what_the_launch_before_wrote():
    """A design launched as a programmatic pair (PROGRAMMATIC): its combine waits on griddepcontrol
    before the first read of the partials, and its split kernel waits before its first write (the
    harness's contract for a programmatically launched step: a previous combine may still read
    part_acc) and triggers its dependents; every other design's step stays in plain stream order, where
    a combine without the wait would read partials still being written."""
    from kernels.sparse_mla import variants

    assert variants.PROGRAMMATIC
    for name in variants.PROGRAMMATIC:
        source, split_symbol = variants.SPLIT_DESIGNS[name][:2]
        combine = variants.combine_kernel(name)
        assert combine.endswith("_pdl"), name
        body = _kernel_body(source, combine)
        assert body.index("SMLA_GRID_WAIT()") < body.index("smla_combine("), name
        split = _kernel_body(source, split_symbol)
        assert split.index("smla_pdl_enter()") < split.index("ws_bulkp<"), name
        assert (name in variants.BF16_PARTIALS) == ("bf16" in combine), name
    enter = _kernel_body("split_wgmma_ws.cu", "smla_pdl_enter")
    assert enter.index("griddepcontrol.wait") < enter.index("griddepcontrol.launch_dependents")
    header = (variants.HERE / "sparse_mla_combine.cuh").read_text()
    assert re.search(r'__CUDA_ARCH__ >= 900\n#define SMLA_GRID_WAIT\(\) asm volatile\("griddepcontrol.wait;"', header)
    for name in set(variants.SPLIT_DESIGNS) - set(variants.PROGRAMMATIC):
        body = _kernel_body(variants.SPLIT_DESIGNS[name][0], variants.combine_kernel(name))
        assert "griddepcontrol" not in body and "SMLA_GRID_WAIT" not in body, name


def test_the_tma_gather_is_launched_with_what_its_source_declares():
    """gather_tma's launcher reads its block and ring size from gather.cu (literals, as
    source_define needs): 6 stages of 32 rows of 1 KiB and 1 KiB of alignment slack, 8 warps."""
    from kernels.sparse_mla import variants

    stages, rows = variants.source_define("gather.cu", "GTMA_STAGES"), variants.source_define("gather.cu", "GTMA_ROWS")
    assert variants.source_define("gather.cu", "GTMA_SMEM") == stages * rows * 1024 + 1024 <= 227 * 1024
    assert variants.source_define("gather.cu", "GTMA_THREADS") == variants.THREADS


@pytest.mark.parametrize("M,W,expect", [(32, 2112, 11), (8, 2112, 33), (1, 2112, 66), (64, 8192, 4)])
def test_splits_fill_the_device(M, W, expect):
    from kernels.sparse_mla.variants import pick_splits

    splits = pick_splits(M, W, 132, 32)
    assert splits == expect and (W // 32) % splits == 0


# ---- FP8 latent ---------------------------------------------------------------------------------

def test_the_backend_encoder_matches_fp8_encode_code_for_code():
    """The arena build's vectorised encoder (the one CuPy runs) against kernels/fp8.py, itself
    tested against torch's float8_e4m3fn: every value, every midpoint (ties to even), both
    signs, the subnormal edge, saturation, and magnitudes over the whole range."""
    values = fp8.TABLE[:127]
    mids = (values[1:] + values[:-1]) / 2
    rng = np.random.default_rng(7)
    spread = rng.standard_normal(20000) * np.exp(rng.uniform(-14, 6.5, 20000))
    x = np.concatenate([values, -values, mids, -mids, [0.0, -0.0, 2.0 ** -6, 2.0 ** -6 * (1 - 2 ** -12), 448,
                                                       449, 464, 470, -1000], np.clip(spread, -460, 460)])
    x = x.astype(np.float32)
    got, want = spec.encode_e4m3_xp(np, x), fp8.encode_e4m3(x)
    assert got.dtype == np.uint8
    assert np.array_equal(got, want), x[got != want][:5]


def test_fp8_arena_is_the_normal_draw_quantized_a_row_at_a_time(geometry):
    point = _point(M=2, latent_dtype="fp8")
    arena = spec.build_arena(geometry, point, backends.CpuBackend(), seed=9)
    rows = spec.arena_total_rows(point)
    assert arena.dtype == np.uint8 and arena.nbytes == spec.arena_nbytes(geometry, point) == rows * 516
    codes, scale = spec.fp8_parts(arena, rows)
    assert codes.shape == (rows, 512) and scale.shape == (rows,) and np.shares_memory(codes, arena)
    # the draw the build quantized, regenerated chunk by chunk from the same seed
    draw_rng = np.random.default_rng(9)
    draw = np.concatenate([draw_rng.standard_normal((min(rows, s + spec.FP8_BUILD_ROWS) - s, 512), dtype=np.float32)
                           for s in range(0, rows, spec.FP8_BUILD_ROWS)])
    want_scale = np.abs(draw).max(axis=1) / np.float32(448)
    assert np.array_equal(scale, want_scale)
    assert np.array_equal(codes, fp8.encode_e4m3(draw / want_scale[:, None]))
    latent = fp8.dequantize_rows(codes, scale)
    # each row's largest element is exactly +-448 codes; the round trip is within e4m3's half step
    assert np.array_equal(np.abs(latent).max(axis=1), np.float32(448) * scale)
    assert (np.abs(latent - draw) <= np.abs(draw) / 16 + scale[:, None] * 2.0 ** -10).all()
    assert np.array_equal(arena, spec.build_arena(geometry, point, backends.CpuBackend(), seed=9))


def test_fp8_reference_attends_over_the_dequantized_rows_and_checksums_codes_and_scales(geometry):
    comp = registry.get("sparse_mla")
    point = _point(M=3, latent_dtype="fp8", page_size=1)
    inputs, ref = runner._case(comp, geometry, point, 11, None, backends.CpuBackend())
    arena, rows_total = inputs.resident["arena"], spec.arena_total_rows(point)
    m = 2
    # the rows of stream m by the definition (page table, then byte offsets in the flat buffer)
    toks = inputs["selection"][m][inputs["selection"][m] >= 0]
    rows = inputs["page_table"][m][toks].astype(np.int64)               # page_size 1
    codes = arena[(rows[:, None] * 512 + np.arange(512)[None, :])]
    scale = np.stack([arena[rows_total * 512 + 4 * r:rows_total * 512 + 4 * r + 4] for r in rows]).view(np.float32)[:, 0]
    out, lse = spec.attend(bf16_to_float(inputs["q"][m]).astype(np.float64),
                           fp8.dequantize_rows(codes, scale).astype(np.float64), geometry.mla.softmax_scale)
    assert np.allclose(ref["out"][m], out, rtol=1e-12, atol=1e-15) and np.allclose(ref["lse"][m], lse, rtol=1e-12)
    words = codes.view(np.uint32).reshape(-1, 4)
    assert ref["checksum"].shape == (3, 5)
    assert np.array_equal(ref["checksum"][m][:4], np.bitwise_xor.reduce(words, axis=0))
    assert ref["checksum"][m][4] == np.bitwise_xor.reduce(scale.view(np.uint32))


@pytest.mark.parametrize("where", ["code", "scale"])
def test_the_fp8_gather_check_is_byte_exact(geometry, where):
    """One flipped bit in one selected row's codes, or in its scale, fails the checksum."""
    comp = registry.get("sparse_gather")
    point = _point(M=3, latent_dtype="fp8")
    inputs, ref = runner._case(comp, geometry, point, 4, None, backends.CpuBackend())
    launch = comp.variant("numpy_gather").build(geometry, point, inputs, backends.CpuBackend())
    launch.poison()
    launch()
    assert all(c.ok for c in runner.checked(comp, point, launch.outputs(), ref, None))
    row = spec.arena_rows(point, inputs["page_table"], inputs["selection"])[1, 7]
    codes, scale = spec.fp8_parts(inputs.resident["arena"], spec.arena_total_rows(point))
    if where == "code":
        codes[row, 100] ^= np.uint8(1)
    else:
        scale.view(np.uint32)[row] ^= np.uint32(1)
    launch()
    bad = [c for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok]
    assert bad and bad[0].first_bad[0][0] == 1, bad


def test_fp8_rows_count_516_bytes(geometry):
    p16, p8 = _point(M=4), _point(M=4, latent_dtype="fp8")
    slots = spec.valid_slots(geometry, p16)
    assert spec.row_bytes(geometry, p8) == 516 and spec.row_bytes(geometry, p16) == 1024
    assert spec.bytes_moved(geometry, p16) - spec.bytes_moved(geometry, p8) == slots * (1024 - 516)
    # the FP8 checksum has a fifth word (the scales'): 4 bytes more a stream
    assert spec.gather_bytes(geometry, p16) - spec.gather_bytes(geometry, p8) == slots * (1024 - 516) - 4 * 4
    assert spec.arena_nbytes(geometry, p8) == spec.arena_total_rows(p8) * 516


def test_each_variant_reads_one_latent_dtype_and_says_so(geometry):
    mla = registry.get("sparse_mla")
    p16, p8 = _point(), _point(latent_dtype="fp8")
    for name in ("split_cc", "split_mma"):
        reason = mla.variant(name).supports(geometry, p8)
        assert reason and "split_mma_fp8" in reason and "bf16" in reason, reason
    reason = mla.variant("split_mma_fp8").supports(geometry, p16)
    assert reason and "fp8" in reason and "split_mma" in reason, reason
    assert mla.variant("split_mma_fp8").supports(geometry, p8) is None
    assert "BF16" in mla.variant("flashinfer_mla").supports(geometry, p8)
    assert registry.get("sparse_gather").variant("gather_xor").supports(geometry, p8) is None


def _bf16(x):
    return bf16_to_float(float_to_bf16(np.asarray(x, dtype=np.float64))).astype(np.float64)


def test_split_mma_fp8_arithmetic_model_matches_the_dequantized_reference(geometry):
    """A NumPy model of split_mma_fp8's arithmetic, tile by tile with the online softmax: scores
    (softmax_scale x sc_j) x (q . code_j) from exact BF16 codes, weights bf16(p_j x sc_j) into
    O, bf16(p_j x sc_j) / sc_j into l, invalid slots zero codes, scale 0 and 1 / sc taken as 0;
    O / l must meet the component's tolerance against float64 attention over the dequantized rows
    (what the GPU check will apply), and a model that forgot the scale in l must not."""
    rng = np.random.default_rng(3)
    scale_sm, n, tile = geometry.mla.softmax_scale, 200, 32
    q = bf16_to_float(float_to_bf16(rng.standard_normal((64, 512)))).astype(np.float64)
    draw = rng.standard_normal((n, 512)) * rng.uniform(0.5, 2.0, (n, 1))      # rows of unequal norms
    codes, sc = fp8.quantize_rows(draw)
    valid = rng.random(n) > 0.1
    code_v = np.where(valid[:, None], fp8.decode_e4m3(codes), 0).astype(np.float64)   # zero-filled slots
    sc_v = np.where(valid, sc, 0).astype(np.float64)
    want_out, want_lse = spec.attend(q, fp8.dequantize_rows(codes[valid], sc[valid]).astype(np.float64), scale_sm)

    def model(fold_inverse: bool):
        m_run, l_run, acc = np.full(64, -np.inf), np.zeros(64), np.zeros((64, 512))
        for j0 in range(0, n, tile):
            sl = slice(j0, j0 + tile)
            s = np.where(valid[sl], (scale_sm * sc_v[sl]) * (q @ code_v[sl].T), -np.inf)
            mn = np.maximum(m_run, s.max(axis=1))
            alpha = np.where(np.isneginf(mn), 1.0, np.exp(m_run - mn))
            p = np.where(np.isneginf(mn)[:, None], 0.0, np.exp(s - mn[:, None]))
            w = _bf16(p * sc_v[sl])
            inv = np.where(valid[sl], 1 / np.where(valid[sl], sc_v[sl], 1), 0) if fold_inverse else np.ones(len(s[0]))
            l_run = l_run * alpha + (w * inv).sum(axis=1)
            acc = acc * alpha[:, None] + w @ code_v[sl]
            m_run = mn
        return acc / l_run[:, None], m_run + np.log(l_run)

    checks, want = spec.checks(_point(latent_dtype="fp8")), {"out": want_out, "lse": want_lse}
    out, lse = model(True)
    assert verify.compare("out", _bf16(out), want, checks["out"]).ok
    assert verify.compare("lse", lse, want, checks["lse"]).ok
    out, lse = model(False)
    assert not verify.compare("out", _bf16(out), want, checks["out"]).ok


@pytest.mark.parametrize("M,W,expect", [(32, 2112, 4), (8, 2112, 16), (1, 2112, 33), (64, 2112, 2), (64, 8192, 2),
                                        (200, 2112, 1)])
def test_one_wave_splits_fit_one_wave_of_long_chunks(M, W, expect):
    """The _1wave variants' split counts: never more CTAs than SMs, never a chunk under 64 slots;
    ragged chunks (W / splits not a tile multiple) are what the kernels' masking is for."""
    from kernels.sparse_mla.variants import one_wave_splits

    splits = one_wave_splits(M, W, 132)
    assert splits == expect
    assert M * splits <= 132 or splits == 1
    assert W // splits >= 64
