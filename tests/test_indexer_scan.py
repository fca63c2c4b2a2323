"""The indexer scan and its stream floor on the CPU: the reference is reference.index_scores over
the keys read back from the (host) device, eligibility per stream (seed 003's worked examples),
the resident key build in both layouts and dtypes, the FP8 path, bytes and FLOPs, the floor's XOR,
the dim_cand padding, a NumPy emulation of scan_mma's dim permutation and fragments, the
tolerance against torch's BF16 rounding, and both CPU variants through the runner."""

from __future__ import annotations

import pathlib

from types import SimpleNamespace

import numpy as np
import pytest

from harness import backends, registry, runner
from harness.verify import RelErr, compare
from kernels import fp8
from kernels.dsa_indexer import reference as dsa_ref
from kernels.dsa_indexer import scan_spec as spec
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16

QUICK = SimpleNamespace(warmup=0, min_reps=1, max_reps=1, min_time_ms=0.0, max_noise=1.0, timeout_s=5.0,
                        cache="auto", graph=False, chain=1)
LAYOUTS_DTYPES = [(lay, dt) for lay in spec.KEY_LAYOUTS for dt in ("bf16", "fp8")]


def _point(**kw):
    return {"M": 5, "context": 1028, "pooling": "per_token", "key_dtype": "bf16", "key_layout": "cand_dim", **kw}


def _case(geometry, point, seed=3):
    comp = registry.get("indexer_scan")
    return runner._case(comp, geometry, point, seed, None, backends.CpuBackend())


def _decoded(geometry, point, inputs, m):
    """Stream m's key values decoded here, independently of scan_spec's helpers."""
    C = spec.n_candidates(geometry, point)
    raw = inputs.resident["keys"][m]
    raw = raw[:, :C].T if point["key_layout"] == "dim_cand" else raw
    if point["key_dtype"] == "fp8":
        return fp8.decode_e4m3(raw).astype(np.float64) * inputs.resident["key_scales"][m][:, None].astype(np.float64)
    return bf16_to_float(np.ascontiguousarray(raw)).astype(np.float64)


@pytest.mark.parametrize("pooling", ["pooled", "per_token"])
@pytest.mark.parametrize("layout,dtype", LAYOUTS_DTYPES)
def test_reference_is_index_scores_over_the_resident_keys(geometry, pooling, layout, dtype):
    point = _point(pooling=pooling, key_layout=layout, key_dtype=dtype)
    inputs, ref = _case(geometry, point)
    streams = spec.reference_streams(geometry, point)
    assert streams == [0, 1, 3, 4]
    for i, m in enumerate(streams):
        want = dsa_ref.index_scores(bf16_to_float(inputs["q"][m]), inputs["w"][m], _decoded(geometry, point, inputs, m),
                                    int(spec.eligible(geometry, point)[m]))
        if dtype == "fp8":   # the spec dequantizes as fp8.dequantize_rows does (FP32 products), _decoded exactly
            assert np.allclose(ref["scores"][i], want, rtol=1e-5, atol=1e-6)
            assert np.array_equal(np.isneginf(ref["scores"][i]), np.isneginf(want))
        else:
            assert np.array_equal(ref["scores"][i], want)
        elig = int(inputs["eligible"][m])
        assert np.isfinite(ref["scores"][i][:elig]).all() and np.isneginf(ref["scores"][i][elig:]).all()


def test_eligibility_follows_seed_003s_worked_examples(geometry):
    """Stream m sees n = context - m % 4 tokens, the query at n - 1. context 10004: stream 2's query
    sits at 10,001 (2,500 complete pools, tail 10,000-10,001), stream 0's at 10,003 (the last pool
    complete: 2,501, no tail)."""
    pooled = spec.eligible(geometry, _point(M=4, context=10004, pooling="pooled"))
    per_token = spec.eligible(geometry, _point(M=4, context=10004))
    assert pooled.tolist() == [2501, 2500, 2500, 2500]
    assert per_token.tolist() == [10004, 10003, 10002, 10001]
    assert spec.n_candidates(geometry, _point(context=10004, pooling="pooled")) == 2501
    for m, n in enumerate(per_token):
        assert pooled[m] == dsa_ref.complete_pools(n - 1, 4)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_keys_are_built_on_the_backend_in_either_layout_from_one_draw(geometry, dtype):
    """One seed gives the same keys in both layouts (dim_cand is the transpose, zero-padded to 64)."""
    cpu = backends.CpuBackend()
    a = spec.build_keys(geometry, _point(key_dtype=dtype, context=1100), cpu, seed=9)
    b = spec.build_keys(geometry, _point(key_dtype=dtype, context=1100, key_layout="dim_cand"), cpu, seed=9)
    C = 1100
    assert a.shape == (5, C, 128) and b.shape == (5, 128, 1152)       # 1100 -> 1152 = 18 x 64
    assert a.dtype == b.dtype == (np.uint8 if dtype == "fp8" else np.uint16)
    assert np.array_equal(b[:, :, :C].transpose(0, 2, 1), a) and (b[:, :, C:] == 0).all()
    assert a.nbytes == spec.keys_nbytes(geometry, _point(key_dtype=dtype, context=1100))
    assert np.array_equal(a, spec.build_keys(geometry, _point(key_dtype=dtype, context=1100), cpu, seed=9))
    assert not np.array_equal(a, spec.build_keys(geometry, _point(key_dtype=dtype, context=1100), cpu, seed=10))
    if dtype == "bf16":
        v = bf16_to_float(a)
        assert abs(v.mean()) < 0.01 and abs(v.std() - 1) < 0.01


def test_fp8_codes_round_toward_zero_never_nan_and_scales_are_positive(geometry):
    cpu = backends.CpuBackend()
    y = np.random.default_rng(0).uniform(-448, 448, 100000).astype(np.float32)
    y[:4] = [448.0, -448.0, 448.00003, 1e-4]
    codes = spec._e4m3_codes(np, y)
    back = fp8.decode_e4m3(codes).astype(np.float64)
    assert np.isfinite(back).all()
    assert (np.abs(back) <= np.abs(y)).all(), "toward zero"
    # within one e4m3 step: 2^-3 of the value's binade for normals, or a flush below 2^-6
    normal = np.abs(y) >= 2.0 ** -6
    assert (np.abs(y[normal] - back[normal]) <= np.abs(y[normal]) / 8).all()
    assert (back[~normal] == 0).all()
    assert back[0] == 448 and back[1] == -448 and back[2] == 448
    point = _point(key_dtype="fp8")
    keys = spec.build_keys(geometry, point, cpu, seed=4)
    scales = spec.build_scales(geometry, point, cpu, seed=5)
    assert scales.shape == (5, 1028) and scales.dtype == np.float32 and (scales > 0).all()
    assert scales.nbytes == spec.scales_nbytes(geometry, point)
    assert (np.abs(fp8.decode_e4m3(keys)).max(axis=-1) == 448).all(), "every row peaks at 448"
    assert spec.build_scales(geometry, _point(), cpu, seed=5).nbytes == 0 == spec.scales_nbytes(geometry, _point())


