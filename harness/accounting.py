"""Byte accounting derived from the fuel only (seed 000 "Bytes per stream", seed 003 §9.1–9.3).

Every number here is arithmetic on `Geometry` facts; none is typed in. Units: GiB = 2**30 bytes.
"""

from __future__ import annotations

import dataclasses
import math

from harness.fuel import Geometry

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {"bf16": 2, "fp32": 4}


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"dtype: unknown value {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}") from None


# -- per-layer and per-token items ---------------------------------------------------------------
def kda_state_bytes_per_layer(g: Geometry, state_dtype: str | None = None) -> int:
    """One KDA layer's recurrent state per stream: heads x K x V x bytes."""
    dt = state_dtype or g.kda.state_dtype
    return g.kda.heads * g.kda.head_k_dim * g.kda.head_v_dim * dtype_bytes(dt)


def kda_conv_bytes_per_layer(g: Geometry) -> int:
    """Short-conv state per layer per stream: tensors x channels x (kernel - 1) taps x bytes."""
    channels = g.kda.heads * g.kda.head_k_dim
    taps = g.kda.conv_kernel - 1
    return g.kda.conv_tensors * channels * taps * dtype_bytes(g.kda.conv_state_dtype)


def kda_bytes_all_layers(g: Geometry, state_dtype: str | None = None) -> int:
    return g.n_kda_layers * (kda_state_bytes_per_layer(g, state_dtype) + kda_conv_bytes_per_layer(g))


def mla_values_per_token_per_layer(g: Geometry) -> int:
    return g.mla.kv_lora_rank + g.mla.qk_rope_head_dim


def mla_kv_bytes_per_token_per_layer(g: Geometry) -> int:
    return mla_values_per_token_per_layer(g) * dtype_bytes(g.mla.kv_dtype)


def dsa_cache_layers(g: Geometry, mtp_cached: bool) -> int:
    """Layers that keep a per-token MLA cache and indexer keys (the MTP layer has its own)."""
    return g.n_dsa_layers + (1 if mtp_cached else 0)


def mla_kv_bytes(g: Geometry, context: int, layers: int) -> int:
    return context * mla_kv_bytes_per_token_per_layer(g) * layers


def indexer_key_bytes(g: Geometry, context: int, layers: int, key_caching: str | None = None) -> int:
    """Indexer keys: one head_dim key per token, or per pool of kpool tokens when pooled."""
    caching = key_caching or g.indexer.key_caching
    if caching not in ("pooled", "per_token"):
        raise ValueError(f"key_caching: unknown value {caching!r}; allowed: pooled, per_token")
    keys = context // g.indexer.kpool if caching == "pooled" else context
    return keys * g.indexer.head_dim * dtype_bytes(g.indexer.key_dtype) * layers


# -- seed 000: Bytes per stream ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Item:
    name: str
    bytes: int
    derivation: str


def bytes_per_stream_items(g: Geometry, context: int | None = None) -> list[Item]:
    """Seed 000's "Bytes per stream" table, BF16, at the serving cap."""
    ctx = context or g.serving.context_cap
    nd = g.n_dsa_layers
    k = g.kda
    return [
        Item("KDA recurrent, per layer", kda_state_bytes_per_layer(g, "bf16"),
             f"{k.heads} x {k.head_k_dim} x {k.head_v_dim} x 2"),
        Item("KDA conv, per layer", kda_conv_bytes_per_layer(g),
             f"{k.conv_tensors} x {k.heads * k.head_k_dim} x {k.conv_kernel - 1} x 2"),
        Item(f"KDA total, {g.n_kda_layers} layers", kda_bytes_all_layers(g, "bf16"),
             f"{g.n_kda_layers} x (recurrent + conv)"),
        Item("MLA KV, per token per layer", mla_kv_bytes_per_token_per_layer(g),
             f"({g.mla.kv_lora_rank} + {g.mla.qk_rope_head_dim}) x 2"),
        Item(f"MLA KV at {ctx}, {nd} layers", mla_kv_bytes(g, ctx, nd), f"{ctx} x per-token x {nd}"),
        Item(f"indexer keys, pooled {g.indexer.kpool}:1, {nd} layers",
             indexer_key_bytes(g, ctx, nd, "pooled"),
             f"{ctx} / {g.indexer.kpool} x {g.indexer.head_dim} x 2 x {nd}"),
        Item(f"indexer keys, per token, {nd} layers", indexer_key_bytes(g, ctx, nd, "per_token"),
             f"{ctx} x {g.indexer.head_dim} x 2 x {nd}"),
    ]


