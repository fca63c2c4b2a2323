"""One DSA layer's decode step as a component (``dsa_layer``): [kpool compress] -> indexer scan ->
top-k -> expand -> sparse MLA split + combine, for M streams (issue 14, the whole layer; seed 001;
seed 003 §5.2-5.3, §8.5). Axes, the per-strategy resident inputs, the float64 reference over a
sample of streams, bytes, FLOPs, checks, and the part points a layer point equals.

Per stream m (the families' convention: n_m = context - (m % kpool) tokens visible, the query at
t_m = n_m - 1, so the sampled streams' tails cover 0..kpool-1 tokens):

    iq[m]   [32, 128] BF16        the indexer's queries
    iw[m]   [32] FP32             its head weights (1/64-scale, signed)
    q[m]    [64, 512] BF16        the absorbed MLA query
    arena   [M x context, 512]    the paged latent cache (sparse_mla.spec.ARENA, 64-token pages,
                                  arena_scale 1), page_table [M, context / 64] int32

Axis ``key_caching`` (the fuel's open fact indexer.key_caching, plus the compress strategy):

- ``pooled``: the pooled keys are cached: resident index_keys [M, context / 4, 128] BF16; the scan
  scores the complete pools, the top-k keeps index_topk / kpool = 512 pools, expand makes the token
  row (each pool's 4 tokens, the tail, -1 to W = 2112).
- ``compress``: per-token keys and gates are cached (resident index_keys, index_gates
  [M, context, 128] BF16) and compressed every step (kpool_compress, ape [4, 128] FP32) into a
  pooled buffer the scan reads; then as pooled.
- ``per_token``: per-token keys (resident index_keys [M, context, 128] BF16) scored without pooling;
  the top-k keeps index_topk = 2048 tokens and that IS the selection row: width W = 2048 (index_topk
  padded to selection_pad, already a multiple of 64). No tail is appended: the tail tokens (the
  incomplete pool's, the query included) are candidates themselves, scored like any other, and
  no -1 padding is needed because the sparse MLA reads W slots whatever W is. A chosen non-finite
  score would be -1 (the top-k's rule); with n_m >= 2048 eligible tokens there is none.

Axis ``index_dtype`` (the indexer's keys and queries, as the scan family's key_dtype and query_dtype
together): ``bf16``, or ``fp8``: e4m3 codes with one FP32 scale a key (resident ``index_key_scales``
[M, rows]) and a scale a (stream, head) of the queries (``iq_codes``, ``iq_scales``), the layout
serving engines feed their FP8 index kernel; scored by ``scan_wgmma_e4m3`` (FP8 wgmma, sm_90a).
The same small integers are exact in e4m3, and every scale is 1 or 2 (a power of two: the products
stay exact and a dropped or misapplied scale changes scores, so the selection check sees it). The
compress strategy writes BF16 pooled keys, so fp8 runs pooled and per_token only.

Exact inputs (why the selection has one right answer). A top-k over FP32 scores may legitimately
order near-ties differently from float64 scores, and a swapped member moves ``out`` by ~5%,
beyond its check. So the indexer's inputs make every score exactly representable and every FP32
operation exact: keys and iq small integers in [-3, 3] (BF16-exact), iw = +-(1..64) x 2^-12; a dot
is an integer of magnitude <= 128 x 9, a head's term a multiple of 2^-12 below 2^21 x 2^-12, the
score a sum of 32 of them below 2^24 x 2^-12: every product, partial sum and MMA accumulation is
exact in FP32 (fp8: scales of 1 or 2 on both sides keep every head's sum below 2^11 in multiples
of 2^-12, and the FP8 tensor core's narrower accumulation still holds the integer dots, at most
1152), so the kernels' scores equal the float64 reference's bit for bit and the lower-index
tie rule decides the set (ties are frequent: the k-th's score is shared by a few candidates, so the
rule is exercised). For compress, every per-channel slot softmax is one-hot: gates are
2048 x (a random permutation of 0..3) over a pool's four slots, per channel, and ape is 3072 x a
random bit per (slot, channel); a gate difference (a nonzero multiple of 2048) never equals an ape
difference (0 or +-3072), so the largest logit is unique and beats the others by >= 1024, where
exp underflows to exactly 0 in float64 and FP32 alike: the pooled key is exactly the winning slot's
key, in the kernel (FP32, BF16 out) and in the reference (float64, then rounded to BF16 as the
pooled buffer stores it). ape still decides the winner often (a slot with ape 3072 beats one 2048
above it), so a kernel that drops ape or misindexes slots changes the keys. The softmax blend's
numerics are kpool_compress's own component's check (normal gates); the latent arena and q are
N(0, 1) as sparse_mla's.

Checks: ``out`` and ``lse`` as sparse_mla's (RelErr 2e-2, 1e-3); ``selection`` an index set per row
with the lower-index tie rule against the reference's row (``token_scores``: each token's score,
a pool's score on its 4 tokens, +inf on the tail tokens that are always appended, -inf past the
visible tokens), -1 slots where the reference has them.
"""

