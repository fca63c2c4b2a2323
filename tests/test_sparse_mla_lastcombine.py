"""The last-CTA combine (sparse_mla_lastcombine.cuh) on the CPU: nobody can run it before the lead's
GPU call, so NumPy models of what it does.

- The counter protocol (lc_last_cta): CTAs of several rows finishing in random orders, in one wave
  or several (a CTA runs only once an earlier one has left its SM): exactly one CTA a row sees
  splits - 1, it sees every partial of its row written, and the counter is back to 0 for the next
  launch; a protocol without the reset is caught on the second launch.
- The merge's work split (lc_merge, step 3: thread t = head t / 4, float4 columns 4 j + t % 4 in
  batches of LC_ITEMS, the splits in order): every out element is written once, from the partials
  of its own head and columns, and the arithmetic in that order is sparse_mla_combine's bit for bit
  (both modelled in float32 with the same operations: the model checks the mapping and the order,
  the hardware's rounding is the GPU test's), with an empty split, an all-empty head row and an
  empty stream.
- The declarations: every last-CTA design's kernel is in its source, shares its base design's launch
  defines and latent, and each _lc variant has its two-kernel twin registered.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness import registry
from kernels.sparse_mla import variants

HEADS, DIM = 64, 512
HEADER = (variants.HERE / variants.LC_HEADER).read_text()


def header_define(name: str) -> int:
    return int(re.search(rf"#define\s+{name}\s+(\d+)", HEADER).group(1))


LC_THREADS, LC_ITEMS, LC_MAX_SPLITS = (header_define(n) for n in ("LC_THREADS", "LC_ITEMS", "LC_MAX_SPLITS"))


# ---- the counter ------------------------------------------------------------------------------

def run_launch(count: np.ndarray, splits: int, rng, slots: int, reset: bool = True) -> dict:
    """One launch of grid (splits, M) on `slots` SMs (one CTA an SM): CTAs start in grid order as
    SMs free up and finish in a random order; each one writes its partial, then adds to count[m]
    (the fence before the add orders the write); the one that gets splits - 1 resets (if `reset`)
    and merges. Returns {m: (the last CTA, the splits whose partials it could see)}."""
    M = len(count)
    pending = [(s, m) for m in range(M) for s in range(splits)]  # blockIdx order: x fastest
    running, written, merged = [], set(), {}
    while pending or running:
        while pending and len(running) < slots:
            running.append(pending.pop(0))
        s, m = running.pop(int(rng.integers(len(running))))
        written.add((m, s))
        done = int(count[m])
        count[m] += 1  # atomicAdd: returns the old value
        if done == splits - 1:
            if reset:
                count[m] = 0
            assert m not in merged, f"row {m} merged twice"
            merged[m] = (s, {t for (r, t) in written if r == m})
    return merged


@pytest.mark.parametrize("M,splits,slots", [(1, 33, 132), (32, 4, 132), (3, 66, 132), (5, 7, 3), (2, 1, 1)])
def test_each_row_has_one_last_cta_that_sees_every_split_and_leaves_the_counter_zero(M, splits, slots):
    rng = np.random.default_rng(M * 1000 + splits)
    count = np.zeros(M, np.int64)  # zeroed once, at build
    for launch in range(3):  # the next launch starts from what this one left
        merged = run_launch(count, splits, rng, slots)
        assert sorted(merged) == list(range(M)), launch
        for m, (_, seen) in merged.items():
            assert seen == set(range(splits)), (launch, m)
        assert (count == 0).all(), launch


def test_the_counter_model_tells_a_protocol_without_the_reset():
    rng = np.random.default_rng(5)
    count = np.zeros(4, np.int64)
    assert len(run_launch(count, 8, rng, 132, reset=False)) == 4
    assert run_launch(count, 8, rng, 132, reset=False) == {}  # nobody sees splits - 1 again


# ---- the merge --------------------------------------------------------------------------------

def partials(rng, M: int, splits: int, empty_split: bool, empty_head: bool, empty_row: bool):
    """part_acc [M][splits][64][512], part_ml [M][splits][64][2] float32 as the split kernels
    write them: an empty split (max -inf, sum 0, acc 0) in row 0, a head with no valid slot in any
    split, and a stream with none at all."""
    mx = rng.normal(0, 3, (M, splits, HEADS)).astype(np.float32)
    sm = rng.uniform(1, 40, (M, splits, HEADS)).astype(np.float32)
    acc = rng.normal(0, 5, (M, splits, HEADS, DIM)).astype(np.float32)
    empties = []
    if empty_split and splits > 1:
        empties.append((0, 1, slice(None)))
    if empty_head:
        empties.append((M - 1, slice(None), 5))
    if empty_row:
        empties.append((M - 1 if M > 1 and not empty_head else 0, slice(None), slice(None)))
    for where in empties:
        mx[where], sm[where], acc[where] = -np.inf, 0.0, 0.0
    return acc, np.stack([mx, sm], axis=-1)


def fma(a, b, c):
    """float32 a * b + c as one rounding, as fmaf (float64 holds the exact product of two float32)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def combine_model(acc, ml):
    """sparse_mla_combine (sparse_mla_combine.cuh), all (m, h, d) at once: gmax, then L and acc in
    split order skipping empty splits; out = acc / L, lse = gmax + log L; an empty row 0 / -inf.
    exp / log / division stand for the kernel's (the same in both models)."""
    M, splits = ml.shape[:2]
    gmax = np.full((M, HEADS), -np.inf, np.float32)
    for s in range(splits):
        gmax = np.maximum(gmax, ml[:, s, :, 0])
    L = np.zeros((M, HEADS), np.float32)
    a = np.zeros((M, HEADS, DIM), np.float32)
    for s in range(splits):
        mx = ml[:, s, :, 0]
        take = (gmax != -np.inf) & (mx != -np.inf)
        with np.errstate(invalid="ignore"):
            f = np.exp(mx - gmax).astype(np.float32)
        L = np.where(take, fma(ml[:, s, :, 1], f, L), L)
        a = np.where(take[..., None], fma(acc[:, s], f[..., None], a), a)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((gmax == -np.inf)[..., None], np.float32(0), (a / L[..., None]).astype(np.float32))
        lse = np.where(gmax == -np.inf, np.float32(-np.inf), (gmax + np.log(L)).astype(np.float32))
    return out, lse


