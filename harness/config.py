"""Job configuration: the structured-config schema registered with Hydra's ConfigStore, and the
range and cross-field validation that runs before anything is measured or written.

Names follow the design sketch: M (concurrent streams), context (tokens visible to the query),
candidates (keys the indexer scores: context, or context / kpool when pooled), selection,
pooling, state_dtype, key_dtype, variant.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.fuel import DTYPES, Geometry

SELECTIONS = ("grouped", "scattered", "dense")
POOLINGS = ("pooled", "per_token")
CACHE_MODES = ("auto", "flush", "rotate", "warm")
M_MAX = 4096
CHAIN_MAX = 256  # launches per timed sample; each holds its own copy of the inputs on the device
# JobConfig keys that are shape axes; a component reads the subset it names in Component.axes.
AXIS_KEYS = ("M", "context", "copy_mib", "state_dtype", "key_dtype", "selection", "pooling", "topk")


class ConfigError(ValueError):
    """A bad job configuration; the message is one line naming the key and what is allowed."""


@dataclasses.dataclass
class ComponentConf:
    name: str = MISSING


@dataclasses.dataclass
class BackendConf:
    name: str = "auto"
    device: int = 0


@dataclasses.dataclass
class TimingConf:
    warmup: int = 5
    min_reps: int = 20
    max_reps: int = 2000
    min_time_ms: float = 100.0
    max_noise: float = 0.05       # (p80 - p20) / p50 above this flags the row as noisy
    timeout_s: float = 30.0
    cache: str = "auto"           # flush | rotate | warm | auto (rotate when it fits in L2)
    graph: bool = False           # time CUDA-graph replays (launch-bound kernels, peers)
    # Launches per timed sample, each on its own buffers, enqueued back to back (one graph when
    # graph=true), as a decode step runs its layers of one kind; times are per launch (sample /
    # chain). 0 = the component's layers per decode step (34 for KDA). 1 = one launch per sample.
    chain: int = 1


@dataclasses.dataclass
class StoreConf:
    root: str = "results"


@dataclasses.dataclass
class JobConfig:
    component: ComponentConf = dataclasses.field(default_factory=ComponentConf)
    backend: BackendConf = dataclasses.field(default_factory=BackendConf)
    timing: TimingConf = dataclasses.field(default_factory=TimingConf)
    store: StoreConf = dataclasses.field(default_factory=StoreConf)
    sweep: str = "adhoc"          # the sweep's name: the store folder's and the report's slug
    variant: str = "all"          # one variant name, or all variants of the backend
    # Several variants in ONE job, in this order, sharing its inputs and float64 reference (drawn
    # once instead of once per variant job); empty: ``variant`` decides.
    variants: List[str] = dataclasses.field(default_factory=list)
    M: int = 32
    context: int = 262144
    copy_mib: int = 1024
    state_dtype: str = "bf16"
    key_dtype: str = "bf16"
    selection: str = "grouped"
    pooling: str = "pooled"
    topk: Optional[int] = None    # None: the fuel's indexer.index_topk
    seed: int = 0
    fuel: str = "fuels/glm-5.3-flash/attention.yaml"
    claim: str = ""               # what the experiment sets out to show (rendered in reports)


def register_schema() -> None:
    cs = ConfigStore.instance()
    cs.store(name="job_schema", node=JobConfig)
    cs.store(group="component", name="schema", node=ComponentConf)
    cs.store(group="backend", name="schema", node=BackendConf)
    cs.store(group="timing", name="schema", node=TimingConf)
    cs.store(group="store", name="schema", node=StoreConf)


def _in_range(key: str, value: Any, lo: float, hi: float | None, kind: str = "integers") -> None:
    # NaN compares false with everything, so test for finiteness first (a NaN max_noise would
    # silently switch the stop rule off).
    if value is None or not math.isfinite(value) or value < lo or (hi is not None and value > hi):
        allowed = f"{kind} {lo}..{hi}" if hi is not None else f"{kind} >= {lo}"
        raise ConfigError(f"{key}: {value} is out of range; allowed: {allowed}")


def _one_of(key: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def candidates(geometry: Geometry, context: int, pooling: str) -> int:
    """Keys the indexer scores: every token, or one pooled key per kpool tokens."""
    return context // geometry.indexer.kpool if pooling == "pooled" else context


def selected_candidates(geometry: Geometry, topk: int, pooling: str) -> int:
    """How many candidates a top-k of `topk` picks, in the fuel's unit for index_topk."""
    if pooling == "pooled" and geometry.indexer.index_topk_unit == "tokens":
        return topk // geometry.indexer.kpool
    return topk


