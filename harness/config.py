"""Job configuration: the structured-config schema registered with Hydra's ConfigStore, and the
validation that runs before anything is measured or written.

The schema has two parts: the harness's own keys (component, backend, timing, store, sweep,
variant(s), seed, fuel, claim, claims), declared here, and one top-level key per declared axis, taken
from the kernel families (``harness.axes``, ``registry.axes()``): the harness never learns what a
state dtype or a pool is. Names follow the design sketch: M (concurrent streams), context,
selection, pooling, state_dtype, key_dtype, variant.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from harness.axes import ConfigError, in_range, one_of
from harness.fuel import Geometry

__all__ = ["ConfigError", "JobConfig", "job_schema", "register_schema", "validate", "point_of"]

CACHE_MODES = ("auto", "flush", "rotate", "warm")
CHAIN_MAX = 256  # launches per timed sample; each holds its own copy of the inputs on the device


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
    # Enqueue each batch of repetitions behind a kernel that holds the stream until the host has
    # enqueued all of it (harness/host_hold.cu): no host launch gap inside a sample (clock
    # cuda-events-held in the rows). On by default since the H100 call of 2026-12-07 13:27 UTC
    # (reports/2026-12-07-dsa_select-h100-132758 against -132710): every held dsa_select row was
    # tighter and no slower than its plain twin; hold=false times as before (clock cuda-events)
    hold: bool = True
    # Launches per timed sample, each on its own buffers, enqueued back to back (one graph when
    # graph=true), as a decode step runs its layers of one kind; times are per launch (sample /
    # chain). 0 = the component's layers per decode step (34 for KDA). 1 = one launch per sample.
    chain: int = 1


@dataclasses.dataclass
class StoreConf:
    root: str = "results"


@dataclasses.dataclass
class JobConfig:
    """The harness's keys; ``job_schema`` adds one key per declared axis."""

    component: ComponentConf = dataclasses.field(default_factory=ComponentConf)
    backend: BackendConf = dataclasses.field(default_factory=BackendConf)
    timing: TimingConf = dataclasses.field(default_factory=TimingConf)
    store: StoreConf = dataclasses.field(default_factory=StoreConf)
    sweep: str = "adhoc"          # the sweep's name: the store folder's and the report's slug
    variant: str = "all"          # one variant name, or all variants of the backend
    # Several variants in ONE job, in this order, sharing its inputs and float64 reference (drawn
    # once instead of once per variant job); empty: ``variant`` decides.
    variants: List[str] = dataclasses.field(default_factory=list)
    seed: int = 0
    fuel: str = "fuels/glm-5.3-flash/attention.yaml"
    claim: str = ""               # what the experiment sets out to show (rendered in reports)
    # The claims it can test, as rules over stored rows (harness/verdicts.py); checked here, at
    # composition, and decided in the write-up.
    claims: List[Any] = dataclasses.field(default_factory=list)
    # What would reopen its findings that no machine can check (harness/reopen.py lists it as manual).
    reopen_if: List[str] = dataclasses.field(default_factory=list)
    # What to measure or build next, as the experiment's authors see it (the write-up's Next steps).
    next_steps: List[str] = dataclasses.field(default_factory=list)
    # A budget of experiments/budget/ (decode_step): the write-up adds "Where the step goes",
    # priced from the published reports' rows (harness/budget.py), beside this sweep's own rows.
    step_budget: str = ""


def job_schema() -> type:
    """JobConfig plus one field per declared axis (its type and default from the declaration)."""
    from harness import registry

    harness_keys = {f.name for f in dataclasses.fields(JobConfig)}
    fields = []
    for axis in registry.axes().values():
        if axis.name in harness_keys:
            raise ValueError(f"axis {axis.name!r} shadows a harness config key")
        kind = Optional[axis.kind] if axis.default is None else axis.kind
        fields.append((axis.name, kind, dataclasses.field(default=axis.default)))
    return dataclasses.make_dataclass("JobSchema", fields, bases=(JobConfig,))