def lc_merge_model(acc, ml, quarter: int = 4):
    """lc_merge of every row as the kernel's threads do it: step 2 (head t < 64: gmax, L and the
    weight table wt[s][h], -1 for a skipped split) and step 3 (thread t: head t / 4, float4 columns
    4 j + t % 4, batches of LC_ITEMS, the splits in order, a split accumulated only where its
    weight is >= 0), reading part_acc by the kernel's flat offsets."""
    M, splits = ml.shape[:2]
    flat = acc.reshape(-1)
    out = np.full((M, HEADS, DIM), np.nan, np.float32)
    written = np.zeros((M, HEADS, DIM), np.int64)
    lse = np.full((M, HEADS), np.nan, np.float32)
    t = np.arange(LC_THREADS)
    h, q = t >> 2, t & 3
    for m in range(M):
        # step 2, the threads t < 64 (head t), vectorised over t
        sml = ml[m]                                  # [splits][64][2], staged as the kernel stages it
        gmax = np.full(HEADS, -np.inf, np.float32)
        for s in range(splits):
            gmax = np.maximum(gmax, sml[s, :, 0])
        L = np.zeros(HEADS, np.float32)
        wt = np.full((splits, HEADS), -1.0, np.float32)
        for s in range(splits):
            take = (gmax != -np.inf) & (sml[s, :, 0] != -np.inf)
            with np.errstate(invalid="ignore"):
                f = np.exp(sml[s, :, 0] - gmax).astype(np.float32)
            wt[s] = np.where(take, f, np.float32(-1))
            L = np.where(take, fma(sml[s, :, 1], f, L), L)
        with np.errstate(divide="ignore"):
            lse[m] = np.where(gmax == -np.inf, np.float32(-np.inf), (gmax + np.log(L)).astype(np.float32))
        # step 3, every thread t; arow = ((m splits) 64 + h) 512 + 4 (t % 4), split s at + s 64 512
        arow = (m * splits * HEADS + h) * DIM + quarter * q
        for b in range(32 // LC_ITEMS):
            for k in range(LC_ITEMS):
                j = LC_ITEMS * b + k
                col = 4 * (4 * j + q)                               # out column of thread t's item
                a = np.zeros((LC_THREADS, 4), np.float32)
                for s in range(splits):
                    v = flat[(arow + s * HEADS * DIM + 16 * j)[:, None] + np.arange(4)]
                    fc = wt[s, h]
                    a = np.where((fc >= 0)[:, None], fma(v, fc[:, None], a), a)
                empty = gmax[h] == -np.inf
                with np.errstate(divide="ignore", invalid="ignore"):
                    val = np.where(empty[:, None], np.float32(0), (a / L[h][:, None]).astype(np.float32))
                for e in range(4):
                    out[m, h, col + e] = val[:, e]
                    np.add.at(written[m], (h, col + e), 1)
    return out, lse, written


@pytest.mark.parametrize("M,splits,empty_split,empty_head,empty_row",
                         [(1, 33, True, False, False), (2, 4, True, True, False), (3, 2, False, False, True),
                          (1, 1, False, True, False)])
def test_the_merge_writes_every_element_once_as_the_combine_does(M, splits, empty_split, empty_head, empty_row):
    rng = np.random.default_rng(M + 10 * splits)
    acc, ml = partials(rng, M, splits, empty_split, empty_head, empty_row)
    out, lse, written = lc_merge_model(acc, ml)
    assert (written == 1).all()
    ref_out, ref_lse = combine_model(acc, ml)
    assert np.array_equal(out.view(np.uint32), ref_out.view(np.uint32))
    assert np.array_equal(lse.view(np.uint32), ref_lse.view(np.uint32))
    if empty_row:
        assert (out[M - 1 if M > 1 else 0] == 0).all() and np.isneginf(lse[M - 1 if M > 1 else 0]).all()


def test_the_merge_model_tells_a_wrong_column_map():
    """A thread reading the wrong quarter of its head's 16 columns (arow's 4 (t % 4) off) must not
    pass, though it still writes every element once."""
    rng = np.random.default_rng(3)
    acc, ml = partials(rng, 1, 3, False, False, False)
    ref_out, _ = combine_model(acc, ml)
    for quarter in (0, 2):
        out, _, written = lc_merge_model(acc, ml, quarter=quarter)
        assert (written == 1).all() and not np.array_equal(out, ref_out), quarter


def test_the_table_and_the_thread_split_fit_the_kernels():
    # LC_TABLE_BYTES: the flag word, sml [splits][64][2], wt [splits][64], gl [64][2]
    table = re.search(r"#define LC_TABLE_BYTES\(splits\) \((.*)\)\n", HEADER).group(1)
    assert table == "16 + (splits) * (128 + 64) * 4 + SMLA_HEADS * 2 * 4"
    need = 16 + LC_MAX_SPLITS * (128 + 64) * 4 + HEADS * 2 * 4
    assert need <= 196608  # sQ + the ring of both kernels (their X_AT), where each places the table
    assert HEADS * DIM // 4 == LC_THREADS * 32 and 32 % LC_ITEMS == 0
    assert max(variants.one_wave_splits(M, 2112, 132) for M in range(1, 133)) <= LC_MAX_SPLITS
    assert max(variants.pick_splits(M, 2112, 132, 32) for M in range(1, 133)) <= LC_MAX_SPLITS


# ---- the declarations -------------------------------------------------------------------------

def test_each_last_cta_design_is_its_base_design_with_its_own_kernel():
    names = {v.name for v in registry.get("sparse_mla").variants}
    for lc, (base, symbol) in variants.LAST_CTA_DESIGNS.items():
        source, sym, smem, threads, latent = variants.SPLIT_DESIGNS[lc]
        assert (source, smem, threads, latent) == tuple(variants.SPLIT_DESIGNS[base][i] for i in (0, 2, 3, 4)), lc
        assert sym == symbol and re.search(rf"\b{symbol}\(", (variants.HERE / source).read_text()), lc
        assert variants.SPLIT_OPTIONS[lc] == variants.SPLIT_OPTIONS[base], lc
        assert f"{lc}_1wave" in names, lc
    for lc, twin in variants.LAST_CTA_TWINS.items():
        assert lc in names and twin in names and lc.replace("_lc", "") == twin


def test_the_last_cta_variants_refuse_the_other_latent_in_one_line(geometry):
    point = {"M": 4, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 1}
    for name, latent, other in (("split_wgmma_lc_1wave", "bf16", "fp8"), ("split_wgmma_ws_fp8_lc_1wave", "fp8", "bf16")):
        variant = registry.get("sparse_mla").variant(name)
        reason = variant.supports(geometry, {**point, "latent_dtype": other})
        assert reason and "\n" not in reason and f"reads the {latent} latent" in reason, (name, reason)


def test_a_row_of_more_splits_than_the_merge_table_holds_is_refused_in_one_line(geometry):
    """split_wgmma_lc's pick_splits at a dense selection of 1M tokens (W = 8192: 256 splits of 32 slots)."""
    point = {"M": 1, "context": 1048576, "selection": "dense", "page_size": 64, "arena_scale": 1, "latent_dtype": "bf16"}
    W = variants.spec.width(geometry, point)
    if variants.pick_splits(1, W, 132, 32) <= LC_MAX_SPLITS:
        pytest.skip(f"W = {W} gives no more than {LC_MAX_SPLITS} splits")
    reason = registry.get("sparse_mla").variant("split_wgmma_lc").supports(geometry, point)
    assert reason and "\n" not in reason and f"holds {LC_MAX_SPLITS}" in reason, reason