from __future__ import annotations

import math

import numpy as np

from harness.axes import Axis
from harness.registry import ResidentInput
from harness.verify import IndexSet
from kernels import dsa_axes, fp8
from kernels.axes import M
from kernels.dsa_indexer import expand_spec, kpool_spec, scan_spec, topk_spec
from kernels.dsa_indexer import reference as rules
from kernels.kda_decode.reference import bf16_to_float, float_to_bf16
from kernels.sparse_mla import spec as mla

KEY_CACHINGS = ("pooled", "compress", "per_token")
KEY_CACHING = Axis("key_caching", str, None,
                   "indexer keys an engine caches: pooled keys (scan context/4), per-token keys and gates "
                   "compressed every step (compress), or per-token keys scored without pooling (per_token); "
                   "default: the fuel's indexer.key_caching",
                   choices=KEY_CACHINGS, resolve=lambda geometry: geometry.indexer.key_caching)
INDEX_DTYPES = ("bf16", "fp8")
INDEX_DTYPE = Axis("index_dtype", str, "bf16",
                   "dtype of the indexer's keys and queries: BF16, or e4m3 codes with one FP32 scale a key and a "
                   "(stream, head) of the queries (scored by scan_wgmma_e4m3)", choices=INDEX_DTYPES)
AXES = (M, dsa_axes.CONTEXT, KEY_CACHING, INDEX_DTYPE)

# The design each part of the step runs, named once: variants.build_chained launches these variants'
# kernels with their own launchers' geometry, and part_points names the same variants' rows. The
# families' fastest measured on the H200 at M = 32, 262144: scan_mma (BF16, 91% of its stream floor)
# and scan_wgmma_e4m3 (FP8, at its floor: reports/2026-12-01-indexer_scan-h200-153503), radix_split2
# for pooled scores (18.64 us at 512 of 65536 beside radix_share 18.98 and radix_union's first form
# 20.83: reports/2026-12-06-dsa_select-h200-024032; the layer ran on radix_union at 99d880a and
# 333cae4, kernels/dsa_layer/NOTES.md) and radix_share for per-token scores (28.35 us at 2048 of 262144 beside radix_sample 30.91 and
# radix_split2 43.82; both: reports/2026-12-02-dsa_select-h200-011544), split_wgmma_lean_coop_1wave
# (45.68 us grouped, split_wgmma_1wave 49.55 and FlashInfer 43.06 beside it:
# reports/2026-12-04-sparse_mla-h200-185234), launched cooperatively (one CTA an SM, M x splits <= SMs).
SCAN_DESIGNS = {"bf16": "scan_mma", "fp8": "scan_wgmma_e4m3"}
TOPK_DESIGNS = {"pooled": "radix_split2", "per_token": "radix_share"}   # by the scores' pooling
MLA_DESIGN = "split_wgmma_lean_coop_1wave"