def register_schema() -> None:
    """The job schema, and one ``component`` group option per registered component (so a
    component, a test's too, is picked as ``component=NAME`` with no config file of its own)."""
    from harness import registry

    cs = ConfigStore.instance()
    cs.store(name="job_schema", node=job_schema())
    cs.store(group="component", name="schema", node=ComponentConf)
    for name in registry.components():
        cs.store(group="component", name=name, node=ComponentConf(name=name))
    cs.store(group="backend", name="schema", node=BackendConf)
    cs.store(group="timing", name="schema", node=TimingConf)
    cs.store(group="store", name="schema", node=StoreConf)


def _value(cfg: Any, key: str) -> Any:
    return cfg.get(key) if isinstance(cfg, (DictConfig, dict)) else getattr(cfg, key, None)


def validate(cfg: DictConfig | JobConfig, geometry: Geometry) -> None:
    """Check every value a job reads; raise `ConfigError` with one line on the first problem:
    the harness keys, every declared axis (a value the component does not read is still checked,
    so a typo never passes silently), then the component's own cross-field rules."""
    from harness import backends, registry

    c = cfg
    comps = registry.components()
    one_of("component", c.component.name, sorted(comps))
    one_of("backend", c.backend.name, backends.BACKENDS)
    in_range("backend.device", c.backend.device, 0, None)
    comp = comps[c.component.name]
    backend_names = comp.variant_names(None)
    if c.variant != "all" and c.variant not in backend_names:
        raise ConfigError(f"variant: unknown value {c.variant!r} for component {comp.name}; "
                          f"allowed: all, {', '.join(backend_names)}")
    variants = list(_value(c, "variants") or [])
    if variants and c.variant != "all":
        raise ConfigError(f"variants: given with variant={c.variant!r}; allowed: one of the two "
                          f"(variant=all when variants lists the variants)")
    # A sweep over several components (component=a,b) may list variants of each: a job runs the
    # listed variants of its own component, so a name must be some component's variant and every
    # job's component must keep at least one.
    known = {v for other in comps.values() for v in other.variant_names(None)}
    for name in variants:
        if name not in known:
            raise ConfigError(f"variants: unknown value {name!r} for component {comp.name}; "
                              f"allowed: {', '.join(backend_names)} (or another swept component's)")
    if variants and not set(variants) & set(backend_names):
        raise ConfigError(f"variants: none of {', '.join(variants)} is a variant of component {comp.name}; "
                          f"allowed: {', '.join(backend_names)}")
    if len(set(variants)) != len(variants):
        raise ConfigError(f"variants: {variants} names a variant twice; allowed: each variant once")
    for axis in registry.axes().values():
        axis.check(_value(c, axis.name), geometry)
    t = c.timing
    in_range("timing.warmup", t.warmup, 0, 10000)
    in_range("timing.min_reps", t.min_reps, 1, 100000)
    in_range("timing.max_reps", t.max_reps, t.min_reps, 1000000)
    in_range("timing.min_time_ms", t.min_time_ms, 0, None, "numbers")
    in_range("timing.max_noise", t.max_noise, 0, 1, "numbers")
    in_range("timing.timeout_s", t.timeout_s, 0.001, None, "numbers")
    one_of("timing.cache", t.cache, CACHE_MODES)
    in_range("timing.chain", t.chain, 0, CHAIN_MAX)
    if not str(c.store.root).strip():
        raise ConfigError("store.root: empty; allowed: a directory path")
    if not str(c.sweep).replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"sweep: {c.sweep!r} is not a slug; allowed: letters, digits, '-', '_'")
    from harness import verdicts

    verdicts.check_claims(_value(c, "claims"), geometry)
    problem = comp.check_point(geometry, point_of(c, comp, geometry))
    if problem:
        raise ConfigError(problem)


def point_of(cfg: Any, comp, geometry: Geometry) -> dict[str, Any]:
    """The shape point of a job: the values of the component's axes, each checked and resolved
    by its declaration (a None ``topk`` becomes the fuel's index_topk, say)."""
    return {axis.name: axis.check(_value(cfg, axis.name), geometry) for axis in comp.axes}
