"""split_wgmma on the CPU (no GPU can check it before its first run): NumPy models of what the
kernel hands the hardware and of what the hardware does with it.

- The shared-memory placement (split_wgmma.cu's wg_swz) and the hardware's read of a SWIZZLE_128B
  descriptor (start, LBO, SBO; the XOR of address bits [4, 7) with [7, 10) on the absolute
  address), for both descriptor forms the kernel builds: K-major for S (q as A, the tile as B)
  and MN-major for PV (the tile as the transposed B): every element of every k-step of both
  warpgroups reads back the q / tile element the math needs. A swapped LBO / SBO must not.
- The FlashAttention-3 register reuse: wgmma's m64nN f32 accumulator layout (PTX ISA, "Register
  fragment layout for accumulator D") packed as the kernel packs it is the m64k16 bf16 A fragment
  (the same section's A figure) of the slots that k-step multiplies (CUTLASS 7107b05
  mma_traits_sm90_gmma.hpp CLayout_64xN, line 434, and ALayout_64x16, line 451, agree).
- The AHEAD chain of token / page registers: the rows each iteration issues and the validity it
  masks with are the tiles the kernel means, for ragged chunks.
- The per-tile algorithm (masks, the -inf guard, the running max and sum, the bf16-rounded P, the
  partial states and the combine) against the float64 reference, with an empty split and a ragged
  last tile.
- ``supports``: the FP8 latent refused with one line naming the designs that read it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness import registry
from harness.fuel import REPO_ROOT as REPO_ROOT_WG
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16
from kernels.sparse_mla import spec, variants

TILE = 64
STAGE = 65536          # split_wgmma.cu WG_STAGE_BYTES: one [64][512] bf16 tile
RING_AT = 65536        # WG_RING_AT (sQ at 0)
# The kernel's instances (tile slots, ring stages): sparse_mla_split_wgmma and _t32.
INSTANCES = {"sparse_mla_split_wgmma": (64, 2), "sparse_mla_split_wgmma_t32": (32, 4)}


def layout_used(tile: int, stages: int) -> int:
    """split_wgmma.cu WgLayout::USED: sQ, the ring, the S exchange [2][tile / 8][128] float4."""
    return RING_AT + stages * tile * 1024 + 2 * (tile // 8) * 128 * 16


def test_the_model_constants_are_the_kernels():
    # split_wgmma.cu and the wgmma helpers it shares with split_wgmma_ws.cu (sparse_mla_wgmma.cuh)
    text = (variants.HERE / "split_wgmma.cu").read_text() + (variants.HERE / "sparse_mla_wgmma.cuh").read_text()
    for name, value in (("WG_TILE", TILE), ("WG_STAGE_BYTES", STAGE), ("WG_RING_AT", RING_AT)):
        assert int(re.search(rf"#define\s+{name}\s+(\d+)", text).group(1)) == value, name
    # the swizzle formula and the descriptor builder the model below mirrors
    assert "(r >> 3) * 8192 + (c >> 3) * 1024 + (r & 7) * 128 + (((c & 7) ^ (r & 7)) << 4)" in text
    assert "wg_desc(stage + (unsigned)(ks * 2 * 8192 + wg * 4 * 1024), 1024, 8192)" in text
    assert "wg_desc(stage + off, 16, 8192)" in text
    assert "(unsigned)(wg * 4 * 1024 + (k >> 2) * 1024 + (k & 3) * 32)" in text
    # each instance and the dynamic shared memory its launcher gives (read by variants.source_define)
    for symbol, (tile, stages) in INSTANCES.items():
        assert f"WG_PARTIALS_KERNEL({symbol}, WG_ARGS({'WG_TILE' if tile == 64 else tile}, {stages}, 0))" in text, symbol
    assert variants.source_define("split_wgmma.cu", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES") == layout_used(64, 2) + 1024
    assert variants.source_define("split_wgmma.cu", "SPARSE_MLA_SPLIT_WGMMA_T32_SMEM_BYTES") == layout_used(32, 4) + 1024
    assert layout_used(32, 4) == 64 * 1024 + 4 * 32 * 1024 + 16 * 1024 <= 227 * 1024   # 208 KiB, the task's sum


# ---- shared memory and descriptors ----------------------------------------------------------------

def wg_swz(r: int, c: int) -> int:
    """split_wgmma.cu wg_swz: the byte of 16-byte chunk c of row r in a [64][512] bf16 tile."""
    return (r >> 3) * 8192 + (c >> 3) * 1024 + (r & 7) * 128 + (((c & 7) ^ (r & 7)) << 4)


def place(smem: np.ndarray, at: int, mat: np.ndarray) -> None:
    """mat [rows][512] uint16 into smem (uint16 view of bytes) at byte `at`, as the cp.async copies do."""
    for r in range(len(mat)):
        for c in range(64):
            b = at + wg_swz(r, c)
            smem[b // 2:b // 2 + 8] = mat[r, 8 * c:8 * c + 8]


def wg_desc(addr: int, lbo: int, sbo: int) -> int:
    """split_wgmma.cu wg_desc."""
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1 << 62)


def fields(desc: int) -> tuple[int, int, int]:
    assert desc >> 62 == 1 and (desc >> 49) & 7 == 0, "SWIZZLE_128B, base offset 0"
    return (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4


def sw128(addr: np.ndarray) -> np.ndarray:
    """The hardware's 128-byte swizzle of a shared address: bits [4, 7) ^= bits [7, 10)."""
    return addr ^ (((addr >> 7) & 7) << 4)