def validate(cfg: DictConfig | JobConfig, geometry: Geometry) -> None:
    """Check every value a job reads; raise `ConfigError` with one line on the first problem."""
    from harness import backends, registry

    c = cfg
    comps = registry.components()
    _one_of("component", c.component.name, sorted(comps))
    _one_of("backend", c.backend.name, backends.BACKENDS)
    _in_range("backend.device", c.backend.device, 0, None)
    comp = comps[c.component.name]
    backend_names = comp.variant_names(None)
    if c.variant != "all" and c.variant not in backend_names:
        raise ConfigError(f"variant: unknown value {c.variant!r} for component {comp.name}; "
                          f"allowed: all, {', '.join(backend_names)}")
    variants = list(getattr(c, "variants", None) or [])
    if variants and c.variant != "all":
        raise ConfigError(f"variants: given with variant={c.variant!r}; allowed: one of the two "
                          f"(variant=all when variants lists the variants)")
    for name in variants:
        if name not in backend_names:
            raise ConfigError(f"variants: unknown value {name!r} for component {comp.name}; "
                              f"allowed: {', '.join(backend_names)}")
    if len(set(variants)) != len(variants):
        raise ConfigError(f"variants: {variants} names a variant twice; allowed: each variant once")
    _in_range("M", c.M, 1, M_MAX)
    _in_range("context", c.context, 1, geometry.serving.max_position_embeddings)
    kpool = geometry.indexer.kpool
    if c.context % kpool:
        raise ConfigError(f"context: {c.context} is not a multiple of the pool size "
                          f"indexer.kpool={kpool}; allowed: multiples of {kpool}")
    _in_range("copy_mib", c.copy_mib, 1, 65536)
    _one_of("state_dtype", c.state_dtype, DTYPES)
    _one_of("key_dtype", c.key_dtype, DTYPES)
    _one_of("selection", c.selection, SELECTIONS)
    _one_of("pooling", c.pooling, POOLINGS)
    topk = effective_topk(c, geometry)
    _in_range("topk", topk, 1, None)
    unit_is_tokens = c.pooling == "pooled" and geometry.indexer.index_topk_unit == "tokens"
    if unit_is_tokens and topk % kpool:
        raise ConfigError(f"topk: {topk} is not a whole number of pools of indexer.kpool={kpool}; "
                          f"allowed: multiples of {kpool}")
    n_cand = candidates(geometry, c.context, c.pooling)
    n_sel = selected_candidates(geometry, topk, c.pooling)
    if n_sel > n_cand:
        most = n_cand * (kpool if unit_is_tokens else 1)
        raise ConfigError(f"topk: {topk} selects {n_sel} candidates but context={c.context} with "
                          f"pooling={c.pooling} gives only {n_cand}; allowed: topk <= {most}")
    t = c.timing
    _in_range("timing.warmup", t.warmup, 0, 10000)
    _in_range("timing.min_reps", t.min_reps, 1, 100000)
    _in_range("timing.max_reps", t.max_reps, t.min_reps, 1000000)
    _in_range("timing.min_time_ms", t.min_time_ms, 0, None, "numbers")
    _in_range("timing.max_noise", t.max_noise, 0, 1, "numbers")
    _in_range("timing.timeout_s", t.timeout_s, 0.001, None, "numbers")
    _one_of("timing.cache", t.cache, CACHE_MODES)
    _in_range("timing.chain", t.chain, 0, CHAIN_MAX)
    if not str(c.store.root).strip():
        raise ConfigError("store.root: empty; allowed: a directory path")
    if not str(c.sweep).replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"sweep: {c.sweep!r} is not a slug; allowed: letters, digits, '-', '_'")
    problem = comp.check_point(geometry, point_of(c, comp.axes, geometry))
    if problem:
        raise ConfigError(problem)


def effective_topk(cfg: Any, geometry: Geometry) -> int:
    return cfg.topk if cfg.topk is not None else geometry.indexer.index_topk


def point_of(cfg: Any, axes: tuple[str, ...], geometry: Geometry | None = None) -> dict[str, Any]:
    """The shape point of a job: the values of the component's axes (topk resolved from the fuel)."""
    point = {axis: (cfg.get(axis) if isinstance(cfg, DictConfig) else getattr(cfg, axis)) for axis in axes}
    if "topk" in point and point["topk"] is None and geometry is not None:
        point["topk"] = geometry.indexer.index_topk
    return point


def to_container(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