def test_fp8_reference_scores_the_dequantized_keys(geometry):
    """What the FP8 kernels see: codes x scale (fp8.dequantize_rows), not the draw they came from."""
    point = _point(key_dtype="fp8", M=2)
    inputs, ref = _case(geometry, point)
    raw, scales = spec.stream_keys(geometry, point, inputs, 1)
    want = dsa_ref.index_scores(bf16_to_float(inputs["q"][1]), inputs["w"][1], fp8.dequantize_rows(raw, scales),
                                int(inputs["eligible"][1]))
    assert np.array_equal(ref["scores"][1], want)


def test_bytes_and_flops(geometry):
    point = _point(M=4, context=4096, pooling="pooled")
    elig = 1024 + 3 * 1023                                 # streams 1..3 lose their incomplete last pool
    assert spec.eligible_total(geometry, point) == elig
    q_w = 4 * 32 * 128 * 2 + 4 * 32 * 4
    assert spec.bytes_moved(geometry, point) == elig * 256 + q_w + 4 * 1024 * 4
    assert spec.bytes_moved(geometry, {**point, "key_dtype": "fp8"}) == elig * 132 + q_w + 4 * 1024 * 4
    assert spec.stream_bytes(geometry, point) == elig * 256 + 4 * 1024 * 4
    assert spec.flops(geometry, point) == elig * (2 * 32 * 128 + 2 * 32)
    # the model point: M = 32, 262144 per-token keys, 2 GiB of keys, 68.7 GFLOP
    model = _point(M=32, context=262144)
    dots = spec.eligible_total(geometry, model) * 2 * 32 * 128
    assert abs(dots / 1e9 - 68.7) < 0.05 and spec.flops(geometry, model) == dots * (128 + 1) // 128
    assert spec.keys_nbytes(geometry, model) == 2 << 30
    assert spec.footprint(geometry, _point(M=1)) == spec.FLUSH_FOOTPRINT


@pytest.mark.parametrize("layout,dtype", LAYOUTS_DTYPES)
def test_stream_checksum_is_each_keys_word_xor_in_either_layout(geometry, layout, dtype):
    point = _point(key_layout=layout, key_dtype=dtype, M=2, context=1100)
    comp = registry.get("indexer_stream")
    inputs, ref = runner._case(comp, geometry, point, 5, None, backends.CpuBackend())
    raw = inputs.resident["keys"][1]
    raw = np.ascontiguousarray(raw[:, :1100].T) if layout == "dim_cand" else raw
    c = 17
    words = raw[c].view(np.uint32)                         # the key's bytes in dim order, as 32-bit words
    want = 0
    for word in words.tolist():
        want ^= word
    if dtype == "fp8":
        want ^= int(inputs.resident["key_scales"][1][c:c + 1].view(np.uint32)[0])
    assert ref["checksum"][1][c] == want
    assert (ref["checksum"][1][inputs["eligible"][1]:] == 0).all() and inputs["eligible"][1] == 1099
    # the packing is layout-free: low half of a BF16 word = XOR of the even dims
    if dtype == "bf16":
        assert ref["checksum"][1][c] & 0xFFFF == np.bitwise_xor.reduce(raw[c][0::2])


def test_the_stream_check_catches_one_flipped_bit_and_ignores_ineligible_keys(geometry):
    comp = registry.get("indexer_stream")
    point = _point(M=3, pooling="pooled")
    cpu = backends.CpuBackend()
    inputs, ref = runner._case(comp, geometry, point, 4, None, cpu)
    launch = comp.variant("numpy_stream").build(geometry, point, inputs, cpu)
    launch.poison()
    launch()
    assert all(c.ok for c in runner.checked(comp, point, launch.outputs(), ref, None))
    keys = inputs.resident["keys"]
    keys[1, int(inputs["eligible"][1]), 0] ^= np.uint16(1)          # an ineligible key: never read
    launch()
    assert all(c.ok for c in runner.checked(comp, point, launch.outputs(), ref, None))
    keys[2, 40, 100] ^= np.uint16(1)
    launch()
    bad = [c for c in runner.checked(comp, point, launch.outputs(), ref, None) if not c.ok]
    assert bad and bad[0].first_bad[0] == (2, 40), bad


def test_dim_cand_pads_candidates_to_64(geometry):
    assert spec.padded_candidates(geometry, _point(context=1028, key_layout="dim_cand")) == 1088
    assert spec.padded_candidates(geometry, _point(context=1028)) == 1028
    assert spec.padded_candidates(geometry, _point(context=8192, pooling="pooled", key_layout="dim_cand")) == 2048
    assert spec.keys_nbytes(geometry, _point(context=1028, key_layout="dim_cand", key_dtype="fp8")) == 5 * 128 * 1088


# -- scan_mma's dim permutation and fragments, emulated ----------------------------------------------


def _perm(fp8_keys: bool) -> np.ndarray:
    """scan_mma.cu's map: logical dim 16 s + kk (kk = 2 t + e + 8 hi) -> physical dim."""
    out = np.empty(128, np.int64)
    for s in range(8):
        for kk in range(16):
            t, e, hi = (kk & 7) >> 1, kk & 1, kk >> 3
            if fp8_keys:
                out[16 * s + kk] = 64 * (s >> 2) + 16 * t + 4 * (s & 3) + 2 * hi + e
            else:
                out[16 * s + kk] = 32 * (s >> 1) + 8 * t + 4 * (s & 1) + 2 * hi + e
    return out


def _halves(word: int, fp8_keys: bool) -> tuple[float, float]:
    """One A / B register's two values (low half first): bf16 pairs, or two e4m3 codes."""
    if fp8_keys:
        return float(fp8.TABLE[word & 0xFF]), float(fp8.TABLE[(word >> 8) & 0xFF])
    return (float(bf16_to_float(np.uint16(word & 0xFFFF))), float(bf16_to_float(np.uint16(word >> 16))))