PAGE_SIZE = 64                # the latent arena's pages (sparse_mla's default)
KEY_RANGE = 3                 # indexer keys and queries: integers in [-KEY_RANGE, KEY_RANGE]
W_MAX, W_SHIFT = 64, 12       # head weights: +-(1..W_MAX) x 2^-W_SHIFT
GATE_STEP, APE_STEP = 2048.0, 3072.0   # the one-hot softmax inputs (module docstring)
BUILD_ROWS = 1 << 18          # key rows generated per chunk on the device
BUILD_POOLS = 1 << 16         # pools of gates generated per chunk (a [pools, 4, 128] argsort)
FLUSH_FOOTPRINT = 128 << 20   # resident keys cannot be rotated out of L2: flush instead (scan_spec)


# -- shapes ----------------------------------------------------------------------------------------


def kpool(geometry) -> int:
    return int(geometry.indexer.kpool)


def index_dims(geometry) -> tuple[int, int]:
    return int(geometry.indexer.heads), int(geometry.indexer.head_dim)


def pooling(point) -> str:
    """The scan's and the top-k's pooling axis value for this strategy."""
    return "per_token" if point["key_caching"] == "per_token" else "pooled"


def topk_design(point) -> str:
    """The top-k variant this strategy's step runs (TOPK_DESIGNS, by its scores' pooling)."""
    return TOPK_DESIGNS[pooling(point)]


def n_candidates(geometry, point) -> int:
    """Keys the scan scores per stream: context / kpool pools, or context tokens."""
    return dsa_axes.candidates(geometry, int(point["context"]), pooling(point))


def k_selected(geometry, point) -> int:
    """Candidates the top-k keeps: 512 pools, or 2048 tokens (index_topk in the fuel's unit)."""
    return dsa_axes.selected_candidates(geometry, int(geometry.indexer.index_topk), pooling(point))


def topk_tokens(geometry, point) -> int:
    """Tokens the selected candidates stand for (2048), the dense threshold of the expand."""
    k = k_selected(geometry, point)
    return k * kpool(geometry) if pooling(point) == "pooled" else k


def width(geometry, point) -> int:
    """Slots of a selection row: 2112 (pools, the longest tail, padded) or 2048 (per token)."""
    pad = int(geometry.indexer.selection_pad)
    if point["key_caching"] == "per_token":
        return math.ceil(k_selected(geometry, point) / pad) * pad
    return rules.selection_width(topk_tokens(geometry, point), kpool(geometry), pad)


def visible(geometry, point, m: int) -> int:
    return int(point["context"]) - (m % kpool(geometry))


def lengths(geometry, point) -> np.ndarray:
    return np.array([visible(geometry, point, m) for m in range(int(point["M"]))], np.int32)


