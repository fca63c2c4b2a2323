"""split_wgmma_seesaw on the CPU (kernels/sparse_mla/split_wgmma_seesaw.cu): NumPy models of its two
new parts, written before its first GPU run.

- The arithmetic: two warpgroups on alternate 32-slot tiles, each with its own running max and sum
  over every tile it has folded in (its own and its partner's, in the schedule's order), a partner's
  P scaled to the local max and rounded to bf16 again where that max is higher, O rescaled where the
  partner's is; warpgroup 1's O brought to warpgroup 0's sum at the end. Against the float64
  reference through the combine, with score orders that take every branch of the fold.
- The schedule: the two warpgroups' operations (copies, waits, barriers, S / PV wgmmas and their
  retirement, the P hand-off) run in random interleavings that respect only what the kernel's
  barriers and waits enforce; no copy may overwrite a stage a pending wgmma still reads or that a
  tile not yet read holds, no wgmma may read a stage before its tile landed and was made visible,
  and no P hand-off may be overwritten before its reader took it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.fuel import REPO_ROOT
from kernels.sparse_mla import spec
from test_sparse_mla_wgmma import bf16, combine

SRC = (REPO_ROOT / "kernels/sparse_mla/split_wgmma_seesaw.cu").read_text()
TILE = 32


def test_the_model_constants_are_the_kernels():
    assert int(re.search(r"#define SS_TILE (\d+)", SRC).group(1)) == TILE
    # sQ 64 KiB + 4 stages of 32 KiB + P [2][2][128] uint4 + (m, s) [2][128] float4 + 1 KiB of slack
    used = 65536 + 4 * TILE * 1024 + 2 * 2 * 128 * 16 + 2 * 128 * 16
    assert int(re.search(r"#define SPARSE_MLA_SEESAW_SMEM_BYTES (\d+)", SRC).group(1)) == used + 1024 <= 232448


def seesaw_model(q, c, valid, scale, start, end, counts=None, rescale=True):
    """The CTA's arithmetic in float32, in the kernel's order. -> (acc [64, 512], m [64], l [64]):
    the partial state the kernel writes (warpgroup 0's m and l; warpgroup 1's O times l_0 / l_1).
    rescale=False: a wrong fold that takes the partner's max without rescaling O and l (the check's teeth)."""
    H, D = q.shape
    ntiles = -(-(end - start) // TILE)
    st = [{"m": np.full(H, -np.inf, np.float32), "l": np.zeros(H, np.float32),
           "o": np.zeros((H, D // 2), np.float32)} for _ in range(2)]
    counts = {} if counts is None else counts

    def tile_rows(t):
        j = np.arange(start + t * TILE, start + (t + 1) * TILE)
        ok = (j < end) & valid[np.minimum(j, len(valid) - 1)]
        return ok, np.where(ok[:, None], c[np.minimum(j, len(c) - 1)], 0).astype(np.float32)

    def own(w, t):
        """softmax of the own tile t: new max, P (bf16), the tile's row sums; O rescaled; P . C_half."""
        s_, ok, rows = st[w], *tile_rows(t)
        sc = np.where(ok[None, :], scale * (q @ rows.T), -np.inf).astype(np.float32)
        mn = np.maximum(s_["m"], sc.max(axis=1))
        none = mn == -np.inf
        with np.errstate(invalid="ignore"):
            alpha = np.where(none, 1.0, np.exp(s_["m"] - mn)).astype(np.float32)
            p = bf16(np.where(none[:, None], 0.0, np.exp(sc - mn[:, None])))
        ls = p.sum(axis=1, dtype=np.float32)
        s_["l"] = s_["l"] * alpha + ls
        s_["m"] = mn
        s_["o"] = s_["o"] * alpha[:, None] + p @ rows[:, 256 * w:256 * w + 256]
        return p, mn.copy(), ls, rows

    def fold(w, pub):
        """the partner's tile: (P, m_p, s_p, rows) as published; m_p >= m (the kernel's header)."""
        p, mp, sp, rows = pub
        s_ = st[w]
        assert (mp >= s_["m"]).all(), "a partner's max below this warpgroup's: the kernel has no branch for it"
        up = mp > s_["m"]
        beta = np.ones(H, np.float32)
        with np.errstate(invalid="ignore"):
            beta[up] = np.exp(s_["m"][up] - mp[up]) if rescale else 1.0
        counts["up"] = counts.get("up", 0) + int(up.sum())
        s_["m"] = np.where(up, mp, s_["m"])
        s_["l"] = s_["l"] * beta + sp
        s_["o"] = s_["o"] * beta[:, None] + p @ rows[:, 256 * w:256 * w + 256]

    for pr in range(-(-ntiles // 2)):
        pub0 = own(0, 2 * pr)               # wg 0: its tile 2p, published (bar 3)
        fold(1, pub0)                       # wg 1: tile 2p first
        if 2 * pr + 1 < ntiles:
            pub1 = own(1, 2 * pr + 1)       # wg 1: its tile 2p + 1, published (bar 4)
            fold(0, pub1)                   # wg 0: after its own PV
    assert np.array_equal(st[0]["m"], st[1]["m"]), "both warpgroups end at the same maxima"
    l0, l1 = st[0]["l"], st[1]["l"]
    f1 = np.where(l1 > 0, l0 / np.where(l1 > 0, l1, 1), 1).astype(np.float32)
    acc = np.concatenate([st[0]["o"], st[1]["o"] * f1[:, None]], axis=1)
    return acc, st[0]["m"], l0


def case(seed, W, splits, order, empty=False, rescale=True):
    """Random bf16 q and rows, ~70 % of the slots valid, split 1 with none; order: the rows sorted so
    that the scores of head 0 rise (every tile a new max: the fold's rescaling branch for every
    tile) or fall (the first tile's max settles at once)."""
    rng = np.random.default_rng(seed)
    H, D, scale = 64, 512, 1 / 16
    q = bf16(rng.standard_normal((H, D)))
    c = bf16(rng.standard_normal((W, D)))
    if order != "random":
        key = c @ q[0]
        c = c[np.argsort(key if order == "rising" else -key)]
    valid = rng.random(W) < 0.7
    valid[W // splits:2 * W // splits] = False
    if empty:
        valid[:] = False
    counts = {}
    parts = [seesaw_model(q, c, valid, scale, s * W // splits, (s + 1) * W // splits, counts, rescale)
             for s in range(splits)]
    return q, c, valid, scale, parts, counts


@pytest.mark.parametrize("order", ["random", "rising", "falling"])
@pytest.mark.parametrize("splits", [4, 3, 1])
def test_the_seesaw_algorithm_matches_the_reference(splits, order):
    """Ragged chunks (odd tile counts: warpgroup 1 idle in the last pair), a split with no valid slot,
    scores rising and falling across tiles."""
    q, c, valid, scale, parts, counts = case(splits, 1056, splits, order)
    if splits > 1:
        assert parts[1][1].max() == -np.inf and not parts[1][0].any() and not parts[1][2].any()
    assert counts["up"] > 0, counts   # the rescaling branch taken (at least by the first folds)
    out, lse = combine(parts)
    want_out, want_lse = spec.attend(q.astype(np.float64), c[valid].astype(np.float64), scale)
    for name, got, want in (("out", out, want_out), ("lse", lse, want_lse)):
        rule = spec.checks({})[name]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= rule.tolerance and np.abs(got - want).max() <= rule.tolerance * np.abs(want).max(), (name, err)


def test_an_empty_stream_gives_zeros_and_minus_infinity():
    q, c, valid, scale, parts, _ = case(7, 576, 3, "random", empty=True)
    out, lse = combine(parts)
    assert not out.any() and np.isneginf(lse).all()


def test_a_fold_that_ignores_the_partners_max_is_caught():
    """The model's check has teeth: folding the partner's P without bringing O and l to its larger
    max misses the reference (rising scores: every tile raises it)."""
    errs = []
    for rescale in (True, False):
        q, c, valid, scale, parts, _ = case(3, 1056, 2, "rising", rescale=rescale)
        want_out, _ = spec.attend(q.astype(np.float64), c[valid].astype(np.float64), scale)
        errs.append(np.linalg.norm(combine(parts)[0] - want_out) / np.linalg.norm(want_out))
    assert errs[0] < spec.checks({})["out"].tolerance < errs[1], errs


# ---- the schedule ---------------------------------------------------------------------------------

def wg_program(w, ntiles):
    """Warpgroup w's operations in the kernel's order (header: "Schedule"). Each is a tuple:
    ('copy', tile) issue a tile's copy (one cp.async group), ('landed',) wait_group 0 + fence + the
    warpgroup barrier, ('S', tile) / ('PV', tile) a committed wgmma group reading the tile's stage,
    ('wait', n) wgmma.wait_group n, ('pub',) write P and arrive, ('take',) bar.sync and read P."""
    prog = []
    npairs = -(-ntiles // 2)
    own = lambda p: 2 * p + w < ntiles  # noqa: E731
    # prologue: pairs 0 and 1's own tiles; the loop starts after a CTA barrier on pair 0's
    for p in (0, 1):
        if own(p):
            prog.append(("copy", 2 * p + w))
    prog.append(("cta_sync_landed", 2 * 0 + w))
    for p in range(npairs):
        j = 2 * p + w
        if w == 1:
            prog += [("take", 2 * p), ("PV", 2 * p)]
        if own(p):
            if p >= 1:
                prog.append(("landed", j))
            prog.append(("S", j))
            if p >= 1:
                prog.append(("wait", 2))
                if own(p + 1):
                    prog.append(("copy", j + 2))
            prog += [("wait", 0), ("pub", j), ("PV", j)]
        if w == 0 and 2 * p + 1 < ntiles:
            prog += [("take", 2 * p + 1), ("PV", 2 * p + 1)]
    prog.append(("wait", 0))
    return prog


def run_schedule(ntiles, rng, programs=None):
    """Random interleaving of the two programs; raises AssertionError on a hazard."""
    progs = programs or [wg_program(0, ntiles), wg_program(1, ntiles)]
    pc = [0, 0]
    stage = {}                       # stage -> tile it holds (or is being copied)
    landed = {}                      # tile -> copy complete (per owner, made visible by 'landed')
    visible = set()                  # tiles whose copies were made visible (owner's barrier)
    reads_left = {}                  # tile -> reads still to come (S by owner, PV by both)
    pending = [[], []]               # per warpgroup: committed wgmma groups (tiles read), oldest first
    copies = [[], []]                # per warpgroup: cp.async groups in flight (tiles)
    box = {0: None, 1: None}         # P hand-off buffer per direction: tile published, not yet taken
    arrived = {0: [], 1: []}         # tiles published per direction, in order (bar 3 / bar 4 phases)
    cta_waiting = set()

    def can_run(w):
        op = progs[w][pc[w]]
        if op[0] == "take":
            src = 1 - w
            return bool(arrived[src]) and arrived[src][0] == op[1]
        if op[0] == "cta_sync_landed":
            return cta_waiting | {w} == {0, 1}
        return True

    def retire_some(w):
        while pending[w] and rng.random() < 0.5:
            pending[w].pop(0)

    while pc[0] < len(progs[0]) or pc[1] < len(progs[1]):
        ready = [w for w in (0, 1) if pc[w] < len(progs[w]) and can_run(w)]
        blocked_cta = [w for w in (0, 1) if pc[w] < len(progs[w]) and progs[w][pc[w]][0] == "cta_sync_landed"]
        for w in blocked_cta:
            cta_waiting.add(w)
        assert ready, f"deadlock at {[progs[w][pc[w]] if pc[w] < len(progs[w]) else None for w in (0, 1)]}"
        w = int(rng.choice(ready))
        retire_some(0), retire_some(1)
        op = progs[w][pc[w]]
        kind = op[0]
        if kind == "copy":
            t = op[1]
            s = t & 3
            old = stage.get(s)
            if old is not None:
                assert reads_left[old] == 0, f"tile {t} overwrites tile {old} before all its reads"
                for v in (0, 1):
                    assert old not in pending[v], f"tile {t} overwrites tile {old} under a pending wgmma of wg {v}"
            stage[s] = t
            reads_left[t] = 1 + 2 * 1  # S by the owner, PV by both
            copies[w].append(t)
        elif kind in ("landed", "cta_sync_landed"):
            for v in ((0, 1) if kind == "cta_sync_landed" else (w,)):
                if kind == "cta_sync_landed":
                    # each thread's wait_group 1: all but its newest group
                    done = copies[v][:-1] if len(copies[v]) > 1 else copies[v]
                else:
                    done = list(copies[v])
                for t in done:
                    visible.add(t)
                copies[v] = [t for t in copies[v] if t not in done]
            if kind == "cta_sync_landed":
                cta_waiting.clear()
                pc[1 - w] += 1       # the other warpgroup passes the CTA barrier at the same time
        elif kind in ("S", "PV"):
            t = op[1]
            assert t in visible, f"wg {w} {kind} reads tile {t} before it landed and was made visible"
            assert stage.get(t & 3) == t, f"wg {w} {kind} reads tile {t}'s stage holding {stage.get(t & 3)}"
            reads_left[t] -= 1
            pending[w].append(t)
        elif kind == "wait":
            keep = op[1]  # all but the newest `keep` groups retire
            pending[w] = pending[w][-keep:] if keep else []
        elif kind == "pub":
            assert box[w] is None, f"wg {w} overwrites P of tile {box[w]} before its partner took it"
            box[w] = op[1]
            arrived[w].append(op[1])
        elif kind == "take":
            src = 1 - w
            assert box[src] == op[1], (box[src], op[1])
            box[src] = None
            arrived[src].pop(0)
        pc[w] += 1
    assert all(v == 0 for v in reads_left.values()), reads_left
    return True


@pytest.mark.parametrize("ntiles", [1, 2, 3, 4, 5, 8, 17])
def test_the_schedule_never_overwrites_or_reads_early(ntiles):
    rng = np.random.default_rng(ntiles)
    for _ in range(300):
        run_schedule(ntiles, rng)


@pytest.mark.parametrize("wrong", ["copy_before_wait", "copy_before_take"])
def test_the_schedule_model_tells_a_wrong_order(wrong):
    """Two plausible mistakes the kernel avoids: issuing the next copy before wait_group 2 (this
    warpgroup's PV of the tile in that stage may still run), and warpgroup 1 copying before it took
    tile 2p's P (warpgroup 0 may still read the stage by its PV of tile 2p - 1)."""
    def mutate(prog, w):
        out = list(prog)
        for i, op in enumerate(out):
            if wrong == "copy_before_wait" and op[0] == "wait" and op[1] == 2 and out[i + 1][0] == "copy":
                out[i], out[i + 1] = out[i + 1], out[i]
            if wrong == "copy_before_take" and w == 1 and op[0] == "copy" and i > 0 and out[i - 1][0] == "wait":
                # move the copy to the top of its pair, before the take
                j = max(k for k in range(i) if out[k][0] == "take")
                out.insert(j, out.pop(i))
        return out

    rng = np.random.default_rng(5)
    failures = 0
    for _ in range(300):
        progs = [mutate(wg_program(0, 9), 0), mutate(wg_program(1, 9), 1)]
        try:
            run_schedule(9, rng, progs)
        except AssertionError:
            failures += 1
    assert failures > 0


def test_the_hoisted_copy_map_is_the_swizzled_placement_and_covers_the_tile_once():
    """ss_copy_map / ss_issue: chunk c = tl % 64 of rows r0 + 2 i (r0 = tl / 64) lands at
    (i / 4) 8192 + soff[i % 4], soff[q] = wg_swz(2 q + r0, c): that must be wg_swz(r0 + 2 i, c) for
    every thread and copy, and the 128 threads x 16 copies must fill the 32-row tile exactly once."""
    from test_sparse_mla_wgmma import wg_swz

    seen = set()
    for tl in range(128):
        c, r0 = tl & 63, tl >> 6
        soff = [wg_swz(2 * q + r0, c) for q in range(4)]
        for i in range(16):
            r = r0 + 2 * i
            assert (i >> 2) * 8192 + soff[i & 3] == wg_swz(r, c), (tl, i)
            seen.add((r, c))
    assert seen == {(r, c) for r in range(TILE) for c in range(64)}
    assert "cm.soff[i & 3] + (i >> 2) * 8192" in SRC and "wg_swz(2 * q + cm.r0, c)" in SRC