@dataclasses.dataclass(frozen=True)
class StreamAccounting:
    label: str
    state_dtype: str
    key_caching: str
    mtp_cached: bool
    bytes: int
    pool_gib: float

    @property
    def gib(self) -> float:
        return self.bytes / GIB

    @property
    def streams(self) -> int:
        """Whole streams that fit in the pool."""
        return math.floor(self.pool_gib * GIB / self.bytes)


def per_stream_bytes(g: Geometry, state_dtype: str, key_caching: str, mtp_cached: bool,
                     context: int | None = None) -> int:
    """All per-stream attention memory: KDA state + conv, MLA latent cache, indexer keys.

    The conv state stays in its own dtype (BF16) even when the recurrent state is FP32.
    """
    ctx = context or g.serving.context_cap
    layers = dsa_cache_layers(g, mtp_cached)
    return (kda_bytes_all_layers(g, state_dtype) + mla_kv_bytes(g, ctx, layers)
            + indexer_key_bytes(g, ctx, layers, key_caching))


SEED000_ACCOUNTINGS = (
    ("BF16 state, pooled keys, no MTP cache", "bf16", "pooled", False),
    ("BF16 state, pooled keys, MTP cached", "bf16", "pooled", True),
    ("FP32 state, per-token keys, MTP cached", "fp32", "per_token", True),
)


def per_stream_accounting(g: Geometry, context: int | None = None) -> list[StreamAccounting]:
    """Seed 000's per-stream table: bytes per stream and whole streams in the pool."""
    return [
        StreamAccounting(label, dt, kc, mtp, per_stream_bytes(g, dt, kc, mtp, context), g.serving.pool_gib)
        for label, dt, kc, mtp in SEED000_ACCOUNTINGS
    ]


def per_booster_bytes(g: Geometry, state_dtype: str = "bf16", key_caching: str = "pooled",
                      mtp_cached: bool = False, context: int | None = None) -> int:
    """Two-booster split: only the KDA state shards (by heads); the MLA latent and the indexer
    keys are head independent and replicate on every booster."""
    ctx = context or g.serving.context_cap
    layers = dsa_cache_layers(g, mtp_cached)
    return (kda_bytes_all_layers(g, state_dtype) // g.serving.boosters
            + mla_kv_bytes(g, ctx, layers) + indexer_key_bytes(g, ctx, layers, key_caching))


@dataclasses.dataclass(frozen=True)
class BudgetLine:
    """Streams that fit in a budget under one accounting (each stream lives on every booster)."""

    accounting: str
    per_stream_bytes: int
    budget_gib: float

    @property
    def per_stream_gib(self) -> float:
        return self.per_stream_bytes / GIB

    @property
    def streams(self) -> int:
        return math.floor(self.budget_gib * GIB / self.per_stream_bytes)


def booster_budget_gib(g: Geometry) -> float:
    """Memory left on one booster after the weights (seed 000: 123.73 - 91)."""
    return round(g.serving.booster_gib - g.serving.weights_gib, 6)


def budget_lines(g: Geometry) -> list[BudgetLine]:
    """The pool and the today-budget under the single-device and the split accounting.

    Seed 000 quotes 10 streams for the 32.73 GiB budget: that is the single-device 2.993 GiB
    figure; the split per-booster figure (2.957 GiB) gives 11. Both are listed so the report
    shows which accounting gives which.
    """
    single = per_stream_bytes(g, "bf16", "pooled", False)
    split = per_booster_bytes(g)
    lines = []
    for budget in (g.serving.pool_gib, booster_budget_gib(g)):
        lines.append(BudgetLine("single device (whole KDA state per stream)", single, budget))
        lines.append(BudgetLine(f"{g.serving.boosters}-booster split (KDA state sharded)", split, budget))
    return lines


# -- seed 003 §9.1–9.3 -------------------------------------------------------------------------------
def flash_values_per_token(g: Geometry, with_pooled_keys: bool) -> int:
    """Values cached per new token across the DSA layers (seed 003 §9.1): 5,632 or 5,984."""
    nd = g.n_dsa_layers
    values = nd * mla_values_per_token_per_layer(g)
    if with_pooled_keys:
        values += nd * g.indexer.head_dim // g.indexer.kpool
    return values


def kda_state_bytes_all_layers(g: Geometry, state_dtype: str = "bf16") -> int:
    """Seed 003 §9.3: 34 x 64 x 128 x 128 values, 68 MiB in BF16 (conv state excluded)."""
    return g.n_kda_layers * kda_state_bytes_per_layer(g, state_dtype)


def growing_cache_bytes(g: Geometry, context: int | None = None, with_pooled_keys: bool = True) -> int:
    """Seed 003 §9.2: the per-token cache at a context, BF16 (11.7 GiB at 1,048,576 with pooled keys)."""
    ctx = context or g.serving.max_position_embeddings
    return flash_values_per_token(g, with_pooled_keys) * ctx * dtype_bytes(g.mla.kv_dtype)