def eligible(geometry, point) -> np.ndarray:
    """Candidates each stream's scan scores (the rest -inf): complete pools, or visible tokens."""
    n = lengths(geometry, point)
    return (n // kpool(geometry) if pooling(point) == "pooled" else n).astype(np.int32)


def mla_point(point) -> dict:
    """The sparse_mla point whose arena and page table this layer uses (grouped: the pooled
    strategies' selection kind; the arena does not depend on it)."""
    return {"M": int(point["M"]), "context": int(point["context"]), "selection": "grouped",
            "page_size": PAGE_SIZE, "arena_scale": 1, "latent_dtype": "bf16"}


def slots_per_stream(geometry, point) -> list[int]:
    """Valid selection slots of each stream: the top-k's tokens and the tail (pooled), the top-k's
    tokens (per token)."""
    if point["key_caching"] == "per_token":
        return [k_selected(geometry, point)] * int(point["M"])
    k = topk_tokens(geometry, point)
    return [k + int(n) % kpool(geometry) for n in lengths(geometry, point)]


def index_dtype(point) -> str:
    """The point's index_dtype (bf16 where a caller's point predates the axis)."""
    return point.get("index_dtype", INDEX_DTYPE.default)


def strategy_problem(point) -> str | None:
    """Why no variant runs this (key_caching, index_dtype) pair, or None: the compress step writes
    BF16 pooled keys, so fp8 index keys are cached pooled or per token. A variant's refusal (a
    skipped row with this reason), not a point error: a sweep over both axes plans the pair."""
    if index_dtype(point) == "fp8" and point["key_caching"] == "compress":
        return ("index_dtype fp8 with key_caching compress: the compress step writes BF16 pooled keys; "
                "fp8 runs key_caching pooled or per_token")
    return None


def check_point(geometry, point) -> str | None:
    problem = dsa_axes.check_point(geometry, {"context": point["context"]})
    if problem:
        return problem
    problem = mla.check_point(geometry, mla_point(point))    # no dense stream; arena rows < 2^31
    if problem:
        return problem
    keys = index_keys_nbytes(geometry, point) + index_key_scales_nbytes(geometry, point) + index_gates_nbytes(geometry, point)
    if keys > scan_spec.MAX_KEY_BYTES:
        return (f"M: {point['M']} streams x context {point['context']} make {keys / 2**30:.1f} GiB of resident "
                f"indexer keys; allowed: at most {scan_spec.MAX_KEY_BYTES >> 30} GiB")
    if int(point["M"]) * int(point["context"]) >= 2 ** 31:
        return f"M: {point['M']} x context {point['context']} make 2^31 or more tokens; allowed: fewer"
    return None


# -- inputs ----------------------------------------------------------------------------------------


def index_key_rows(geometry, point) -> int:
    """Cached key rows a stream: its pools (pooled) or its tokens."""
    return n_candidates(geometry, point) if point["key_caching"] == "pooled" else int(point["context"])


def index_keys_nbytes(geometry, point) -> int:
    _, D = index_dims(geometry)
    per = 1 if index_dtype(point) == "fp8" else 2
    return int(point["M"]) * index_key_rows(geometry, point) * D * per


def index_key_scales_nbytes(geometry, point) -> int:
    return int(point["M"]) * index_key_rows(geometry, point) * 4 if index_dtype(point) == "fp8" else 0


def index_gates_nbytes(geometry, point) -> int:
    _, D = index_dims(geometry)
    return int(point["M"]) * int(point["context"]) * D * 2 if point["key_caching"] == "compress" else 0


def _small_ints(xp, rng, shape):
    """float32 integers uniform in [-KEY_RANGE, KEY_RANGE] (any backend's generator)."""
    return xp.floor(rng.random(shape, dtype=xp.float32) * (2 * KEY_RANGE + 1)) - KEY_RANGE


def _bf16_exact(xp, values):
    """BF16 bits of float32 values that BF16 holds exactly (the low half is zero: no rounding)."""
    return (values.astype(xp.float32).view(xp.uint32) >> 16).astype(xp.uint16)


def _scales(xp, rng, shape):
    """FP32 scales of 1 or 2 (powers of two: every product with them is exact)."""
    return xp.where(rng.random(shape, dtype=xp.float32) < 0.5, xp.float32(1), xp.float32(2))


def build_index_keys(geometry, point, backend, seed: int):
    """The cached indexer keys on the device: pooled [M, context / 4, 128] or per-token
    [M, context, 128], integers in [-3, 3] as BF16 bits (uint16) or e4m3 codes (uint8, exact),
    generated there in chunks."""
    xp = backend.xp
    _, D = index_dims(geometry)
    Mn, per = int(point["M"]), index_key_rows(geometry, point)
    rows = Mn * per
    fp8_keys = index_dtype(point) == "fp8"
    flat = xp.empty((rows, D), dtype=xp.uint8 if fp8_keys else xp.uint16)
    rng = xp.random.default_rng(seed)
    for start in range(0, rows, BUILD_ROWS):
        stop = min(rows, start + BUILD_ROWS)
        ints = _small_ints(xp, rng, (stop - start, D))
        flat[start:stop] = mla.encode_e4m3_xp(xp, ints) if fp8_keys else _bf16_exact(xp, ints)
    return flat.reshape(Mn, per, D)


def build_index_key_scales(geometry, point, backend, seed: int):
    """fp8: one FP32 scale a cached key, 1 or 2 ([M, rows]); bf16: an empty array."""
    xp = backend.xp
    if index_dtype(point) != "fp8":
        return xp.zeros(0, dtype=xp.float32)
    shape = (int(point["M"]), index_key_rows(geometry, point))
    return _scales(xp, xp.random.default_rng(seed), shape)


def build_index_gates(geometry, point, backend, seed: int):
    """compress: gates [M, context, 128] BF16, GATE_STEP x a random permutation of 0..kpool-1 over
    each pool's slots, per channel (module docstring); other strategies: an empty array."""
    xp = backend.xp
    if point["key_caching"] != "compress":
        return xp.zeros(0, dtype=xp.uint16)
    _, D = index_dims(geometry)
    kp, Mn, n = kpool(geometry), int(point["M"]), int(point["context"])
    pools = Mn * n // kp
    out = xp.empty((pools, kp, D), dtype=xp.uint16)
    rng = xp.random.default_rng(seed)
    for start in range(0, pools, BUILD_POOLS):
        stop = min(pools, start + BUILD_POOLS)
        # argsort of i.i.d. uniforms over the slot axis: a uniformly random permutation, distinct
        # by construction (ties in the draw cannot repeat a rank)
        perm = xp.argsort(rng.random((stop - start, kp, D), dtype=xp.float32), axis=1)
        out[start:stop] = _bf16_exact(xp, perm.astype(xp.float32) * GATE_STEP)
    return out.reshape(Mn, n, D)


ARENA = ResidentInput("arena", lambda g, p, b, s: mla.build_arena(g, mla_point(p), b, s),
                      lambda g, p: mla.arena_nbytes(g, mla_point(p)))
INDEX_KEYS = ResidentInput("index_keys", build_index_keys, index_keys_nbytes)
INDEX_KEY_SCALES = ResidentInput("index_key_scales", build_index_key_scales, index_key_scales_nbytes)
INDEX_GATES = ResidentInput("index_gates", build_index_gates, index_gates_nbytes)
RESIDENT = (ARENA, INDEX_KEYS, INDEX_KEY_SCALES, INDEX_GATES)


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The host inputs (module docstring): iq integers in [-3, 3] (BF16 ``iq``, or fp8 ``iq_codes``
    with ``iq_scales`` of 1 or 2 a head), iw +-(1..64) x 2^-12, q N(0, 1) BF16, a random page table,
    ape 3072 x random bits; the per-stream counts every kernel is given (eligible for the scan,
    lengths for the compress, positions for the expand). Never zeros."""
    Mn, (Hi, Di) = int(point["M"]), index_dims(geometry)
    H, D, _ = mla.dims(geometry)
    mp = mla_point(point)
    pages = rng.permutation(mla.arena_pages(mp))[:Mn * mla.pages_per_stream(mp)]
    sign = rng.choice(np.array([-1.0, 1.0]), size=(Mn, Hi))
    n = lengths(geometry, point)
    iq = rng.integers(-KEY_RANGE, KEY_RANGE + 1, (Mn, Hi, Di)).astype(np.float32)
    if index_dtype(point) == "fp8":
        queries = {"iq_codes": fp8.encode_e4m3(iq), "iq_scales": rng.choice(np.float32([1, 2]), (Mn, Hi))}
    else:
        queries = {"iq": float_to_bf16(iq)}
    return {
        **queries,
        "iw": (sign * rng.integers(1, W_MAX + 1, (Mn, Hi)) * 2.0 ** -W_SHIFT).astype(np.float32),
        "q": float_to_bf16(rng.standard_normal((Mn, H, D))),
        "page_table": pages.reshape(Mn, mla.pages_per_stream(mp)).astype(np.int32),
        "ape": (APE_STEP * rng.integers(0, 2, (kpool(geometry), Di))).astype(np.float32),
        "eligible": eligible(geometry, point),
        "lengths": n,
        "positions": (n - 1).astype(np.int32),
    }


# -- reference -------------------------------------------------------------------------------------


def reference_streams(geometry, point):
    """One stream per tail length when M is large (kpool_spec's sample: 0, 9, 22, 31 at M = 32)."""
    return kpool_spec.reference_streams(geometry, {"M": point["M"]})


def index_queries(point, inputs, m: int) -> np.ndarray:
    """Stream m's indexer queries [32, 128] as float32 values (exact: small integers x 1 or 2)."""
    if index_dtype(point) == "fp8":
        return fp8.dequantize_rows(inputs["iq_codes"][m], inputs["iq_scales"][m])
    return bf16_to_float(inputs["iq"][m])


def key_values(point, codes: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """float32 values of cached keys [..., 128]: BF16 bits widened, or e4m3 codes x their scales."""
    return fp8.dequantize_rows(codes, scales) if index_dtype(point) == "fp8" else bf16_to_float(codes)


def stream_selection(geometry, point, inputs, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Stream m's selection row [W] int32 and its token scores [context] float64, in float64 by the
    reference rules: (compress: reference.kpool_compress, rounded to BF16 as the pooled buffer
    holds it), index_scores, topk, (pooled: expand_selection)."""
    caching, kp, ctx = point["key_caching"], kpool(geometry), int(point["context"])
    n = visible(geometry, point, m)
    t = n - 1
    scales = inputs.resident_rows("index_key_scales", m) if index_dtype(point) == "fp8" else None
    keys = key_values(point, inputs.resident_rows("index_keys", m), scales).astype(np.float64)
    if caching == "compress":
        gates = bf16_to_float(inputs.resident_rows("index_gates", m)).astype(np.float64)
        pooled = kpool_spec.reference_pools(keys, gates, np.asarray(inputs["ape"], np.float64), t)
        keys = np.zeros((ctx // kp, keys.shape[1]))
        keys[:len(pooled)] = bf16_to_float(float_to_bf16(pooled))
    q, w = index_queries(point, inputs, m), inputs["iw"][m]
    if caching == "per_token":
        scores = rules.index_scores(q, w, keys, eligible=n)
        return rules.topk(scores, k_selected(geometry, point)), scores
    pools = rules.complete_pools(t, kp)
    scores = rules.index_scores(q, w, keys, eligible=pools)
    chosen = rules.topk(scores, k_selected(geometry, point))
    row = rules.expand_selection(chosen, t, kp, topk_tokens(geometry, point), width(geometry, point))
    token_scores = np.repeat(scores, kp)
    token_scores[pools * kp:n] = np.inf          # the tail: always appended
    token_scores[n:] = -np.inf
    return row, token_scores


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    """out, lse (sparse_mla.spec.attend over the selection's arena rows) and selection, with the
    token scores the selection's check reads, for the sampled streams, in float64."""
    _, _, scale = mla.dims(geometry)
    streams = reference_streams(geometry, point) or range(int(point["M"]))
    mp = mla_point(point)
    out, lse, sel, tok = [], [], [], []
    for m in streams:
        row, token_scores = stream_selection(geometry, point, inputs, m)
        rows = mla.arena_rows(mp, inputs["page_table"][m:m + 1], row[None])[0]
        c = bf16_to_float(inputs.resident_rows("arena", rows[rows >= 0])).astype(np.float64)
        o, l = mla.attend(bf16_to_float(inputs["q"][m]).astype(np.float64), c, scale)
        out.append(o)
        lse.append(l)
        sel.append(row)
        tok.append(token_scores)
    return {"out": np.stack(out), "lse": np.stack(lse), "selection": np.stack(sel), "token_scores": np.stack(tok)}


def checks(point) -> dict:
    """out, lse: sparse_mla's checks (its docstring gives the tolerances' reasons); selection: the
    reference's set exactly (the scores are exact, module docstring), -1 slots in place."""
    return {**mla.checks(mla_point(point)),
            "selection": IndexSet(scores="token_scores", tie="lower_index", masked=-1, masked_positions=True)}


# -- the parts, bytes, FLOPs -----------------------------------------------------------------------


def part_points(geometry, point) -> list[tuple[str, str, dict]]:
    """The (component, our variant, point) rows whose times sum to this layer point's parts: the
    point each family's component measures for the same work (the designs SCAN_DESIGNS, TOPK_DESIGNS,
    MLA_DESIGN name; the scan and top-k at the strategy's pooling, cand_dim keys of the layer's
    index_dtype (and queries of it), index_topk; sparse_mla grouped, 64-token pages, BF16
    latent: for per_token its nearest row, 2048 + tail slots in 2112 where the layer's per-token
    row is 2048 tokens in 2048; scattered measured within 3% of grouped at M = 32 on the H200)."""
    Mn, ctx, pool = int(point["M"]), int(point["context"]), pooling(point)
    topk = int(geometry.indexer.index_topk)
    parts = []
    if point["key_caching"] == "compress":
        parts.append(("kpool_compress", "compress_cuda", {"M": Mn, "context": ctx}))
    dtype = index_dtype(point)
    parts.append(("indexer_scan", SCAN_DESIGNS[dtype], {"M": Mn, "context": ctx, "pooling": pool, "key_dtype": dtype,
                                                        "key_layout": "cand_dim", "query_dtype": dtype}))
    parts.append(("dsa_topk", topk_design(point), {"M": Mn, "context": ctx, "pooling": pool, "topk": topk,
                                            "score_rows": "random"}))
    if pool == "pooled":
        parts.append(("dsa_expand", "expand_cuda", {"M": Mn, "context": ctx, "topk": topk}))
    parts.append(("sparse_mla", MLA_DESIGN, mla_point(point)))
    return parts


def mla_bytes(geometry, point) -> int:
    """sparse_mla's fewest bytes (spec.bytes_moved) for this layer's selection rows: every valid
    slot's latent row, q, the selection, the page-table entries it needs, out and lse."""
    H, D, _ = mla.dims(geometry)
    Mn, pps = int(point["M"]), mla.pages_per_stream(mla_point(point))
    slots = slots_per_stream(geometry, point)
    return (sum(slots) * D * 2 + Mn * H * D * 2 + Mn * width(geometry, point) * 4
            + sum(min(s, pps) for s in slots) * 4 + Mn * H * D * 2 + Mn * H * 4)


def _parts_of(geometry, point) -> dict[str, dict]:
    return {name: p for name, _, p in part_points(geometry, point)}


def bytes_moved(geometry, point) -> int:
    """The sum of the parts' fewest bytes at the matching points (each family's bytes function),
    the sparse MLA's for this layer's own selection rows (mla_bytes)."""
    parts = _parts_of(geometry, point)
    total = mla_bytes(geometry, point)
    total += scan_spec.bytes_moved(geometry, parts["indexer_scan"])
    total += topk_spec.bytes_moved(geometry, parts["dsa_topk"])
    if "kpool_compress" in parts:
        total += kpool_spec.bytes_moved(geometry, parts["kpool_compress"])
    if "dsa_expand" in parts:
        total += expand_spec.bytes_moved(geometry, parts["dsa_expand"])
    return total


def flops(geometry, point) -> int:
    """The scan's and the compress's (their families' counts) and the sparse MLA's 4 H D a valid slot."""
    parts = _parts_of(geometry, point)
    H, D, _ = mla.dims(geometry)
    total = scan_spec.flops(geometry, parts["indexer_scan"]) + 4 * H * D * sum(slots_per_stream(geometry, point))
    if "kpool_compress" in parts:
        total += kpool_spec.flops(geometry, parts["kpool_compress"])
    return total


def footprint(geometry, point) -> int:
    return max(bytes_moved(geometry, point), FLUSH_FOOTPRINT)


def resident_nbytes(geometry, point) -> int:
    return sum(int(r.nbytes(geometry, point)) for r in RESIDENT)