def read_k_major(smem: np.ndarray, desc: int, rows: int) -> np.ndarray:
    """A K-major SW128 operand of `rows` x 16 bf16 (CUTLASS canonical ((8,n),(T,2)):((8T,SBO),(1,T)),
    LBO unused): element (i, k) at start + (i % 8) 128 + (i / 8) SBO + k 2, then swizzled."""
    start, _, sbo = fields(desc)
    i, k = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
    addr = start + (i % 8) * 128 + (i // 8) * sbo + k * 2
    return smem[sw128(addr) // 2]


def read_mn_major(smem: np.ndarray, desc: int, n: int) -> np.ndarray:
    """An MN-major SW128 operand of 16 (K) x n (N) bf16 (CUTLASS canonical
    ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))): element (k, j) at start + (j % 64) 2 + (j / 64) LBO +
    (k % 8) 128 + (k / 8) SBO, then swizzled."""
    start, lbo, sbo = fields(desc)
    k, j = np.meshgrid(np.arange(16), np.arange(n), indexing="ij")
    addr = start + (j % 64) * 2 + (j // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo
    return smem[sw128(addr) // 2]


@pytest.fixture(scope="module")
def staged():
    """q at 0 and a tile in stage 1 of a shared window whose base is 1024-aligned (the kernel's
    run-time placement), random bits."""
    rng = np.random.default_rng(5)
    q = rng.integers(0, 1 << 16, (64, 512), dtype=np.uint16)
    tile = rng.integers(0, 1 << 16, (64, 512), dtype=np.uint16)
    base = 3 * 1024                     # any 1024-aligned base
    smem = np.zeros((base + 4 * STAGE) // 2, np.uint16)
    place(smem, base, q)
    place(smem, base + RING_AT + STAGE, tile)
    return smem, base, q, tile


def test_every_chunk_of_a_tile_lands_once_and_a_warps_copies_are_conflict_free():
    offs = np.array([wg_swz(r, c) for r in range(64) for c in range(64)])
    assert sorted(offs) == list(range(0, STAGE, 16))
    # a warp: tid 32 u .. 32 u + 31 copy chunks c = tid % 64 of one row; each 8 lanes one 128-B
    # swizzle row in 8 distinct 16-byte bank groups
    for r in range(64):
        for half in range(2):
            for eight in range(4):
                cs = [32 * half + 8 * eight + x for x in range(8)]
                assert len({(wg_swz(r, c) // 16) % 8 for c in cs}) == 8


@pytest.mark.parametrize("wg", [0, 1])
def test_the_score_descriptors_read_q_and_the_tile_k_step_by_k_step(staged, wg):
    smem, base, q, tile = staged
    stage = base + RING_AT + STAGE
    for k in range(16):
        off = wg * 4 * 1024 + (k >> 2) * 1024 + (k & 3) * 32
        dims = slice(256 * wg + 16 * k, 256 * wg + 16 * k + 16)
        assert np.array_equal(read_k_major(smem, wg_desc(base + off, 16, 8192), 64), q[:, dims]), k
        assert np.array_equal(read_k_major(smem, wg_desc(stage + off, 16, 8192), 64), tile[:, dims]), k


@pytest.mark.parametrize("wg", [0, 1])
def test_the_pv_descriptor_reads_the_tile_transposed(staged, wg):
    smem, base, _, tile = staged
    stage = base + RING_AT + STAGE
    for ks in range(4):
        got = read_mn_major(smem, wg_desc(stage + ks * 2 * 8192 + wg * 4 * 1024, 1024, 8192), 256)
        assert np.array_equal(got, tile[16 * ks:16 * ks + 16, 256 * wg:256 * wg + 256]), ks


@pytest.fixture(scope="module")
def staged32():
    """The 32-slot instance: q at 0 and a [32][512] tile in stage 3 of the 4-stage ring (32 KiB
    stages: every stage 1024-aligned), random bits."""
    rng = np.random.default_rng(6)
    q = rng.integers(0, 1 << 16, (64, 512), dtype=np.uint16)
    tile = rng.integers(0, 1 << 16, (32, 512), dtype=np.uint16)
    base, stage = 5 * 1024, RING_AT + 3 * 32 * 1024
    assert stage % 1024 == 0
    smem = np.zeros((base + layout_used(32, 4)) // 2, np.uint16)
    place(smem, base, q)
    place(smem, base + stage, tile)
    return smem, base, base + stage, q, tile


@pytest.mark.parametrize("wg", [0, 1])
def test_the_32_slot_descriptors_read_q_the_tile_and_its_transpose(staged32, wg):
    """S by m64n32k16: the same K-major descriptors, B now 32 rows = 4 groups at SBO; PV: 2
    k-steps of the same MN-major form; the 32-row chunks of wg_swz fill the 32 KiB stage once."""
    smem, base, stage, q, tile = staged32
    offs = sorted(wg_swz(r, c) for r in range(32) for c in range(64))
    assert offs == list(range(0, 32 * 1024, 16))
    for k in range(16):
        off = wg * 4 * 1024 + (k >> 2) * 1024 + (k & 3) * 32
        dims = slice(256 * wg + 16 * k, 256 * wg + 16 * k + 16)
        assert np.array_equal(read_k_major(smem, wg_desc(base + off, 16, 8192), 64), q[:, dims]), k
        assert np.array_equal(read_k_major(smem, wg_desc(stage + off, 16, 8192), 32), tile[:, dims]), k
    for ks in range(2):
        got = read_mn_major(smem, wg_desc(stage + ks * 2 * 8192 + wg * 4 * 1024, 1024, 8192), 256)
        assert np.array_equal(got, tile[16 * ks:16 * ks + 16, 256 * wg:256 * wg + 256]), ks


def test_the_model_tells_a_wrong_descriptor(staged):
    """The read-back is not vacuous: LBO and SBO swapped, or an unaligned stage, read other bytes."""
    smem, base, _, tile = staged
    stage = base + RING_AT + STAGE
    want = tile[0:16, 0:256]
    assert not np.array_equal(read_mn_major(smem, wg_desc(stage, 8192, 1024), 256), want)
    assert not np.array_equal(read_k_major(smem, wg_desc(stage + 32, 16, 1024), 64), tile[:, 16:32])
    shifted = np.zeros_like(smem)
    place(shifted, base + RING_AT + STAGE + 512, tile)          # atoms not 1024-aligned
    assert not np.array_equal(read_mn_major(shifted, wg_desc(stage + 512, 1024, 8192), 256), want)


# ---- register fragments -------------------------------------------------------------------------

def d_position(warp: int, lane: int, idx: int) -> tuple[int, int]:
    """wgmma m64nN f32 accumulator (PTX ISA figure, CUTLASS CLayout_64xN): d[idx] of lane in warp
    (of the warpgroup) is (row 16 warp + lane / 4 + 8 ((idx / 2) % 2), col 8 (idx / 4) + 2 (lane % 4) +
    idx % 2)."""
    g, t = lane >> 2, lane & 3
    return 16 * warp + g + 8 * ((idx >> 1) & 1), 8 * (idx >> 2) + 2 * t + (idx & 1)


def a_position(warp: int, lane: int, reg: int, half: int) -> tuple[int, int]:
    """wgmma m64k16 bf16 A from registers (PTX ISA figure): a{reg} half `half` (0: low 16 bits) is
    (row 16 warp + lane / 4 + 8 (reg % 2), k 2 (lane % 4) + 8 (reg / 2) + half)."""
    g, t = lane >> 2, lane & 3
    return 16 * warp + g + 8 * (reg & 1), 2 * t + 8 * (reg >> 1) + half


def cute_64xn(thread: int, value: int, nv: int) -> tuple[int, int]:
    """CuTe's ((4,8,4),(2,2,nv)):((128,1,16),(64,8,512)) (CLayout_64xN with nv = N / 8;
    ALayout_64x16 with nv = 2): (thread, value) -> column-major index m + 64 n -> (m, n)."""
    t, g, w = thread % 4, (thread // 4) % 8, thread // 32
    v0, v1, v2 = value % 2, (value // 2) % 2, value // 4
    assert v2 < nv
    idx = 128 * t + g + 16 * w + 64 * v0 + 8 * v1 + 512 * v2
    return idx % 64, idx // 64


def test_the_hand_written_layouts_are_cutlass_s():
    """d_position / a_position (value 2 reg + half) are CUTLASS's layouts, not a transcription slip."""
    for thread in range(128):
        for value in range(128):                           # m64n256: 128 accumulators
            assert d_position(thread // 32, thread % 32, value) == cute_64xn(thread, value, 32)
        for reg in range(4):
            for half in range(2):
                assert a_position(thread // 32, thread % 32, reg, half) == cute_64xn(thread, 2 * reg + half, 2)


@pytest.mark.parametrize("tile", [64, 32])
def test_the_score_accumulator_packed_as_the_kernel_packs_is_the_pv_a_fragment(tile):
    """pa[ks][i] = pack(d[8 ks + 2 i] (low), d[8 ks + 2 i + 1] (high)) holds, in every thread, the
    P elements A needs for k-step ks (slots 16 ks ..); and both layouts cover their matrices once
    (m64n64: 32 accumulators, 4 k-steps; m64n32: 16, 2)."""
    seen_d, seen_a = set(), set()
    for warp in range(4):
        for lane in range(32):
            for idx in range(tile // 2):
                assert d_position(warp, lane, idx) == cute_64xn(32 * warp + lane, idx, tile // 8)
                seen_d.add(d_position(warp, lane, idx))
            for ks in range(tile // 16):
                for i in range(4):
                    for half in range(2):
                        row, col = d_position(warp, lane, 8 * ks + 2 * i + half)
                        arow, ak = a_position(warp, lane, i, half)
                        assert (row, col) == (arow, 16 * ks + ak), (warp, lane, ks, i, half)
                        seen_a.add((ks, arow, ak))
    assert seen_d == {(r, c) for r in range(64) for c in range(tile)}
    assert seen_a == {(ks, r, k) for ks in range(tile // 16) for r in range(64) for k in range(16)}


@pytest.mark.parametrize("tile", [64, 32])
def test_the_validity_bits_are_the_slots_each_score_holds(tile):
    """The softmax mask: score sc[4 j + e] of lane (g, t4) is slot 8 j + 2 t4 + (e & 1); the kernel
    reads bit 8 (j & 3) + 2 t4 + (e & 1) of vm[j / 4], the ballot of slots 32 (j / 4) + lane."""
    for lane in range(32):
        t4 = lane & 3
        for j in range(tile // 8):
            for e in range(4):
                slot = d_position(0, lane, 4 * j + e)[1]
                assert 32 * (j >> 2) + 8 * (j & 3) + 2 * t4 + (e & 1) == slot


def test_the_exchange_partners_hold_the_same_positions():
    """Thread i of warpgroup 0 and of warpgroup 1 (same warp-in-group and lane) hold the same
    (head, slot) of their partial S, so xbuf[(wg ^ 1) 8 + k][i] is the other half's same element;
    and the output rows / dims each thread stores are every (head, dim) once."""
    out = set()
    for wg in range(2):
        for tl in range(128):
            w, lane = tl >> 5, tl & 31
            for n in range(32):
                for e in range(4):
                    row, col = d_position(w, lane, 4 * n + e)
                    out.add((row, 256 * wg + col))
    assert out == {(h, d) for h in range(64) for d in range(512)}


# ---- the AHEAD chain ------------------------------------------------------------------------------

def chain_model(sel: np.ndarray, page_table: np.ndarray, start: int, end: int, page_size: int,
                tile: int = TILE, stages: int = 2, wait: int | None = None, ahead: int | None = None):
    """The kernel's registers (wg_split's prologue and wg_ahead), lane by lane (lanes 0..31 x halves
    = slots 0..tile - 1 of a tile), and its cp.async groups and stages: returns ntiles, per iteration
    the validity it masks with, and the rows each tile was issued with; asserts on the way that every
    iteration's wait_group leaves its tile complete and that no copy targets a stage a tile in
    flight or not yet consumed (tiles it .. it + L - 1) occupies. ``wait`` / ``ahead`` (default:
    the kernel's STAGES - 2 and STAGES - 1) exist to show the checks catch a wrong pipeline."""
    L = stages - 1 if ahead is None else ahead
    wait = stages - 2 if wait is None else wait
    lanes = np.arange(tile)

    def tok(t):
        j = start + tile * t + lanes
        return np.where(j < end, sel[np.minimum(j, len(sel) - 1)], -1)

    def page(t):
        return np.where(t >= 0, page_table[np.maximum(t, 0) // page_size], -1)

    def row(p, t):
        return np.where(p >= 0, p * page_size + np.maximum(t, 0) % page_size, -1)

    ntiles = (end - start + tile - 1) // tile
    groups = []                       # committed cp.async groups: the tile each holds (None: empty)
    issued, stage_of = {}, {}

    def issue(t, rows, live):
        if t < ntiles:
            assert t not in issued
            stage = t % stages
            assert all(stage_of[u] != stage for u in live), (t, live)   # a stage still to be read
            issued[t], stage_of[t] = rows, stage
            groups.append(t)
        else:
            groups.append(None)

    tq = [tok(k) for k in range(L + 2)]
    pk = [page(tq[k]) for k in range(L + 1)]
    for k in range(L):
        issue(k, row(pk[k], tq[k]), live=range(k))
    pg = pk[L]
    valid = []
    for it in range(ntiles):
        valid.append(tq[0] >= 0)
        done = groups[:len(groups) - wait]            # cp.async.wait_group STAGES - 2
        assert it in done, it
        # after the loop-top barrier tile it - 1 is consumed; tiles it .. it + L - 1 are not
        issue(it + L, row(pg, tq[L]), live=[u for u in range(it, it + L) if u < ntiles])
        tq = tq[1:] + [None]
        pg = page(tq[L])
        tq[L + 1] = tok(it + L + 2)
    return ntiles, valid, issued


@pytest.mark.parametrize("tile,stages", [(64, 2), (32, 4)])
@pytest.mark.parametrize("start,end", [(0, 528), (528, 1056), (1584, 2112), (0, 64), (64, 100), (200, 200),
                                       (0, 32), (32, 90), (0, 117)])
def test_the_ahead_chain_issues_and_masks_the_right_tiles(start, end, tile, stages):
    rng = np.random.default_rng(start + 7 * end)
    W, page_size = 2112, 64
    pages = rng.permutation(64)
    sel = np.where(rng.random(W) < 0.8, rng.integers(0, 64 * page_size, W), -1)
    ntiles, valid, issued = chain_model(sel, pages, start, end, page_size, tile, stages)
    assert ntiles == -(-(end - start) // tile) and sorted(issued) == list(range(ntiles))
    for it in range(ntiles):
        j = start + tile * it + np.arange(tile)
        t = np.where(j < end, sel[np.minimum(j, W - 1)], -1)
        assert np.array_equal(valid[it], t >= 0), it
        want = np.where(t >= 0, pages[np.maximum(t, 0) // page_size] * page_size + np.maximum(t, 0) % page_size, -1)
        assert np.array_equal(issued[it], want), it


@pytest.mark.parametrize("wait,ahead", [(3, None), (None, 4)])
def test_the_chain_model_tells_a_wrong_pipeline(wait, ahead):
    """Not vacuous: the 4-stage ring waiting for one group too few (wait_group 3: tile it may still
    fly), or issuing 4 tiles ahead (into the stage tile it is read from), fails."""
    sel, pages = np.arange(2112) % 4096, np.arange(64)
    with pytest.raises(AssertionError):
        chain_model(sel, pages, 0, 528, 64, 32, 4, wait=wait, ahead=ahead)


# ---- the algorithm ------------------------------------------------------------------------------

def bf16(x: np.ndarray) -> np.ndarray:
    return bf16_to_float(float_to_bf16(np.asarray(x, np.float32))).astype(np.float32)


def split_model(q: np.ndarray, c: np.ndarray, valid: np.ndarray, scale: float, start: int, end: int,
                tile: int = TILE):
    """split_wgmma's CTA in float32: `tile`-slot tiles of [start, end), invalid slots -inf (their rows
    zero), the -inf guard, P rounded to bf16 for both the sum and PV. -> (acc [64, 512], m [64], l [64])."""
    H, D = q.shape
    m_run, l_run, o = np.full(H, -np.inf, np.float32), np.zeros(H, np.float32), np.zeros((H, D), np.float32)
    for j0 in range(start, end, tile):
        j = np.arange(j0, j0 + tile)
        ok = (j < end) & valid[np.minimum(j, len(valid) - 1)]
        rows = np.where(ok[:, None], c[np.minimum(j, len(c) - 1)], 0).astype(np.float32)
        s = (q[:, :256] @ rows[:, :256].T) + (q[:, 256:] @ rows[:, 256:].T)   # S_0 + S_1
        s = np.where(ok[None, :], scale * s, -np.inf)
        mn = np.maximum(m_run, s.max(axis=1))
        none = mn == -np.inf
        with np.errstate(invalid="ignore"):
            alpha = np.where(none, 1.0, np.exp(m_run - mn)).astype(np.float32)
            p = np.where(none[:, None], 0.0, np.exp(s - mn[:, None]))
        p = bf16(p)
        l_run = l_run * alpha + p.sum(axis=1)
        m_run = mn
        o = o * alpha[:, None] + p @ rows
    return o, m_run, l_run


def combine(parts):
    """sparse_mla_combine over the splits' (acc, m, l)."""
    gmax = np.max([m for _, m, _ in parts], axis=0)
    H, D = parts[0][0].shape
    out, lse = np.zeros((H, D)), np.full(H, -np.inf)
    for h in range(H):
        if gmax[h] == -np.inf:
            continue
        f = [np.exp(m[h] - gmax[h]) if m[h] != -np.inf else 0.0 for _, m, _ in parts]
        L = sum(fi * l[h] for fi, (_, _, l) in zip(f, parts))
        out[h] = sum(fi * a[h] for fi, (a, _, _) in zip(f, parts)) / L
        lse[h] = gmax[h] + np.log(L)
    return out, lse


def split_case(seed: int, W: int, splits: int, empty: bool, tile: int):
    """Random bf16 q and rows, ~70% of the slots valid, split 1 with none (empty: no slot at all);
    -> (q, c, valid, scale, the splits' split_model states)."""
    rng = np.random.default_rng(seed)
    H, D, scale = 64, 512, 1 / 16
    q = bf16(rng.standard_normal((H, D)))
    c = bf16(rng.standard_normal((W, D)))
    valid = rng.random(W) < 0.7
    valid[W // splits:2 * W // splits] = False           # split 1 sees nothing
    if empty:
        valid[:] = False
    parts = [split_model(q, c, valid, scale, s * W // splits, (s + 1) * W // splits, tile) for s in range(splits)]
    return q, c, valid, scale, parts


@pytest.mark.parametrize("tile", [64, 32])
@pytest.mark.parametrize("splits,empty", [(4, False), (3, False), (5, True)])
def test_the_split_algorithm_matches_the_reference(splits, empty, tile):
    """Ragged chunks (W / splits not a multiple of 64), a split with no valid slot, and (empty) a
    stream with none at all: zeros and -inf."""
    q, c, valid, scale, parts = split_case(splits, 576, splits, empty, tile)
    assert parts[1][1].max() == -np.inf and not parts[1][0].any() and not parts[1][2].any()
    out, lse = combine(parts)
    want_out, want_lse = spec.attend(q.astype(np.float64), c[valid].astype(np.float64), scale)
    if empty:
        assert not out.any() and np.isneginf(lse).all()
        return
    # the component's own rules (spec.checks: out RelErr 2e-2, lse RelErr 1e-3, both covering the
    # bf16-rounded P); the measured errors of this model are ~2e-3 and ~6e-5, a mapping error O(1)
    for name, got, want in (("out", out, want_out), ("lse", lse, want_lse)):
        rule = spec.checks({})[name]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rule.tolerance and np.abs(got - want).max() <= rule.tolerance * np.abs(want).max(), (name, err)


def test_supports_refuses_the_fp8_latent_in_one_line(geometry):
    comp = registry.get("sparse_mla")
    point = {"M": 3, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 1, "latent_dtype": "fp8"}
    for name in ("split_wgmma", "split_wgmma_1wave", "split_wgmma_t32", "split_wgmma_t32_1wave"):
        v = next(v for v in comp.variants if v.name == name)
        reason = v.supports(geometry, point)
        assert reason and "\n" not in reason and "reads the bf16 latent" in reason and "split_mma_fp8" in reason
        assert v.supports(geometry, {**point, "latent_dtype": "bf16"}) is None
        assert "split_wgmma.cu" in v.sources


# ---- the cluster form (split_wgmma_t32_cluster) -------------------------------------------------

def test_cluster_splits_is_the_largest_cluster_within_one_wave():
    for sms in (132, 114, 78):
        for M in range(1, 140):
            cs = variants.cluster_splits(M, 2112, sms)
            fit = [c for c in (2, 4, 8) if c <= variants.one_wave_splits(M, 2112, sms)]
            if M < 4 or not fit:
                assert cs is None, (M, sms)
                continue
            assert cs == max(fit) and M * cs <= sms and 512 % cs == 0, (M, sms, cs)
    assert [variants.cluster_splits(M, 2112, 132) for M in (8, 32, 64)] == [8, 4, 2]
    text = (variants.HERE / "split_wgmma.cu").read_text()
    for cs in variants.CLUSTER_SIZES:   # the kernels the launcher may ask for exist, in both tile forms
        assert f"WG_CLUSTER_KERNEL(_t32, 32, 4, {cs})" in text and f"WG_CLUSTER_KERNEL(, WG_TILE, 2, {cs})" in text, cs
    assert "sparse_mla_split_wgmma##FORM##_c##CS(" in text
    assert {p for p, _, _ in variants.CLUSTER_FORMS.values()} == {"sparse_mla_split_wgmma_t32_c", "sparse_mla_split_wgmma_c"}
    for _, smem, _ in variants.CLUSTER_FORMS.values():
        assert variants.source_define(str(variants.HERE / "split_wgmma.cu"), smem) > 0


@pytest.mark.parametrize("name", sorted(variants.CLUSTER_FORMS))
def test_the_cluster_variant_supports_m_4_to_66_in_one_line(geometry, name):
    v = next(v for v in registry.get("sparse_mla").variants if v.name == name)
    point = {"M": 8, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 1, "latent_dtype": "bf16"}
    top = variants._device_sms() // 2            # 66 on the H200 (and where no device answers)
    assert v.supports(geometry, point) is None and v.supports(geometry, {**point, "M": top}) is None
    for bad, words in (({"M": 3}, variants.CLUSTER_FORMS[name][2]), ({"M": top + 1}, f"M <= {top}"),
                       ({"latent_dtype": "fp8"}, "bf16")):
        reason = v.supports(geometry, {**point, **bad})
        assert reason and "\n" not in reason and words in reason, (bad, reason)


def test_the_scaled_o_rows_are_bank_conflict_free():
    """so rows padded to WG_SO_STRIDE floats: a warp's float2 stores (lanes g, t4: row 16 w + g,
    column 2 t4 + const) touch each 4-byte bank at most twice (256 B: the 2 wavefronts a 64-bit warp
    access needs at least); unpadded (512) rows would touch 8 rows' words in the same banks."""
    stride = int(re.search(r"#define\s+WG_SO_STRIDE\s+(\d+)", (variants.HERE / "split_wgmma.cu").read_text()).group(1))

    def worst(st):
        banks = np.zeros(32, int)
        for lane in range(32):
            g, t4 = lane >> 2, lane & 3
            word = g * st + 2 * t4
            banks[word % 32] += 1
            banks[(word + 1) % 32] += 1
        return banks.max()
    assert worst(stride) == 2 and worst(512) == 8
    assert 64 * stride * 4 <= layout_used(32, 4) - 16 * 1024    # below X_AT: over sQ and the ring


def cluster_model(parts, cs: int):
    """split_wgmma.cu's cluster epilogue on the CTAs' (acc, m, l): gl per head (gmax, L) as the
    tid < 64 threads compute it, each CTA's O scaled by exp(m - gmax) (0 where m = -inf), then CTA
    r's float4s e = tid + 256 i (head e / Q4, columns r COLS + 4 (e % Q4)) summed over the ranks;
    lse by rank 0. Returns (out, lse, the (h, d) each rank wrote)."""
    H, D = parts[0][0].shape
    gmax = np.full(H, -np.inf, np.float32)
    for _, m, _ in parts:
        gmax = np.maximum(gmax, m)
    L = np.zeros(H, np.float32)
    for _, m, l in parts:
        ok = m != -np.inf
        with np.errstate(invalid="ignore"):
            L = np.where(ok, L + l * np.exp(np.where(ok, m - gmax, 0)), L).astype(np.float32)
    so = []
    for acc, m, _ in parts:
        with np.errstate(invalid="ignore"):
            f = np.where(m == -np.inf, 0.0, np.exp(np.where(m == -np.inf, 0, m - gmax))).astype(np.float32)
        so.append(acc * f[:, None])
    out, written = np.full((H, D), np.nan), []
    cols, q4 = D // cs, D // cs // 4
    for r in range(cs):
        seen = set()
        for i in range(H * q4 // 256):
            for tid in range(256):
                e = tid + 256 * i
                h, d = e // q4, r * cols + 4 * (e % q4)
                seen.update((h, d + x) for x in range(4))
                if gmax[h] == -np.inf:
                    out[h, d:d + 4] = 0
                else:
                    out[h, d:d + 4] = sum(s[h, d:d + 4] for s in so) / L[h]
        written.append(seen)
    lse = np.where(gmax == -np.inf, -np.inf, gmax + np.log(np.where(L > 0, L, 1)))
    return out, lse, written


@pytest.mark.parametrize("cs,empty", [(2, False), (4, False), (8, False), (8, True)])
def test_the_cluster_combine_is_the_combine(cs, empty):
    """Every (head, column) written by exactly one rank; out and lse the combine's (float32 rounding
    apart: the kernel scales then sums where the combine fuses), an empty split and an empty row
    included, and both within the component's rules of the float64 reference."""
    q, c, valid, scale, parts = split_case(40 + cs, 8 * 64 + 40, cs, empty, 32)
    H, D = q.shape
    out, lse, written = cluster_model(parts, cs)
    assert sum(len(w) for w in written) == H * D and set().union(*written) == {(h, d) for h in range(H) for d in range(D)}
    want_out, want_lse = combine(parts)
    if empty:
        assert not out.any() and np.isneginf(lse).all() and not want_out.any()
        return
    assert np.allclose(out, want_out, rtol=1e-5, atol=1e-6) and np.allclose(lse, want_lse, rtol=1e-6)
    ref_out, ref_lse = spec.attend(q.astype(np.float64), c[valid].astype(np.float64), scale)
    for name, got, want in (("out", out, ref_out), ("lse", lse, ref_lse)):
        rule = spec.checks({})[name]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rule.tolerance, (name, err)


def test_the_wgmma_device_check_and_options_shared_by_the_families():
    from kernels import wgmma

    class _Device:
        def __init__(self, arch):
            self._arch = arch

        def arch(self):
            return self._arch

    wgmma.require_wgmma_device("split_wgmma", _Device("sm_90"))          # Hopper: no refusal
    with pytest.raises(ValueError) as err:
        wgmma.require_wgmma_device("split_wgmma", _Device("sm_100"))
    assert "\n" not in str(err.value) and str(err.value).startswith("split_wgmma:") and "sm_100" in str(err.value)
    assert variants.WGMMA_OPTIONS == ("-arch=sm_90a", "-DSPARSE_MLA_WGMMA_SM90A")
    assert all(o in (variants.HERE / "split_wgmma.cu").read_text() for o in ("SPARSE_MLA_WGMMA_SM90A",))


# ---- split_wgmma_ws: the mbarrier ring between the producer and the two consumer warpgroups -------

WS_SOURCE = "split_wgmma_ws.cu"


class Mbarrier:
    """An mbarrier as the kernel uses it: `count` arrivals complete a phase; try_wait.parity(P)
    succeeds when the phase of parity P has completed, which the hardware decides from the parity
    of the completed phases alone (so a waiter must never be two phases behind or ahead). Each
    arrival names the phase it is meant for (the tile's use of the stage): one that lands in
    another phase is a protocol error even where the counts add up."""

    def __init__(self, count: int):
        self.count, self.pending, self.completed = count, count, 0

    def arrive(self, n: int, phase: int) -> None:
        assert phase == self.completed, f"an arrival for phase {phase} lands in phase {self.completed}"
        assert 0 < n <= self.pending, "more arrivals than the phase expects"
        self.pending -= n
        if self.pending == 0:
            self.completed, self.pending = self.completed + 1, self.count

    def try_wait(self, parity: int, want: int) -> bool:
        """`want`: the completion (0-based) the waiter means; the hardware sees only its parity."""
        assert self.completed in (want, want + 1), f"waiting for completion {want} at {self.completed}: ambiguous parity"
        return (self.completed & 1) != parity


def ws_producer_parity(t: int, stages: int) -> int:
    return (t // stages - 1) & 1          # split_wgmma_ws.cu: (t / WS_STAGES - 1) & 1, for t >= WS_STAGES


def ws_consumer_parity(it: int, stages: int) -> int:
    return (it // stages) & 1             # split_wgmma_ws.cu: (it / WS_STAGES) & 1


PRODUCER_WARPS = 4                        # the producer warpgroup; a warp's 32 threads move together here


def interleave(agents: list, live: list, rng: np.random.Generator, bound: int) -> None:
    """Step the generators ``agents[k]`` for k in ``live`` one at a time in a random order until all
    have finished (an agent may append new ones to both lists); more than ``bound`` steps: deadlock."""
    steps = 0
    while live:
        k = live[int(rng.integers(len(live)))]
        try:
            next(agents[k])
        except StopIteration:
            live.remove(k)
        steps += 1
        assert steps < bound, "deadlock"


def ring_model(ntiles: int, stages: int, rng: np.random.Generator, producer_parity=ws_producer_parity,
               producer_waits: bool = True, async_arrive: bool = False, full_count: int | None = None) -> None:
    """One random interleaving of the producer's warps and the two consumer warpgroups over the ring
    (a warp's threads, and each consumer warpgroup's 128, arrive together). Asserts: no stage
    written while a consumer may still read the tile it holds (both warpgroups arrived on empty for
    tile t - stages before tile t is written), no tile read before every warp's part of it has
    landed, every arrival in the phase it is meant for, and no deadlock.

    ``async_arrive`` (split_wgmma_ws_async): each producer warp issues its part of a tile and moves
    on at once; its 32 copy arrivals (cp.async.mbarrier.arrive.noinc) happen when its copies land,
    an agent of their own at any later step, in any order against the other warps' and thread 0's
    release arrive (after the validity words), but never before the same warp's earlier tiles (the
    arrive covers all of the thread's earlier copies). full[s] counts 129 (``full_count`` overrides
    it, to show a wrong one). The producer's exit waits for its copies (cp.async.wait_all)."""
    full = [Mbarrier(full_count or (129 if async_arrive else 128)) for _ in range(stages)]
    empty = [Mbarrier(256) for _ in range(stages)]
    holds = [[None] * PRODUCER_WARPS for _ in range(stages)]   # the tile each warp's part of a stage holds
    released = set()                   # (warpgroup, tile) arrivals on empty
    landed = [0] * PRODUCER_WARPS      # async: a warp's tiles landed so far (in order)
    agents = []

    def landing(w, s, t):              # warp w's copies of tile t in flight, then landed and counted
        while landed[w] < t:           # its earlier tiles' arrivals first
            yield
        yield
        holds[s][w] = t
        landed[w] = t + 1
        full[s].arrive(32, t // stages)

    def producer_warp(w):
        for t in range(ntiles):
            s = t % stages
            if t >= stages and producer_waits:
                while not empty[s].try_wait(producer_parity(t, stages), t // stages - 1):
                    yield
            assert t < stages or all((wg, t - stages) in released for wg in (0, 1)), f"tile {t} over a busy stage"
            holds[s][w] = None         # being written
            yield
            if async_arrive:
                if w == 0:
                    full[s].arrive(1, t // stages)   # thread 0, after the validity words
                agents.append(landing(w, s, t))
                live.append(len(agents) - 1)
            else:
                holds[s][w] = t
                full[s].arrive(32, t // stages)      # every thread of the warp, after its wait and fence
            yield
        while async_arrive and landed[w] < ntiles:   # cp.async.wait_all before the warp exits
            yield

    def consumer(wg):
        for it in range(ntiles):
            s = it % stages
            while not full[s].try_wait(ws_consumer_parity(it, stages), it // stages):
                yield
            assert holds[s] == [it] * PRODUCER_WARPS, f"warpgroup {wg} read tile {it} from a stage holding {holds[s]}"
            yield                      # S, the exchange, softmax, PV: the stage is read throughout
            assert holds[s] == [it] * PRODUCER_WARPS, f"tile {it} overwritten while warpgroup {wg} read it"
            released.add((wg, it))
            empty[s].arrive(128, it // stages)       # after its wgmma.wait_group 0 of the PV
            yield

    agents += [producer_warp(w) for w in range(PRODUCER_WARPS)] + [consumer(0), consumer(1)]
    live = list(range(len(agents)))
    interleave(agents, live, rng, 400 * (ntiles + 1) * stages + 4000)
    assert len(released) == 2 * ntiles
    assert not async_arrive or landed == [ntiles] * PRODUCER_WARPS, "copies in flight at exit"


def test_the_ring_model_constants_are_the_kernels():
    text = (variants.HERE / WS_SOURCE).read_text()
    # the producer's empty wait, for t >= WS_STAGES only (inside the timeline build's cycle count)
    assert re.search(r"if \(t >= WS_STAGES\) \{\s*SMT_T0\(w0\);\s*mbar_wait\(bar \+ 16 \+ 8 \* s, "
                     r"\(unsigned\)\(\(t / WS_STAGES - 1\) & 1\)\);", text)
    assert "mbar_wait(bar + 8 * s, (unsigned)((it / WS_STAGES) & 1));" in text
    assert "mbar_init(base + WS_BAR_AT + 8 * st, ASYNC ? 129 : 128);" in text   # ring_model's full counts
    assert "mbar_init(base + WS_BAR_AT + 16 + 8 * st, 256);" in text
    # the waiting producer's one arrive a thread, the async one's thread-0 arrive beside its copy arrivals
    # (the async form's full barrier is `full`: bar + 8 s here, a half's in the alternate-tile form)
    assert text.count("mbar_arrive(bar + 8 * s);") == 1 and "if (p == 0) mbar_arrive(full);" in text
    assert "const unsigned full = ALT ? bar + 16 * s + half8 : bar + 8 * s;" in text
    assert text.count("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];") == 1
    assert text.count("mbar_arrive(bar + 16 + 8 * s);") == 1
    # ring_model's producer exit: the async form commits no group, so only wait_all waits for its copies
    assert 'if constexpr (ASYNC)\n        asm volatile("cp.async.wait_all;\\n" ::: "memory");' in text
    assert int(re.search(r"#define\s+WS_STAGES\s+(\d+)", text).group(1)) in range(2, 5)
    # the layout the launcher sizes (variants.source_define) and the 227 KiB an SM
    used = int(re.search(r"#define\s+WS_USED\s+(\d+)", text).group(1))
    assert variants.source_define(WS_SOURCE, "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES") == used + 1024 <= 227 * 1024
    assert used == 65536 + 2 * 65536 + 32768 + 2 * 64 * 4 + 2 * 2 * 4 + 2 * 2 * 8
    assert variants.source_define(WS_SOURCE, "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS") == 384


@pytest.mark.parametrize("async_arrive", [False, True], ids=["waiting producer", "async arrive"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("ntiles", range(10))
def test_the_ring_protocol_never_overwrites_or_reads_early(ntiles, stages, async_arrive):
    rng = np.random.default_rng(1000 * stages + ntiles)
    for _ in range(30):
        ring_model(ntiles, stages, rng, async_arrive=async_arrive)


@pytest.mark.parametrize("wrong", ["no empty wait", "consumer parity for the producer", "async full counts 128"])
def test_the_ring_model_tells_a_wrong_protocol(wrong):
    rng = np.random.default_rng(7)
    kwargs = ({"producer_waits": False} if wrong == "no empty wait"
              else {"async_arrive": True, "full_count": 128} if wrong == "async full counts 128"
              else {"producer_parity": lambda t, st: (t // st) & 1})
    with pytest.raises(AssertionError):
        for _ in range(50):
            ring_model(8, 2, rng, **kwargs)


# ---- split_wgmma_ws's FP8 form: the producer's lane mapping and the scaled f16 algorithm ----------

def test_the_fp8_producer_writes_every_chunk_once_and_its_stores_are_conflict_free():
    """Pass e = warp + 4 i (i < 16), lane (rr = lane / 4, cq = lane % 4): row 8 (e / 8) + rr, code
    chunk 4 (e % 8) + cq, stored as f16 chunks 2 cc and 2 cc + 1 (split_wgmma_ws.cu)."""
    text = (variants.HERE / WS_SOURCE).read_text()
    assert "const int e = pw + 4 * (8 * b + i), r = 8 * (e >> 3) + rr, cc = 4 * (e & 7) + cq;" in text
    assert "st_shared_v4(stage + wg_swz(r, 2 * cc)" in text and "st_shared_v4(stage + wg_swz(r, 2 * cc + 1)" in text
    seen = []
    for pw in range(4):
        for i in range(16):
            e = pw + 4 * i
            rows = [8 * (e >> 3) + (lane >> 2) for lane in range(32)]
            assert len({r >> 5 for r in rows}) == 1, "the half (which register holds the row) is warp-uniform"
            for second in (0, 1):
                offs = [wg_swz(8 * (e >> 3) + (lane >> 2), 2 * (4 * (e & 7) + (lane & 3)) + second) for lane in range(32)]
                groups = np.bincount([(o // 16) % 8 for o in offs], minlength=8)
                assert (groups == 4).all(), "512 B a store instruction in 4 wavefronts"
                seen += offs
    assert sorted(seen) == list(range(0, STAGE, 16))
    # the row-major alternative (a warp along one row) would take 8 wavefronts: the reason for the mapping
    offs = [wg_swz(0, 2 * lane) for lane in range(32)]
    assert np.bincount([(o // 16) % 8 for o in offs], minlength=8).max() == 8


def f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def ws_fp8_model(q: np.ndarray, code_val: np.ndarray, rs: np.ndarray, valid: np.ndarray, scale: float, start: int,
                 end: int, reference_scale: bool = True):
    """split_wgmma_ws_fp8's CTA in float32: q rounded to f16, the codes' values (exact in f16), the
    row scale on the scores and, over R (the largest scale of the first tile; 1 if none valid), on
    the f16 weights; l the unrounded p; O = R sum a code. -> (acc, m, l) as split_model."""
    H, D = q.shape
    q16 = f16(q)
    m_run, l_run, o = np.full(H, -np.inf, np.float32), np.zeros(H, np.float32), np.zeros((H, D), np.float32)
    R = None
    for j0 in range(start, end, TILE):
        j = np.arange(j0, j0 + TILE)
        ok = (j < end) & valid[np.minimum(j, len(valid) - 1)]
        codes = np.where(ok[:, None], code_val[np.minimum(j, len(code_val) - 1)], 0).astype(np.float32)
        sc = np.where(ok, rs[np.minimum(j, len(rs) - 1)], 0).astype(np.float32)
        if R is None:
            R = (sc.max() if sc.max() > 0 else np.float32(1)) if reference_scale else np.float32(1)
        s = (q16[:, :256] @ codes[:, :256].T) + (q16[:, 256:] @ codes[:, 256:].T)
        s = np.where(ok[None, :], (scale * sc)[None, :] * s, -np.inf)
        mn = np.maximum(m_run, s.max(axis=1))
        none = mn == -np.inf
        with np.errstate(invalid="ignore"):
            alpha = np.where(none, 1.0, np.exp(m_run - mn)).astype(np.float32)
            p = np.where(none[:, None], 0.0, np.exp(s - mn[:, None])).astype(np.float32)
        a = f16(p * (sc * np.float32(1 / R))[None, :])
        l_run = l_run * alpha + p.sum(axis=1)
        m_run = mn
        o = o * alpha[:, None] + a @ codes
    return (o * (R if R is not None else 1)).astype(np.float32), m_run, l_run


@pytest.mark.parametrize("splits,magnitude", [(4, 1.0), (3, 1e-3)])
def test_the_fp8_scaled_f16_algorithm_matches_the_reference_on_the_dequantized_rows(splits, magnitude):
    """The component's FP8 rules (out RelErr 2e-2, lse 1e-3) against float64 attention over the
    dequantized rows. Latent rows of N(0, 1) give p x scale ~ 1e-4 .. 7e-3, normal f16 values with
    or without R; rows 1000x smaller (scale ~ 7e-6) put every p x scale among f16's subnormals, where
    the weights over R keep the error of the N(0, 1) case and the plain p x scale does not: R's reason."""
    from kernels import fp8

    rng = np.random.default_rng(40 + splits)
    H, D, W, scale = 64, 512, 576, 1 / 16
    q = bf16(rng.standard_normal((H, D)))
    codes, rs = fp8.quantize_rows(magnitude * rng.standard_normal((W, D)))
    code_val = fp8.decode_e4m3(codes)
    valid = rng.random(W) < 0.8
    valid[W // splits:2 * W // splits] = False
    want_out, want_lse = spec.attend(q.astype(np.float64), fp8.dequantize_rows(codes, rs)[valid].astype(np.float64),
                                     scale)
    errs = {}
    for use_r in (True, False):
        parts = [ws_fp8_model(q, code_val, rs, valid, scale, s * W // splits, (s + 1) * W // splits, use_r)
                 for s in range(splits)]
        assert parts[1][1].max() == -np.inf and not parts[1][0].any()
        out, lse = combine(parts)
        errs[use_r] = {name: np.linalg.norm(got - want) / np.linalg.norm(want)
                       for name, got, want in (("out", out, want_out), ("lse", lse, want_lse))}
    for name in ("out", "lse"):
        assert errs[True][name] <= spec.checks({})[name].tolerance, (name, errs[True])
    assert errs[True]["out"] < 1e-3, errs            # measured ~2e-4 at both magnitudes
    if magnitude < 1:
        assert errs[False]["out"] > 3 * errs[True]["out"], errs


# ---- split_wgmma_coop_1wave's row counter (wg_coop_combine): never reset, tickets count launches ----

def coop_model(splits: int, launches: int, rng: np.random.Generator, start: int = 0, bits: int = 32):
    """Launches of one row's `splits` CTAs in stream order, each CTA's steps interleaved at random
    (take a ticket, then spin), with the kernel's arithmetic on a `bits`-bit counter: ticket = the
    atomic's old value, want = (ticket / splits + 1) splits, done when count - want, read as a signed
    `bits`-bit number, is >= 0.
    Returns, per launch, whether any CTA got past its wait before all of its launch's tickets were
    taken (a wrong merge) and whether all got past (no hang)."""
    mask = (1 << bits) - 1

    def signed(x):
        x &= mask
        return x - (1 << bits) if x >> (bits - 1) else x
    count, results = start & mask, []
    for _ in range(launches):
        want = [None] * splits
        passed, early = set(), False
        while len(passed) < splits:
            waiting = [c for c in range(splits) if want[c] is not None and c not in passed]
            fresh = [c for c in range(splits) if want[c] is None]
            c = int(rng.choice(fresh + waiting))
            if want[c] is None:
                ticket, count = count, (count + 1) & mask
                want[c] = ((ticket // splits + 1) * splits) & mask
            elif signed(count - want[c]) >= 0:
                early = early or any(w is None for w in want)
                passed.add(c)
            elif not fresh:
                break   # nobody left to take a ticket: this CTA would spin forever
        results.append((early, len(passed) == splits))
    return results


@pytest.mark.parametrize("splits", [1, 2, 4, 16, 26, 33])
def test_the_coop_counter_completes_each_launch_and_never_early(splits):
    rng = np.random.default_rng(splits)
    assert coop_model(splits, 40, rng) == [(False, True)] * 40


@pytest.mark.parametrize("splits", [2, 4, 16])
def test_the_coop_counter_wraps_cleanly_when_splits_divides_the_counter_range(splits):
    """A power-of-two split count keeps its launches' tickets aligned across the counter's wrap; a
    split count that does not divide 2^bits (33 at M = 1) misaligns there, ~2^bits / 33 launches in:
    bits = 8 makes both visible. Why the kernel's counter is 64 bits: at 32 it would misalign after
    ~1.3e8 launches of one row (hours of decode steps); at 64, after ~5.6e17."""
    rng = np.random.default_rng(7)
    assert coop_model(splits, 40, rng, start=256 - 3 * splits, bits=8) == [(False, True)] * 40
    wrapped = coop_model(33, 40, np.random.default_rng(8), start=33 * (256 // 33 - 1), bits=8)
    assert wrapped[0] == (False, True) and any(r != (False, True) for r in wrapped[1:])


def test_the_lean_copy_map_is_the_swizzled_placement():
    """wg_issue_lean: thread tid's copy i of chunk c = tid % 64, row r0 + 4 i (r0 = tid / 64), lands at
    (i / 2) 8192 + soff[i % 2], soff[v] = wg_swz(r0 + 4 v, c): wg_issue's wg_swz(r, c) for every
    thread and copy of a 64- and a 32-slot tile."""
    src = (REPO_ROOT_WG / "kernels/sparse_mla/split_wgmma.cu").read_text()
    assert "soff0 = wg_swz(r0, c), soff1 = wg_swz(r0 + 4, c)" in src and "(i >> 1) * 8192" in src
    for tile in (64, 32):
        seen = set()
        for tid in range(256):
            c, r0 = tid & 63, tid >> 6
            soff = [wg_swz(r0 + 4 * v, c) for v in range(2)]
            for i in range(tile * 64 // 256):
                r = r0 + 4 * i
                assert (i >> 1) * 8192 + soff[i & 1] == wg_swz(r, c)
                seen.add((r, c))
        assert seen == {(r, c) for r in range(tile) for c in range(64)}


@pytest.mark.parametrize("name", sorted(variants.COOP_DESIGNS))
def test_a_cooperative_grid_that_cannot_be_resident_is_refused_in_one_line(name):
    """coop_kernel (every cooperative design, and the DSA layer's step) refuses, before compiling
    anything, an M whose one-wave grid cannot be resident at once (one CTA an SM), naming the design
    and both counts; at M = 32 on 132 SMs it takes 4 splits (128 CTAs)."""
    class _Hopper:
        props = {"multiProcessorCount": 132}

        def arch(self):
            return "sm_90"

    with pytest.raises(ValueError) as err:
        variants.coop_kernel(_Hopper(), name, 200, 2112, lambda b: ())
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{name}:") and "200" in msg and "132" in msg
    assert variants.one_wave_splits(32, 2112, 132) == 4 and 32 * 4 <= 132
    source, symbol, smem, threads = variants.COOP_DESIGNS[name]
    assert symbol in (variants.HERE / source).read_text()
    assert variants.source_define(source, smem) <= 227 * 1024 and variants.source_define(source, threads) in (256, 384)


@pytest.mark.parametrize("name", sorted(variants.COOP_DESIGNS))
def test_a_cooperative_design_skips_an_m_the_device_cannot_hold_at_once(geometry, name, monkeypatch):
    """The same refusal as coop_kernel's, at supports (a skipped row with the reason, before any input
    is made): M = 200 on 132 SMs; M = 32 runs; with no device to ask, supports leaves it to the build."""
    comp = registry.get("sparse_mla")
    v = next(v for v in comp.variants if v.name == name)
    point = {"M": 32, "context": 8192, "selection": "grouped", "page_size": 64, "arena_scale": 1,
             "latent_dtype": "bf16"}
    monkeypatch.setattr(variants, "_arena_fits", lambda g, p: None)
    monkeypatch.setattr(variants, "current_device_sms", lambda: 132)
    assert v.supports(geometry, point) is None
    reason = v.supports(geometry, {**point, "M": 200})
    assert reason and "\n" not in reason and reason.startswith(f"{name}:") and "200" in reason and "132" in reason
    monkeypatch.setattr(variants, "current_device_sms", lambda: None)
    assert v.supports(geometry, {**point, "M": 200}) is None


# ---- split_wgmma_ws_alt: alternate whole tiles per warpgroup, O split along the latent -------------

def alt_split_model(q: np.ndarray, c: np.ndarray, valid: np.ndarray, scale: float, start: int, end: int):
    """sparse_mla_split_wgmma_ws_alt's CTA in float32 (split_wgmma_ws.cu, "the alternate-tile form"):
    pair i's tile a = 2 i is warpgroup 0's, tile b = 2 i + 1 warpgroup 1's; warpgroup cw keeps O's
    latent half cw, its own running max and sum. -> (acc [64, 512], m [64], l [64]) as split_model."""
    H, D = q.shape
    tiles = range(start, end, TILE)
    m = [np.full(H, -np.inf, np.float32), np.full(H, -np.inf, np.float32)]
    l = [np.zeros(H, np.float32), np.zeros(H, np.float32)]
    o = [np.zeros((H, D // 2), np.float32), np.zeros((H, D // 2), np.float32)]

    def tile_rows(j0):
        j = np.arange(j0, j0 + TILE)
        ok = (j < end) & valid[np.minimum(j, len(valid) - 1)]
        return ok, np.where(ok[:, None], c[np.minimum(j, len(c) - 1)], 0).astype(np.float32)

    def softmax(cw, ok, rows, other):   # alt_softmax: the new max over m, other and the tile's
        s = np.where(ok[None, :], scale * (q @ rows.T), -np.inf) if rows is not None else np.full((H, TILE), -np.inf)
        mn = np.maximum(np.maximum(m[cw], other), s.max(axis=1))
        none = mn == -np.inf
        with np.errstate(invalid="ignore"):
            alpha = np.where(none, 1.0, np.exp(m[cw] - mn)).astype(np.float32)
            p = bf16(np.where(none[:, None], 0.0, np.exp(s - mn[:, None])))
        l[cw] = l[cw] * alpha + p.sum(axis=1)
        m[cw] = mn.astype(np.float32)
        o[cw] *= alpha[:, None]
        return p

    for i in range(0, len(tiles), 2):
        ok_a, rows_a = tile_rows(tiles[i])
        has_b = i + 1 < len(tiles)
        ok_b, rows_b = tile_rows(tiles[i + 1]) if has_b else (None, None)
        p_a = softmax(0, ok_a, rows_a, np.full(H, -np.inf))              # wg 0; publishes new0 (A)
        o[0] += p_a @ rows_a[:, :D // 2]                                  # PV(a, left, RS)
        p_b = softmax(1, ok_b, rows_b, m[0])                              # wg 1 against new0; new1 (B)
        if has_b:
            o[1] += p_b @ rows_b[:, D // 2:]                              # PV(b, right, RS)
        with np.errstate(invalid="ignore"):                               # wg 0: sf = exp(new0 - new1)
            sf = np.where(m[1] == m[0], 1.0, np.exp(m[0] - m[1])).astype(np.float32)
        m[0] = m[1].copy()
        o[1] += bf16(p_a * sf[:, None]) @ rows_a[:, D // 2:]              # PV(a, right, SS sP0)
        l[0] *= sf
        o[0] *= sf[:, None]
        if has_b:
            o[0] += p_b @ rows_b[:, :D // 2]                              # PV(b, left, SS sP1)
    assert np.array_equal(m[0], m[1]), "both warpgroups end on the same max"
    return np.concatenate(o, axis=1), m[0], l[0] + l[1]


@pytest.mark.parametrize("W,splits,empty", [(576, 4, False), (576, 3, False), (448, 2, False), (576, 5, True)])
def test_the_alternate_tile_algorithm_matches_the_reference(W, splits, empty):
    """Chunks of 1-5 tiles (odd counts leave warpgroup 1 a pair without its tile), a ragged last
    tile, a split with no valid slot and a stream with none: the combine of alt_split_model's
    partials is the attention within the component's rules, and each partial is split_model's."""
    q, c, valid, scale, parts = split_case(splits + 10 * W, W, splits, empty, TILE)
    alt = [alt_split_model(q, c, valid, scale, s * W // splits, (s + 1) * W // splits) for s in range(splits)]
    for (acc, m, l), (acc_ref, m_ref, l_ref) in zip(alt, parts):
        assert np.array_equal(m, m_ref)   # the same exact maxima, reached by another path
        assert np.allclose(l, l_ref, rtol=2e-2, atol=0) and np.allclose(acc, acc_ref, rtol=2e-2, atol=2e-2 * np.abs(acc_ref).max() + 1e-30)
    out, lse = combine(alt)
    if empty:
        assert not out.any() and np.isneginf(lse).all()
        return
    want_out, want_lse = spec.attend(q.astype(np.float64), c[valid].astype(np.float64), scale)
    for name, got, want in (("out", out, want_out), ("lse", lse, want_lse)):
        rule = spec.checks({})[name]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rule.tolerance and np.abs(got - want).max() <= rule.tolerance * np.abs(want).max(), (name, err)


class NamedBarrier:
    """A named barrier of 256 threads used one-sided (128 bar.arrive, 128 bar.sync): the hardware
    only counts, so a side that arrives twice in one phase completes it without its partner."""

    def __init__(self):
        self.arrived, self.completed = set(), 0

    def arrive(self, side: int) -> int:
        assert side not in self.arrived, "one side arrived twice in one phase: the barrier pairs the wrong phases"
        self.arrived.add(side)
        phase = self.completed
        if len(self.arrived) == 2:
            self.arrived, self.completed = set(), self.completed + 1
        return phase


def alt_ring_model(ntiles: int, rng: np.random.Generator, early_free: bool = False, one_half_wait: bool = False) -> None:
    """One random interleaving of the alternate-tile form (split_wgmma_ws.cu): the 4 producer warps
    (warps 0 and 2 copy latent half 0, 1 and 3 half 1; async arrivals that land later, in order per
    warp), the two consumer warpgroups on the named barriers A-E and the half-tile ring. Asserts: no
    half of a stage written while a read of its previous tile is in flight or still to come, no read
    of a half before both its warps' copies landed, the validity words of the tile read, every
    exchange buffer (sM0, sM1, sP0, sP1, sL) read at the version written for it and rewritten only
    after that read, every mbarrier arrival in its phase, barrier phases paired, no deadlock, no copy
    in flight at exit. ``early_free`` / ``one_half_wait``: wrong protocols the model must catch."""
    full = {(s, h): Mbarrier(65 if h == 0 else 64) for s in (0, 1) for h in (0, 1)}
    empty = {(s, h): Mbarrier(128) for s in (0, 1) for h in (0, 1)}
    holds = {(s, h): [None, None] for s in (0, 1) for h in (0, 1)}   # the tile each of its two warps copied
    reads = {(s, h): {} for s in (0, 1) for h in (0, 1)}              # tile -> reads left (S and one PV)
    active = {(s, h): 0 for s in (0, 1) for h in (0, 1)}
    mask = [None, None]
    bufs = {name: [None, 0] for name in ("sM0", "sM1", "sP0", "sP1", "sL")}   # version, reads pending
    bars = {name: NamedBarrier() for name in "ABCDE"}
    landed = [0] * PRODUCER_WARPS
    agents = []

    def write(name, version):
        assert bufs[name][1] == 0, f"{name} rewritten before its last version was read"
        bufs[name] = [version, 1]

    def read(name, version):
        assert bufs[name] == [version, 1], f"{name} read at {bufs[name]}, wanted version {version}"
        bufs[name][1] = 0

    def start_read(s, h, t):
        assert holds[(s, h)] == [t, t], f"tile {t} half {h} read from a stage holding {holds[(s, h)]}"
        active[(s, h)] += 1

    def end_read(s, h, t):
        assert holds[(s, h)] == [t, t], f"tile {t} half {h} overwritten while read"
        active[(s, h)] -= 1
        reads[(s, h)][t] -= 1

    def sync(name, side):
        phase = bars[name].arrive(side)
        while bars[name].completed <= phase:
            yield

    def wait_full(s, h, t):
        while not full[(s, h)].try_wait((t // 2) & 1, t // 2):
            yield

    def landing(w, s, h, t):
        while landed[w] < t:
            yield
        yield
        holds[(s, h)][w >> 1] = t
        landed[w] = t + 1
        full[(s, h)].arrive(32, t // 2)

    def producer_warp(w):
        h = w & 1                                     # chunk p % 64 < 32: warps 0 and 2 copy dims 0-255
        for t in range(ntiles):
            s = t % 2
            if t >= 2:
                while not empty[(s, h)].try_wait((t // 2 - 1) & 1, t // 2 - 1):
                    yield
                assert active[(s, h)] == 0 and reads[(s, h)].get(t - 2, 0) == 0, f"tile {t} over a half still read"
            if w == 0:
                mask[s] = t                           # the validity words, then thread 0's release arrive
            holds[(s, h)][w >> 1] = None
            reads[(s, h)][t] = 2
            yield
            if w == 0:
                full[(s, 0)].arrive(1, t // 2)
            agents.append(landing(w, s, h, t))
            live.append(len(agents) - 1)
            yield
        while landed[w] < ntiles:                     # cp.async.wait_all
            yield

    def free(s, h, t):
        empty[(s, h)].arrive(128, t // 2)

    def wg0():
        if ntiles > 0:                                # S of tile 0: left half, then right
            yield from wait_full(0, 0, 0)
            start_read(0, 0, 0)
            yield from wait_full(0, 1, 0)
            start_read(0, 1, 0)
            yield
            end_read(0, 0, 0), end_read(0, 1, 0)
        for i in range((ntiles + 1) // 2):
            a, b, has_b = 2 * i, 2 * i + 1, 2 * i + 1 < ntiles
            assert mask[0] == a, "warpgroup 0 read another tile's validity words"
            write("sM0", i)
            bars["A"].arrive(0)
            start_read(0, 0, a)                       # PV(a, left, RS)
            if early_free:
                free(0, 0, a)
            yield
            end_read(0, 0, a)
            if not early_free:
                free(0, 0, a)
            yield from sync("B", 0)
            read("sM1", i)
            write("sP0", i)
            bars["C"].arrive(0)
            yield from sync("D", 0)
            if has_b:                                 # PV(b, left, SS sP1)
                start_read(1, 0, b)
            yield
            if a + 2 < ntiles:                        # S of tile a + 2 under it
                yield from wait_full(0, 0, a + 2)
                start_read(0, 0, a + 2)
                yield                                 # wgmma.wait_group 1: the PV on b retired
            if has_b:
                end_read(1, 0, b)
                read("sP1", i)
                free(1, 0, b)
            if a + 2 < ntiles:
                yield from wait_full(0, 1, a + 2)
                start_read(0, 1, a + 2)
                yield
                end_read(0, 0, a + 2), end_read(0, 1, a + 2)
        yield from sync("E", 0)
        read("sL", 0)

    def wg1():
        for i in range((ntiles + 1) // 2):
            a, b, has_b = 2 * i, 2 * i + 1, 2 * i + 1 < ntiles
            if has_b:                                 # S of tile b: right half first
                yield from wait_full(1, 1, b)
                start_read(1, 1, b)
                if not one_half_wait:
                    yield from wait_full(1, 0, b)
                start_read(1, 0, b)
                yield
                end_read(1, 1, b), end_read(1, 0, b)
                assert mask[1] == b, "warpgroup 1 read another tile's validity words"
            yield from sync("A", 1)
            read("sM0", i)
            write("sM1", i)
            bars["B"].arrive(1)
            if has_b:                                 # P_b into sP1; PV(b, right, RS)
                write("sP1", i)
                start_read(1, 1, b)
            bars["D"].arrive(1)
            yield from sync("C", 1)
            start_read(0, 1, a)                       # PV(a, right, SS sP0)
            yield
            if has_b:                                 # wait_group 1
                end_read(1, 1, b)
                free(1, 1, b)
            yield
            end_read(0, 1, a)
            read("sP0", i)
            free(0, 1, a)
        write("sL", 0)
        bars["E"].arrive(1)

    agents += [producer_warp(w) for w in range(PRODUCER_WARPS)] + [wg0(), wg1()]
    live = list(range(len(agents)))
    interleave(agents, live, rng, 600 * (ntiles + 1) + 4000)
    assert landed == [ntiles] * PRODUCER_WARPS, "copies in flight at exit"
    assert all(left == 0 for r in reads.values() for left in r.values()), "a half's read never happened"


def test_the_alternate_tile_model_constants_are_the_kernels():
    text = (variants.HERE / WS_SOURCE).read_text()
    # the half-tile ring's barriers (alt_ring_model: full[s][0] 65 = 64 copy arrivals + thread 0's)
    assert "mbar_init(base + ALT_BAR_AT + 8 * k, (k & 1) ? 64 : 65);" in text
    assert "mbar_init(base + ALT_BAR_AT + 32 + 8 * k, 128);" in text
    assert "const unsigned half8 = ALT ? 8u * (unsigned)((p >> 5) & 1) : 0u;" in text
    assert "mbar_wait(ALT ? bar + 32 + 16 * s + half8 : bar + 16 + 8 * s, (unsigned)((t / WS_STAGES - 1) & 1));" in text
    assert "const unsigned full = ALT ? bar + 16 * s + half8 : bar + 8 * s;" in text
    # warpgroup 0 waits stage 0's halves (left first), warpgroup 1 stage 1's (right first)
    assert "mbar_wait(bar, par);" in text and "mbar_wait(bar + 8, par);" in text
    assert text.index("mbar_wait(bar + 16 + 8, par);") < text.index("mbar_wait(bar + 16, par);")
    # the frees: a-left, b-left (wg 0), b-right, a-right (wg 1)
    for line in ("mbar_arrive(bar + 32);  // a-left free", "mbar_arrive(bar + 32 + 16);  // b-left free",
                 "mbar_arrive(bar + 32 + 16 + 8);  // b-right free", "mbar_arrive(bar + 32 + 8);  // a-right free"):
        assert line in text, line
    # the named barriers' sides as alt_ring_model runs them
    for side in ("named_arrive<1, 256>();  // A", "named_sync<2, 256>();   // B", "named_arrive<3, 256>();      // C",
                 "named_sync<4, 256>();        // D", "named_sync<1, 256>();  // A", "named_arrive<2, 256>();  // B",
                 "named_arrive<4, 256>();  // D", "named_sync<3, 256>();    // C"):
        assert side in text, side
    used = int(re.search(r"#define\s+ALT_USED\s+(\d+)", text).group(1))
    assert variants.source_define(WS_SOURCE, "SPARSE_MLA_SPLIT_WGMMA_WS_ALT_SMEM_BYTES") == used + 1024 <= 227 * 1024


@pytest.mark.parametrize("ntiles", range(8))
def test_the_alternate_tile_protocol_never_overwrites_or_reads_early(ntiles):
    rng = np.random.default_rng(77 + ntiles)
    for _ in range(40):
        alt_ring_model(ntiles, rng)


@pytest.mark.parametrize("wrong", ["early_free", "one_half_wait"])
def test_the_alternate_tile_model_tells_a_wrong_protocol(wrong):
    rng = np.random.default_rng(11)
    with pytest.raises(AssertionError):
        for _ in range(200):
            alt_ring_model(6, rng, **{wrong: True})