def _emulate_tile(keys_raw: np.ndarray, q_bits: np.ndarray, fp8_keys: bool) -> np.ndarray:
    """D [16 keys, 32 heads] as scan_mma computes it: per lane (g, t), the 16-byte loads at bytes
    64 i + 16 t of rows g and g + 8, the A registers taken from their words as the kernel does,
    q's B registers from 8-byte loads at p0, then D += A_s B_s over the 8 k-steps."""
    row_bytes = keys_raw.view(np.uint8).reshape(16, -1)
    loads = 2 if fp8_keys else 4
    A = np.full((8, 16, 16), np.nan)
    B = np.full((8, 16, 32), np.nan)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        v = [[row_bytes[g + 8 * r, 64 * i + 16 * t:64 * i + 16 * t + 16].view(np.uint32).tolist()
              for i in range(loads)] for r in range(2)]
        for s in range(8):
            if fp8_keys:   # word s & 3 of load s >> 2; its low 16 bits -> a0 / a1, high -> a2 / a3
                w0, w1 = v[0][s >> 2][s & 3], v[1][s >> 2][s & 3]
                regs = [w0 & 0xFFFF, w1 & 0xFFFF, w0 >> 16, w1 >> 16]
            else:          # words 2 (s & 1), + 1 of load s >> 1
                lo = 2 * (s & 1)
                regs = [v[0][s >> 1][lo], v[1][s >> 1][lo], v[0][s >> 1][lo + 1], v[1][s >> 1][lo + 1]]
            for reg, (row, k) in zip(regs, [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
                A[s, row, k], A[s, row, k + 1] = _halves(reg, fp8_keys)
            p0 = 64 * (s >> 2) + 16 * t + 4 * (s & 3) if fp8_keys else 32 * (s >> 1) + 8 * t + 4 * (s & 1)
            for nt in range(4):
                head = 8 * nt + g
                qv = bf16_to_float(q_bits[head, p0:p0 + 4]).astype(np.float64)
                B[s, 2 * t:2 * t + 2, head] = qv[:2]
                B[s, 2 * t + 8:2 * t + 10, head] = qv[2:]
    assert not np.isnan(A).any() and not np.isnan(B).any(), "every fragment element is loaded exactly once"
    return sum(A[s] @ B[s] for s in range(8))


@pytest.mark.parametrize("fp8_keys", [False, True], ids=["bf16", "fp8"])
def test_mma_dim_permutation_gives_the_same_dot_products(fp8_keys):
    perm = _perm(fp8_keys)
    assert sorted(perm.tolist()) == list(range(128)), "a bijection of the 128 dims"
    rng = np.random.default_rng(11)
    q = float_to_bf16(rng.standard_normal((32, 128)))
    if fp8_keys:
        raw = spec._e4m3_codes(np, (rng.standard_normal((16, 128)) * 100).astype(np.float32))
        values = fp8.decode_e4m3(raw).astype(np.float64)
    else:
        raw = float_to_bf16(rng.standard_normal((16, 128)))
        values = bf16_to_float(raw).astype(np.float64)
    d = _emulate_tile(np.ascontiguousarray(raw), q, fp8_keys)
    want = values @ bf16_to_float(q).astype(np.float64).T
    assert np.allclose(d, want, rtol=1e-12, atol=1e-9)
    # and the permutation is what makes it right: the identity order gives other sums
    assert np.allclose(values[:, perm] @ bf16_to_float(q).astype(np.float64)[:, perm].T, want)
    assert not np.array_equal(perm, np.arange(128))


def test_mma_tiles_per_warp_cover_every_tile():
    from kernels.dsa_indexer.scan_variants import mma_tiles_per_warp

    for total, ctas in [(32 * 16384, 396), (128, 16), (7, 3), (1, 1)]:
        tpw = mma_tiles_per_warp(total, ctas, 4)
        assert tpw * ctas * 4 >= total and (tpw - 1) * ctas * 4 < total


def _walk_rows(M: int, C: int, elig: list[int], sub: int, ctas: int, warps: int) -> tuple[np.ndarray, np.ndarray]:
    """scan_mma.cu's persistent walk with warp tiles of ``sub`` m-tiles of 16 keys (mma_step and
    load_tile in NumPy): how often each score [M, C] is written, and how often each key row is
    loaded (a row past eligible[m] or past C must be neither)."""
    from kernels.dsa_indexer.scan_variants import mma_tiles_per_warp

    ntiles = -(-C // (16 * sub))
    total = M * ntiles
    tpw = mma_tiles_per_warp(total, ctas, warps)
    written, loaded = np.zeros((M, C), int), np.zeros((M, C), int)
    for gw in range(-(-total // tpw)):
        for idx in range(gw * tpw, min(gw * tpw + tpw, total)):
            m, tile = divmod(idx, ntiles)
            for s_ in range(sub):
                rows = (tile * sub + s_) * 16 + np.arange(16)
                loaded[m, rows[rows < elig[m]]] += 1
                written[m, rows[rows < C]] += 1
    return written, loaded


@pytest.mark.parametrize("sub", [1, 2])
def test_the_mma_walk_writes_every_score_once_and_loads_only_eligible_keys(sub):
    """scan_mma (sub 1) and scan_mma_fp8x2 (warp tiles of 32 keys): every score once at ragged C
    (C % 32 = 3: the last warp tile's second m-tile starts past C), no load past eligible."""
    for M, C, ctas in ((3, 2051, 5), (1, 1028, 1), (5, 64, 2)):
        elig = [C - m % 4 for m in range(M)]
        written, loaded = _walk_rows(M, C, elig, sub, ctas, 4)
        assert (written == 1).all(), (M, C, sub)
        for m in range(M):
            assert (loaded[m, :elig[m]] == 1).all() and (loaded[m, elig[m]:] == 0).all()


def test_the_fp8x2_variants_run_fp8_keys_only(geometry):
    comp = registry.get("indexer_scan")
    for name in ("scan_mma_fp8x2", "scan_mma_fp8x2_w8"):
        v = comp.variant(name)
        assert "FP8" in v.supports(geometry, _point(key_dtype="bf16"))
        assert "dim_cand" in v.supports(geometry, _point(key_dtype="fp8", key_layout="dim_cand"))
        assert v.supports(geometry, _point(key_dtype="fp8")) is None
    text = (pathlib.Path(spec.__file__).parent / "scan_mma.cu").read_text()
    assert "scan_mma<true, 2>" in text and "scan_mma_fp8x2_w8(" in text


# -- tolerance, checks, rules ------------------------------------------------------------------------


def test_the_tolerance_admits_torchs_bf16_rounding_and_not_a_wrong_score(geometry):
    """torch's bmm rounds each head's dot to BF16 (2^-9): emulated here it moves the scores by
    ~2e-3, inside the 1e-2 tolerance; one candidate scored against the wrong key fails."""
    point = _point(M=2, context=4096)
    inputs, ref = _case(geometry, point)
    m = 0
    keys = _decoded(geometry, point, inputs, m)
    q = bf16_to_float(inputs["q"][m]).astype(np.float64)
    dots = bf16_to_float(float_to_bf16(keys @ q.T)).astype(np.float64)
    torch_like = np.maximum(dots, 0) @ inputs["w"][m].astype(np.float64)
    torch_like[int(inputs["eligible"][m]):] = -np.inf
    check = spec.checks(point)["scores"]
    got = compare("scores", torch_like[None], {"scores": ref["scores"][:1]}, check)
    assert got.ok and 5e-4 < got.rel_err < spec.SCORES_TOLERANCE / 3, got.describe()
    wrong = ref["scores"][:1].copy()
    wrong[0, 100] = ref["scores"][0, 101]
    assert not compare("scores", wrong, {"scores": ref["scores"][:1]}, check).ok
    missing = ref["scores"].copy()
    assert np.isneginf(missing[1, -1])                        # stream 1 sees one token fewer
    missing[1, -1] = 0.0                                      # an ineligible candidate not written as -inf
    assert not compare("scores", missing, {"scores": ref["scores"]}, check).ok


def test_check_point_rules_are_one_line(geometry):
    assert "multiple of the pool size" in spec.check_point(geometry, _point(context=1030))
    big = spec.check_point(geometry, _point(M=4096, context=1048576))
    assert big.startswith("M: ") and "allowed" in big and "\n" not in big
    assert spec.check_point(geometry, _point(M=64, context=1048576)) is None      # 16 GiB: fits


# -- the CPU variants through the runner ------------------------------------------------------------


# the host matmuls are slow on a loaded CI box: the scan at two of the four layout x dtype pairs
RUNNER_CASES = ([("indexer_scan", "ref_scan", lay, dt) for lay, dt in [("cand_dim", "bf16"), ("dim_cand", "fp8")]]
                + [("indexer_stream", "numpy_stream", lay, dt) for lay, dt in LAYOUTS_DTYPES])


@pytest.mark.parametrize("component,variant,layout,dtype", RUNNER_CASES)
def test_cpu_variants_pass_through_the_runner(geometry, component, variant, layout, dtype):
    comp = registry.get(component)
    point = _point(key_layout=layout, key_dtype=dtype, pooling="pooled", context=2048)
    row = runner.measure(comp, comp.variant(variant), point, geometry, backends.CpuBackend(), QUICK, seed=2,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["ref_sample"] == "streams 0, 1, 3, 4 of 5"
    assert row["resident_bytes"] == spec.keys_nbytes(geometry, point) + spec.scales_nbytes(geometry, point)
    if component == "indexer_scan":
        assert row["rel_err"] < 1e-5, "float32 on the host is near 1e-7"


def test_cuda_variants_say_why_they_skip(geometry):
    comp = registry.get("indexer_scan")
    reason = comp.variant("scan_mma").supports(geometry, _point(key_layout="dim_cand"))
    assert reason and "dim_cand" in reason
    assert comp.variant("scan_mma").supports(geometry, _point()) is None
    assert comp.variant("scan_fma").supports(geometry, _point(key_layout="dim_cand", key_dtype="fp8")) is None


# -- the floor's dim_cand word assembly, emulated ------------------------------------------------------


def _byte_perm(x: int, y: int, s: int) -> int:
    """CUDA __byte_perm: result byte i = byte (s >> 4 i) & 7 of the 8 bytes {y, x} (x bytes 0-3)."""
    pool = x | (y << 32)
    return sum(((pool >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


@pytest.mark.parametrize("fp8_keys", [False, True], ids=["bf16", "fp8"])
def test_stream_dim_cand_word_assembly_gives_the_cand_dim_checksum(fp8_keys):
    """scan_stream_dim_cand: one thread's 16-byte column block XORed over the dim rows by dim
    phase, then each candidate's word built by byte permutes, as the kernel does."""
    rng = np.random.default_rng(7)
    cands, phases = (16, 4) if fp8_keys else (8, 2)
    keys = rng.integers(0, 256 if fp8_keys else 65536, (cands, 128)).astype(np.uint8 if fp8_keys else np.uint16)
    column = np.ascontiguousarray(keys.T)                          # [128 dims][cands]: the block of each row
    acc = [[0, 0, 0, 0] for _ in range(phases)]
    for d in range(128):
        words = column[d].view(np.uint32).tolist()
        acc[d % phases] = [a ^ wd for a, wd in zip(acc[d % phases], words)]
    out = []
    if fp8_keys:
        def gather(a, b, c, e, byte):
            sel = byte | ((byte + 4) << 4)
            return _byte_perm(_byte_perm(a, b, sel), _byte_perm(c, e, sel), 0x5410)
        out = [0] * 16
        for k in range(4):
            for b in range(4):
                out[4 * k + b] = gather(acc[0][k], acc[1][k], acc[2][k], acc[3][k], b)
    else:
        out = [0] * 8
        for k in range(4):
            out[2 * k] = _byte_perm(acc[0][k], acc[1][k], 0x5410)
            out[2 * k + 1] = _byte_perm(acc[0][k], acc[1][k], 0x7632)
    assert out == spec.key_checksums(keys, None).tolist()


# -- FP8 queries (query_dtype fp8) and scan_mma_e4m3 --------------------------------------------------


def _q8_point(**kw):
    return _point(key_dtype="fp8", query_dtype="fp8", **kw)


def test_fp8_queries_are_quantized_per_stream_and_head_on_the_host(geometry):
    """make_inputs gives e4m3 codes and one positive FP32 scale per (stream, head), the head's peak
    at +-448, no BF16 q beside them; the reference scores the dequantized q (codes x scale)."""
    point = _q8_point(M=3)
    inputs, ref = _case(geometry, point)
    assert "q" not in inputs and inputs["q_codes"].shape == (3, 32, 128) and inputs["q_codes"].dtype == np.uint8
    assert inputs["q_scales"].shape == (3, 32) and inputs["q_scales"].dtype == np.float32
    assert (inputs["q_scales"] > 0).all()
    decoded = fp8.decode_e4m3(inputs["q_codes"]).astype(np.float64)
    assert np.isfinite(decoded).all() and (np.abs(decoded).max(axis=-1) == 448).all()
    for m in range(3):
        raw, scales = spec.stream_keys(geometry, point, inputs, m)
        q = decoded[m] * inputs["q_scales"][m][:, None].astype(np.float64)     # exact here
        want = dsa_ref.index_scores(q, inputs["w"][m], _decoded(geometry, point, inputs, m),
                                    int(inputs["eligible"][m]))
        assert np.allclose(ref["scores"][m], want, rtol=1e-5, atol=1e-6)
        assert np.array_equal(np.isneginf(ref["scores"][m]), np.isneginf(want))
    # the bf16 point of the same seed scores other (unquantized) queries
    _, ref16 = _case(geometry, _point(key_dtype="fp8", M=3))
    assert not np.allclose(ref["scores"], ref16["scores"], rtol=1e-4, atol=1e-5)


def test_fp8_query_bytes_count_one_byte_an_element_and_a_scale_a_head(geometry):
    p16, p8 = _point(M=4, key_dtype="fp8"), _q8_point(M=4)
    assert spec.query_bytes(geometry, p16) == 4 * 32 * 128 * 2
    assert spec.query_bytes(geometry, p8) == 4 * 32 * (128 + 4)
    assert spec.bytes_moved(geometry, p16) - spec.bytes_moved(geometry, p8) == 4 * 32 * (128 - 4)
    assert spec.flops(geometry, p16) == spec.flops(geometry, p8)
    assert spec.query_dtype({"M": 1}) == "bf16"        # dsa_layer's part points carry no such axis


def _perm_e4m3() -> np.ndarray:
    """scan_mma.cu's e4m3 map: logical dim 32 s + kk (kk = 4 t + e + 16 hi) -> physical dim."""
    out = np.empty(128, np.int64)
    for s in range(4):
        for kk in range(32):
            t, e, hi = (kk & 15) >> 2, kk & 3, kk >> 4
            out[32 * s + kk] = 64 * (s >> 1) + 16 * t + 8 * (s & 1) + 4 * hi + e
    return out


def _bytes_of(word: int) -> list[int]:
    return [(word >> (8 * i)) & 0xFF for i in range(4)]


def _emulate_e4m3_tile(key_codes: np.ndarray, q_codes: np.ndarray) -> np.ndarray:
    """D [16 keys, 32 heads] of code values as scan_mma_e4m3 computes it: lane (g, t) loads bytes
    64 i + 16 t .. + 16 of rows g and g + 8 (i < 2, load_tile), k-step s takes words 2 (s & 1) and
    + 1 of load s >> 1 as a0 / a2 (row g) and a1 / a3 (row g + 8); q's b0 / b1 are the 8 codes of
    head 8 nt + g at p0 = 64 (s >> 1) + 16 t + 8 (s & 1) (stream_setup_e4m3). Each register's byte
    i is element i of the m16n8k32 fragment (PTX ISA): a0 (g, 4t + i), a1 (g + 8, 4t + i), a2 (g,
    16 + 4t + i), a3 (g + 8, 16 + 4t + i); b0 (k 4t + i, n g), b1 (k 16 + 4t + i, n g)."""
    A = np.full((4, 16, 32), np.nan)
    B = np.full((4, 32, 32), np.nan)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        v = [[key_codes[g + 8 * r, 64 * i + 16 * t:64 * i + 16 * t + 16].view(np.uint32).tolist() for i in range(2)]
             for r in range(2)]
        for s in range(4):
            lo = 2 * (s & 1)
            regs = [v[0][s >> 1][lo], v[1][s >> 1][lo], v[0][s >> 1][lo + 1], v[1][s >> 1][lo + 1]]
            for reg, (row, k0) in zip(regs, [(g, 4 * t), (g + 8, 4 * t), (g, 16 + 4 * t), (g + 8, 16 + 4 * t)]):
                assert np.isnan(A[s, row, k0:k0 + 4]).all(), "an A element loaded twice"
                A[s, row, k0:k0 + 4] = fp8.TABLE[_bytes_of(reg)]
            p0 = 64 * (s >> 1) + 16 * t + 8 * (s & 1)
            for nt in range(4):
                head = 8 * nt + g
                b0, b1 = q_codes[head, p0:p0 + 8].view(np.uint32).tolist()
                for reg, k0 in ((b0, 4 * t), (b1, 16 + 4 * t)):
                    assert np.isnan(B[s, k0:k0 + 4, head]).all(), "a B element loaded twice"
                    B[s, k0:k0 + 4, head] = fp8.TABLE[_bytes_of(reg)]
    assert not np.isnan(A).any() and not np.isnan(B).any(), "every fragment element is loaded"
    return sum(A[s] @ B[s] for s in range(4))


def test_e4m3_fragments_and_dim_permutation_give_the_plain_dot_products():
    """The NumPy model of scan_mma_e4m3's loads and registers: every fragment element exactly once,
    the map a bijection, the permuted k-steps' sum equal to the plain code dots; then the epilogue
    (relu, x w x q_scale folded per head, head sum, x the key scale) equals the reference rule."""
    perm = _perm_e4m3()
    assert sorted(perm.tolist()) == list(range(128)) and not np.array_equal(perm, np.arange(128))
    rng = np.random.default_rng(12)
    key_codes = spec._e4m3_codes(np, (rng.standard_normal((16, 128)) * 100).astype(np.float32))
    q_codes, q_scales = fp8.quantize_rows(rng.standard_normal((32, 128)))
    d = _emulate_e4m3_tile(np.ascontiguousarray(key_codes), np.ascontiguousarray(q_codes))
    kv, qv = fp8.decode_e4m3(key_codes).astype(np.float64), fp8.decode_e4m3(q_codes).astype(np.float64)
    assert np.array_equal(d, kv @ qv.T), "products of e4m3 values and their sums of 128 are exact in float64"
    assert np.array_equal(kv[:, perm] @ qv[:, perm].T, d)
    w = rng.standard_normal(32).astype(np.float32) / 64            # signed, as the head weights are
    key_scales = (3 / 448 * np.exp2(rng.random(16) - 0.5)).astype(np.float32)
    wq = (w * q_scales).astype(np.float64)                         # the kernel's folded weight (qs > 0)
    got = (np.maximum(d, 0) @ wq) * key_scales.astype(np.float64)
    want = dsa_ref.index_scores(qv * q_scales[:, None].astype(np.float64), w,
                                kv * key_scales[:, None].astype(np.float64), 16)
    # the FP32 fold w x q_scale rounds once a head (2^-24): far under 1e-6 of the largest score
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    # folding a signed weight into the relu instead would be wrong: the relu comes before w
    wrong = np.maximum(d * wq, 0).sum(axis=1) * key_scales
    assert not np.allclose(wrong, want, rtol=1e-3)


def test_fp8_queries_run_on_e4m3_torch_and_the_host_only(geometry):
    """Every BF16-query design refuses query_dtype fp8 with the reason (e4m3 x scale is not BF16);
    scan_mma_e4m3 runs fp8 keys x fp8 queries on cand_dim only; the fused select built on scan_mma
    refuses too (it shares _supports_mma)."""
    comp = registry.get("indexer_scan")
    q8 = _q8_point()
    for name in ("scan_fma", "scan_mma", "scan_mma_fp8x2", "scan_mma_fp8x2_w8"):
        reason = comp.variant(name).supports(geometry, q8)
        assert reason and "BF16" in reason and "\n" not in reason, name
    e4 = comp.variant("scan_mma_e4m3")
    assert e4.supports(geometry, q8) is None
    assert "query_dtype bf16" in e4.supports(geometry, _point(key_dtype="fp8"))
    assert "key_dtype bf16" in e4.supports(geometry, _point(query_dtype="fp8"))
    assert "cand_dim only" in e4.supports(geometry, _q8_point(key_layout="dim_cand"))
    assert e4.sources == ("scan_mma.cu",)
    text = (pathlib.Path(spec.__file__).parent / "scan_mma.cu").read_text()
    assert "scan_mma_e4m3(" in text and "scan_mma<true, SCAN_MMA_E4M3_SUB, true>" in text
    from kernels.dsa_indexer.scan_variants import define
    assert define("scan_mma.cu", "SCAN_MMA_E4M3_SUB") == 2     # the walk test's sub = 2 covers its tiles
    select = registry.get("indexer_select")
    wide = _q8_point(context=8192)                                   # k = 2048 <= C: only the query refuses
    for v in select.variants:
        if v.backend == "cuda":
            assert v.supports(geometry, _point(key_dtype="fp8", context=8192)) is None, v.name
            assert "BF16" in v.supports(geometry, wide), v.name


def test_the_tolerance_admits_torchs_bf16_rounding_of_fp8_queries(geometry):
    """torch_bmm dequantizes fp8 queries to BF16 (2^-9 per element) and rounds each dot to BF16:
    emulated, inside the 1e-2 tolerance with margin."""
    point = _q8_point(M=2, context=4096)
    inputs, ref = _case(geometry, point)
    m = 0
    keys = bf16_to_float(float_to_bf16(_decoded(geometry, point, inputs, m))).astype(np.float64)
    q = bf16_to_float(float_to_bf16(spec.query_values(point, inputs, m))).astype(np.float64)
    dots = bf16_to_float(float_to_bf16(keys @ q.T)).astype(np.float64)
    torch_like = np.maximum(dots, 0) @ inputs["w"][m].astype(np.float64)
    torch_like[int(inputs["eligible"][m]):] = -np.inf
    got = compare("scores", torch_like[None], {"scores": ref["scores"][:1]}, spec.checks(point)["scores"])
    assert got.ok and got.rel_err < spec.SCORES_TOLERANCE / 2, got.describe()


def test_the_host_scan_takes_fp8_queries_through_the_runner(geometry):
    comp = registry.get("indexer_scan")
    point = {**_q8_point(pooling="pooled", context=2048)}
    row = runner.measure(comp, comp.variant("ref_scan"), point, geometry, backends.CpuBackend(), QUICK, seed=2,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["rel_err"] < 1e-5, "float32 on the host is near 1e-7"


# -- scan_wgmma_e4m3 (wgmma m64n32k32 e4m3 on sm_90a): NumPy models of scan_wgmma.cu --------------------


def _wgmma_define(name: str) -> int:
    from kernels.dsa_indexer.scan_variants import define
    return define("scan_wgmma.cu", name)


def _sw128(r: int, c: int) -> int:
    """scan_wgmma.cu's sw128: the byte of 16-byte chunk c of row r in a 128-byte-swizzled tile."""
    return r * 128 + ((c ^ (r & 7)) << 4)


def _wgmma_reads(smem: np.ndarray, start: int, rows: int, sbo: int = 1024, swizzle: bool = True) -> np.ndarray:
    """What one wgmma reads of a K-major 8-bit operand through a SWIZZLE_128B descriptor at byte
    ``start``: [rows, 32] bytes, element (r, k) at a = start + (r // 8) SBO + (r % 8) 128 + k, then the
    128-byte swizzle of the address (bits [4, 7) XOR bits [7, 10): CUTLASS's Swizzle<3, 4, 3> of
    GMMA::Layout_K_SW128_Atom, which the hardware applies to the whole shared address; hence
    1024-aligned tiles and DeepGEMM's +32 bytes a k-step)."""
    r = np.arange(rows)[:, None]
    k = np.arange(32)[None, :]
    a = start + (r // 8) * sbo + (r % 8) * 128 + k
    if swizzle:
        a = a ^ (((a >> 7) & 7) << 4)
    return smem[a]


def _q_tile(q_codes: np.ndarray) -> np.ndarray:
    """write_q: 256 16-byte chunks, thread i writes ids i + 128 j: head h = id / 8, chunk c = id % 8,
    q bytes [16 c, +16) of head h at sw128(h, c)."""
    smem = np.full(4096, -1, np.int64)
    threads = _wgmma_define("SCAN_WGMMA_THREADS")
    for tid in range(threads):
        for j in range(4096 // 16 // threads):
            idx = tid + threads * j
            h, c = idx >> 3, idx & 7
            at = _sw128(h, c)
            assert (smem[at:at + 16] == -1).all(), "a q byte written twice"
            smem[at:at + 16] = q_codes[h, 16 * c:16 * c + 16]
    assert (smem >= 0).all(), "every byte of q's tile is written"
    return smem


def test_wgmma_q_tile_reads_back_through_the_descriptor():
    """q written by write_q's formula, read through the descriptor's address generation (start = the
    tile + 32 s, SBO 1024): k-step s of head n is q[n, 32 s .. 32 s + 31] exactly; the same bytes
    read without the swizzle, or with another SBO, are not (the model can fail)."""
    rng = np.random.default_rng(5)
    q = rng.integers(0, 256, (32, 128))
    smem = _q_tile(q)
    for s in range(4):
        assert np.array_equal(_wgmma_reads(smem, 32 * s, 32), q[:, 32 * s:32 * s + 32]), s
    assert not np.array_equal(_wgmma_reads(smem, 32, 32, swizzle=False), q[:, 32:64])
    assert not np.array_equal(_wgmma_reads(np.concatenate([smem, smem]), 0, 32, sbo=512), q[:, :32])
    # the start address must be 1024-aligned: 128 bytes off, the swizzle rows shift and the reads break
    shifted = np.concatenate([np.zeros(128, np.int64), smem, np.zeros(1024, np.int64)])
    assert not np.array_equal(_wgmma_reads(shifted, 128, 32), q[:, :32])


def test_wgmma_key_tile_reads_back_and_only_eligible_rows_are_copied():
    """issue_tile: thread i, copy j < 4 writes 16 bytes at dst0 + 2048 j (dst0 = sw128(i / 8, i % 8))
    from byte 16 i + 2048 j of the tile's keys, src-size 0 (zeros, nothing read) unless row i / 8 + 16 j
    is below eligible; that is sw128(r, c) of row r = id / 8, chunk c = id % 8 (id = i + 128 j), every
    byte once, and the 64 rows read back through the descriptor (start = stage + 32 s) are the keys'
    codes, the rows past eligible zero; at a fully eligible tile every row is copied."""
    rng = np.random.default_rng(6)
    threads, T = _wgmma_define("SCAN_WGMMA_THREADS"), _wgmma_define("SCAN_WGMMA_TILE")
    assert T == 64
    for C, tile, elig in ((100, 1, 90), (200, 1, 200), (64, 0, 0), (130, 2, 130)):
        keys = rng.integers(1, 256, (C, 128))
        flat = keys.reshape(-1)
        smem = np.full(T * 128, -1, np.int64)
        read = np.zeros(C, int)
        c0 = tile * T
        for tid in range(threads):
            dst0 = _sw128(tid >> 3, tid & 7)
            for j in range(T * 128 // 16 // threads):
                idx = tid + threads * j
                r, c = idx >> 3, idx & 7
                at = dst0 + 2048 * j
                assert at == _sw128(r, c) and r == (tid >> 3) + 16 * j
                assert (smem[at:at + 16] == -1).all(), "a shared byte written twice"
                src = (c0 * 128) + 16 * tid + 2048 * j            # byte of the stream's keys
                if c0 + r < elig:
                    assert src == (c0 + r) * 128 + 16 * c
                    smem[at:at + 16] = flat[src:src + 16]
                    read[c0 + r] += 1
                else:
                    smem[at:at + 16] = 0
        assert (smem >= 0).all()
        n = max(0, min(elig, c0 + T) - c0)
        assert (read[c0:c0 + n] == 8).all() and read.sum() == 8 * n, "each eligible row's 8 chunks, nothing else"
        want = np.zeros((T, 128), np.int64)
        want[:n] = keys[c0:c0 + n]
        for s in range(4):
            assert np.array_equal(_wgmma_reads(smem, 32 * s, T), want[:, 32 * s:32 * s + 32]), (C, tile, s)
    text = (pathlib.Path(spec.__file__).parent / "scan_wgmma.cu").read_text()
    # the formulas modelled above, as the kernel writes them
    for formula in ("r * 128 + ((c ^ (r & 7)) << 4)", "sw128(threadIdx.x >> 3, threadIdx.x & 7)",
                    "(stream + (size_t)c0) * SCAN_DIM + 16 * threadIdx.x", "c0 + (int)(threadIdx.x >> 3) + 16 * j",
                    "(1ull << 62)", "(1024 >> 4) << 32", "da0 + 2 * s, db = q_desc + 2 * s",
                    "#define SCAN_WGMMA_K_BYTES (SCAN_WGMMA_TILE * SCAN_DIM)"):
        assert formula in text, formula


def _clayout(warp: int, lane: int) -> list[tuple[int, int]]:
    """CUTLASS CLayout_64xN (N = 32) for one thread: d[4 j + 2 v1 + v0] = (row 16 warp + g + 8 v1, head
    8 j + 2 t + v0)."""
    g, t = lane >> 2, lane & 3
    return [(16 * warp + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)) for i in range(16)]


def test_wgmma_epilogue_gives_the_reference_scores():
    """The epilogue on the D fragments (every (row, head) held exactly once over the warpgroup): each
    thread's 8 heads x relu x wq summed, the quad's 4 threads summed (the two shuffles), row g from t
    = 0 and row g + 8 from t = 1, x the key scale: the reference rule on the dequantized values."""
    rng = np.random.default_rng(9)
    key_codes = spec._e4m3_codes(np, (rng.standard_normal((64, 128)) * 100).astype(np.float32))
    q_codes, q_scales = fp8.quantize_rows(rng.standard_normal((32, 128)))
    kv, qv = fp8.decode_e4m3(key_codes).astype(np.float64), fp8.decode_e4m3(q_codes).astype(np.float64)
    D = kv @ qv.T                                          # what the 4 wgmma sum (exact here)
    w = rng.standard_normal(32).astype(np.float32) / 64
    wq = (w * q_scales).astype(np.float64)
    key_scales = (3 / 448 * np.exp2(rng.random(64) - 0.5)).astype(np.float64)
    seen = np.zeros((64, 32), int)
    got = np.full(64, np.nan)
    for warp in range(4):
        part = {}
        for lane in range(32):
            els = _clayout(warp, lane)
            for row, head in els:
                seen[row, head] += 1
            g, t = lane >> 2, lane & 3
            lo = sum(wq[h] * max(D[r, h], 0) for r, h in els if r == 16 * warp + g)
            hi = sum(wq[h] * max(D[r, h], 0) for r, h in els if r == 16 * warp + g + 8)
            part[lane] = (lo, hi)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            quad = [part[4 * g + u] for u in range(4)]
            if t < 2:
                r = 16 * warp + g + 8 * (t & 1)
                assert np.isnan(got[r]), "a row scored twice"
                got[r] = sum(p[t & 1] for p in quad) * key_scales[r]
    assert (seen == 1).all(), "CLayout covers every (row, head) once"
    want = dsa_ref.index_scores(qv * q_scales[:, None].astype(np.float64), w, kv * key_scales[:, None], 64)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def _wgmma_walk(M: int, C: int, elig: list[int], ctas: int) -> tuple[np.ndarray, np.ndarray]:
    """scan_wgmma_e4m3's per-CTA pipeline in Python (prologue, then per tile: wait_group STAGES - 2,
    read stage k % STAGES, issue tile k + STAGES - 1 into stage (k - 1) % STAGES, the epilogue), with
    the Cursor walk: how often each score is written and each key row copied. Asserts, per CTA, that
    the stage a tile is read from holds that tile and its copy group is complete, that no issue
    overwrites a stage before its tile was consumed, and that eligible is never read past M."""
    from kernels.dsa_indexer.scan_variants import mma_tiles_per_warp

    S, T = _wgmma_define("SCAN_WGMMA_STAGES"), _wgmma_define("SCAN_WGMMA_TILE")
    ntiles = -(-C // T)
    total = M * ntiles
    tpc = mma_tiles_per_warp(total, ctas, 1)
    written, copied = np.zeros((M, C), int), np.zeros((M, C), int)

    def advance(cur):
        m, tile, e = cur
        tile += 1
        if tile == ntiles:
            tile, m = 0, m + 1
            e = elig[m] if m < M else 0        # the kernel's guard: never eligible[M]
        return (m, tile, e)

    for b in range(-(-total // tpc)):
        first, last = b * tpc, min(b * tpc + tpc, total)
        cur = (first // ntiles, first % ntiles, elig[first // ntiles])
        ahead = cur
        stage_holds = [None] * S               # the flattened tile index each stage holds
        groups = []                            # tile index per commit group (None: empty)
        consumed = set()

        def issue(stage, at, idx):
            m, tile, e = at
            assert stage_holds[stage] is None or stage_holds[stage] in consumed, "a stage overwritten unread"
            assert (m, tile) == divmod(idx, ntiles)
            rows = tile * T + np.arange(T)
            copied[m, rows[rows < e]] += 1
            stage_holds[stage] = idx

        for k in range(S - 1):
            if first + k < last:
                issue(k, ahead, first + k)
                ahead = advance(ahead)
                groups.append(first + k)
            else:
                groups.append(None)
        k = 0
        while first + k < last:
            complete = len(groups) - (S - 2)   # wait_group S - 2: all but the newest S - 2 groups done
            assert k < complete and groups[k] == first + k
            stage = k % S
            assert stage_holds[stage] == first + k
            if first + k + S - 1 < last:
                issue((k + S - 1) % S, ahead, first + k + S - 1)
                ahead = advance(ahead)
                groups.append(first + k + S - 1)
            else:
                groups.append(None)
            m, tile, e = cur
            assert (m, tile) == divmod(first + k, ntiles)
            rows = tile * T + np.arange(T)
            written[m, rows[rows < C]] += 1
            consumed.add(first + k)
            cur = advance(cur)
            k += 1
    return written, copied


def test_the_wgmma_walk_writes_every_score_once_and_copies_only_eligible_keys():
    """Ragged C (the last tile past C unwritten), streams of unequal eligibility, CTAs whose runs
    cross streams, a CTA with fewer tiles than stages: every score once, every eligible key copied
    exactly once, nothing past eligible."""
    for M, C, ctas in ((3, 2051, 5), (1, 1028, 1), (5, 64, 2), (4, 100, 7), (2, 4100, 3)):
        elig = [max(0, C - 37 * m) for m in range(M)]
        written, copied = _wgmma_walk(M, C, elig, ctas)
        assert (written == 1).all(), (M, C, ctas)
        for m in range(M):
            assert (copied[m, :elig[m]] == 1).all() and (copied[m, elig[m]:] == 0).all(), (M, C, m)


def test_the_wgmma_variant_runs_fp8_keys_and_queries_on_cand_dim_only(geometry):
    comp = registry.get("indexer_scan")
    v = comp.variant("scan_wgmma_e4m3")
    assert v.supports(geometry, _q8_point()) is None
    for point, word in ((_point(key_dtype="fp8"), "query_dtype bf16"), (_point(query_dtype="fp8"), "key_dtype bf16"),
                        (_q8_point(key_layout="dim_cand"), "cand_dim only")):
        reason = v.supports(geometry, point)
        assert reason and word in reason and "\n" not in reason, reason
    assert v.sources == ("scan_wgmma.cu",)
    from kernels.wgmma import WGMMA_ARCH
    assert WGMMA_ARCH == "sm_90a"


WGMMA_TOLERANCE = 5e-3   # tests/test_gpu_indexer_scan.py's VARIANT_TOLERANCE["scan_wgmma_e4m3"]


def _reduced_accumulation(P: np.ndarray, bits: int = 14) -> np.ndarray:
    """A pessimistic model of the FP8 wgmma's accumulation: per k-step, the 32 products and the
    running sum aligned to the largest one's exponent and truncated toward zero to ``bits`` bits, then
    summed. P: [..., 4 steps, 32] products; returns [...]."""
    acc = np.zeros(P.shape[:-2])
    for s in range(P.shape[-2]):
        terms = np.concatenate([P[..., s, :], acc[..., None]], axis=-1)
        top = np.abs(terms).max(axis=-1, keepdims=True)
        ulp = np.exp2(np.floor(np.log2(np.where(top > 0, top, 1.0))) - (bits - 1))
        acc = (np.trunc(terms / ulp) * ulp).sum(axis=-1)
    return acc


def test_the_wgmma_tolerance_admits_reduced_fp8_accumulation_and_not_a_wrong_slice(geometry):
    """The GPU test's 5e-3 for scan_wgmma_e4m3: the scores with every dot accumulated at 14 bits
    (truncation, the pessimistic model) stay far inside it; q's codes of one 32-dim k-step read from
    the wrong dims (what a wrong descriptor start does) fail it."""
    point = _q8_point(M=2, context=4096)
    inputs, ref = _case(geometry, point)
    m = 0
    raw, scales = spec.stream_keys(geometry, point, inputs, m)
    kv = fp8.decode_e4m3(raw).astype(np.float64)
    qv = fp8.decode_e4m3(inputs["q_codes"][m]).astype(np.float64)
    wq = inputs["w"][m].astype(np.float64) * inputs["q_scales"][m].astype(np.float64)

    def scores(dots):
        out = (np.maximum(dots, 0) @ wq) * scales.astype(np.float64)
        out[int(inputs["eligible"][m]):] = -np.inf
        return out[None]

    P = (kv[:, None, :] * qv[None, :, :]).reshape(kv.shape[0], 32, 4, 32)
    tol = RelErr(WGMMA_TOLERANCE)
    got = compare("scores", scores(_reduced_accumulation(P)), {"scores": ref["scores"][:1]}, tol)
    assert got.ok and got.rel_err < WGMMA_TOLERANCE / 5, got.describe()
    wrong_q = qv.copy()
    wrong_q[:, 32:64] = qv[:, 64:96]
    bad = compare("scores", scores(kv @ wrong_q.T), {"scores": ref["scores"][:1]}, tol)
    assert not bad.ok


def test_the_wgmma_launcher_asks_nvrtc_for_sm90a_and_one_arch_only(monkeypatch, tmp_path):
    """get_kernel's options reach CudaBackend.module. Without an -arch= the source goes to
    cupy.RawModule as before (CuPy appends the device's arch); with one (scan_wgmma's sm_90a) NVRTC is
    called directly with exactly that arch flag (CuPy would append -arch=sm_90 after it), the other
    options kept, the cubin written once and loaded by path, and the module cached. Fake CuPy and
    NVRTC record the calls (no GPU here)."""
    import sys
    import tempfile
    import types

    from harness.cuda import get_kernel
    from kernels.dsa_indexer.scan_variants import WGMMA_OPTIONS

    made, compiled = [], []

    class _RawModule:
        def __init__(self, code=None, options=(), backend=None, path=None):
            made.append({"options": options, "path": path})

        def get_function(self, name):
            return SimpleNamespace(name=name, shared_size_bytes=0)

    fake = types.ModuleType("cupy_backends.cuda.libs.nvrtc")
    fake.NVRTCError = RuntimeError
    fake.createProgram = lambda src, name, headers, include_names: 7
    fake.compileProgram = lambda prog, options: compiled.append(list(options))
    fake.getCUBIN = lambda prog: b"\x7fELF-cubin"
    fake.destroyProgram = lambda prog: None
    fake.getProgramLog = lambda prog: ""
    for name in ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.libs"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", fake)
    sys.modules["cupy_backends.cuda.libs"].nvrtc = fake
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))

    be = object.__new__(backends.CudaBackend)
    be.cp, be.props, be._modules = SimpleNamespace(RawModule=_RawModule), {"major": 9, "minor": 0}, {}
    src = pathlib.Path(spec.__file__).parent / "scan_wgmma.cu"
    get_kernel(be, src, "scan_wgmma_e4m3", options=WGMMA_OPTIONS)
    get_kernel(be, src, "scan_wgmma_e4m3", options=WGMMA_OPTIONS)   # cached: no second compile
    get_kernel(be, src, "scan_wgmma_e4m3")
    assert len(compiled) == 1 and [o for o in compiled[0] if o.startswith("-arch")] == ["-arch=sm_90a"]
    assert "-DSCAN_WGMMA_SM90A" in compiled[0] and f"-I{src.parent}" in compiled[0]
    assert "--device-as-default-execution-space" in compiled[0] and "--use_fast_math" in compiled[0]
    assert made[0]["path"] and pathlib.Path(made[0]["path"]).read_bytes() == b"\x7fELF-cubin"
    assert len(made) == 2 and made[1]["path"] is None
    assert [o for o in made[1]["options"] if o.startswith("-arch")] == ["-arch=sm_90"]
    assert "-DSCAN_WGMMA_SM90A" not in made[1]["options"]
