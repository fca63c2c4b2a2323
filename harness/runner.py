"""The one measurement path: fuel -> config -> variant -> verification -> timing -> rows -> store.

`run_job` is what every Hydra job calls; it knows no kernel. For each selected variant it draws
fresh random inputs, computes the float64 reference, poisons the outputs, launches once, compares,
and only then times; a failed comparison is a ``failed`` row with the reason and no timing.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import time
import zlib
from typing import Any, Callable, Sequence

import numpy as np

from harness import backends, placement, provenance, registry, stages, store, sweep, timing, verdicts
from harness.config import ConfigError, point_of, validate
from harness.fuel import REPO_ROOT, Geometry, load_fuel
from harness.verify import RelErr, as_check, compare_all

log = logging.getLogger("attnbench")

ROOFLINE_COMPONENT = "roofline"
# The sweep's reference copy size: far above the L2 on a GPU; small on the CPU reference backend.
ROOFLINE_MIB = {"cuda": 1024, "cpu": 64}


@dataclasses.dataclass
class JobContext:
    sweep_dir: pathlib.Path
    job_dir: pathlib.Path
    job: str
    overrides: list[str]


def _fuel_path(path: str) -> pathlib.Path:
    p = pathlib.Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def sweep_provenance(ctx: JobContext, backend, geometry: Geometry) -> dict[str, Any]:
    """Captured by the first job of a sweep and reused by the others."""
    prov = store.read_provenance(ctx.sweep_dir)
    if prov is not None:
        mine = (backend.name, backend.device_id, geometry.sha256)
        theirs = (prov.get("backend"), prov.get("device_index", 0), prov.get("fuel_sha256"))
        if mine != theirs:
            raise ConfigError(f"backend: this job ({mine[0]}, device {mine[1]}, fuel {mine[2][:12]}) does not match "
                              f"its sweep's provenance ({theirs[0]}, device {theirs[1]}, fuel {str(theirs[2])[:12]}); "
                              f"allowed: one backend, device and fuel per sweep")
        return prov
    prov = provenance.capture(backend, geometry)
    store.write_provenance(ctx.sweep_dir, prov)
    return prov


def sweep_roofline(ctx: JobContext, backend, geometry: Geometry, timing_conf) -> dict[str, Any]:
    """The measured copy bandwidth for this sweep (bytes read + written per second)."""
    roof = store.read_roofline(ctx.sweep_dir)
    if roof is not None:
        return roof
    comp = registry.get(ROOFLINE_COMPONENT)
    point = {"copy_mib": ROOFLINE_MIB[backend.name]}
    # Every copy of the roofline family on this backend (ours and peers) at one large size; the
    # fastest verified one is the ceiling, so no GB/s is flattered by a weak copy kernel.
    shared: dict = {}
    # One plain launch per sample, whatever the sweep's timing says: a copy captured in a CUDA graph
    # becomes a memcpy node, which is not the copy path the ceiling is about (seen on the H200:
    # torch's copy fell from 4.25 to 2.7 TB/s as a graph node), and a chained sweep's chain (34
    # for roofline_step) would build that many 1 GiB copies for one ceiling (it stalled a sweep).
    timing_conf = _with_timing(timing_conf, graph=False, chain=1)
    rows = [measure(comp, v, point, geometry, backend, timing_conf, seed=12345, roofline=None, shared=shared)
            for v in comp.variants if v.backend == backend.name]
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise RuntimeError(f"roofline copy failed on {backend.name}: " + "; ".join(r["reason"] for r in rows))
    best = max(ok, key=lambda r: r["gbps"])
    roof = {
        "gbps": best["gbps"], "ms_p50": best["ms_p50"], "bytes": best["bytes"], "spread": best["spread"],
        "n": best["n"], "variant": best["variant"], "copy_mib": point["copy_mib"], "backend": backend.name,
        "candidates": {r["variant"]: (round(r["gbps"], 1) if r["status"] == "ok" else r["status"]) for r in rows},
        "measured": ("fastest verified copy, bytes read + bytes written, "
                     + ("host caches not flushed (CPU reference backend)" if backend.name == "cpu"
                        else "L2 flushed between repetitions, plain launches")),
    }
    store.write_roofline(ctx.sweep_dir, roof)
    log.info("roofline: %s %d MiB copy %.1f GB/s (%s); candidates %s", best["variant"], point["copy_mib"],
             roof["gbps"], backend.label, roof["candidates"])
    return roof


def _point_seed(seed: int, point: dict[str, Any]) -> int:
    return (seed * 1_000_003 + zlib.crc32(repr(sorted(point.items())).encode())) % (1 << 32)


def build_resident(comp, geometry: Geometry, point: dict[str, Any], backend, seed: int) -> dict[str, Any]:
    """The component's resident inputs, built on the backend's device (generated there), each
    checked against its declared size."""
    resident = {}
    for i, spec in enumerate(comp.resident):
        arr = spec.build(geometry, point, backend, (seed + 7919 * (i + 1)) % (1 << 32))
        want = int(spec.nbytes(geometry, point))
        if int(arr.nbytes) != want:
            raise RuntimeError(f"resident input {spec.name!r}: built {int(arr.nbytes)} bytes, declared {want}")
        resident[spec.name] = arr
    return resident


def make_inputs(comp, geometry: Geometry, point: dict[str, Any], backend, point_seed: int) -> registry.Inputs:
    """A point's inputs drawn the way a sweep draws them: the host arrays from ``point_seed`` and,
    where the component declares resident inputs, those built on the backend from the same seed (the
    sweep passes its per-point seed; a tool may pass any)."""
    host = comp.make_inputs(geometry, point, np.random.default_rng(point_seed))
    resident = build_resident(comp, geometry, point, backend, point_seed) if comp.resident else {}
    return registry.Inputs(host, resident, backend if resident else None)


def _case(comp, geometry: Geometry, point: dict[str, Any], seed: int, shared: dict | None, backend=None):
    """Fresh random inputs for this point (host arrays, and the resident ones built on the
    backend) and their float64 reference, drawn once per job and shared by its variants (every
    variant is checked on the same inputs; a new job, seed or point draws new ones). ``shared``
    is the job's cache; None draws a private case."""
    if shared is not None and "inputs" in shared:
        return shared["inputs"], shared["ref"]
    inputs = make_inputs(comp, geometry, point, backend, _point_seed(seed, point))
    ref = comp.reference(geometry, point, inputs)
    if shared is not None:
        shared.update(inputs=inputs, ref=ref)
    return inputs, ref


def reference_streams(comp, geometry: Geometry, point: dict[str, Any]):
    """The stream indices the reference covers (a sorted int array), or None for all of them."""
    streams = comp.reference_streams(geometry, point)
    return None if streams is None else np.asarray(sorted(set(int(i) for i in streams)), dtype=np.int64)


def describe_sample(streams, point: dict[str, Any]) -> str:
    """What a row says of the reference's coverage: ``all`` or ``streams 0, 9, 31 of 32``."""
    if streams is None:
        return "all"
    total = f" of {point['M']}" if "M" in point else ""
    return f"streams {', '.join(str(int(i)) for i in streams)}{total}"


def output_checks(comp, point: dict[str, Any]) -> dict:
    """The component's check per output (a float tolerance read as verify.as_check does)."""
    return {name: as_check(c) for name, c in comp.checks(point).items()}


def checked(comp, point: dict[str, Any], out: dict, ref: dict, streams) -> list:
    """Every output the component declares a check for, against the reference (only the sampled
    streams' rows when the reference covers a sample)."""
    checks = output_checks(comp, point)
    missing = sorted(set(checks) - set(out))
    if missing:
        raise RuntimeError(f"variant returned no output {missing}")
    if streams is not None:
        out = {name: np.asarray(out[name])[streams] for name in checks}
    return compare_all(out, ref, checks)


def _source_sha(comp, variant) -> str:
    """Short hash of what a variant compiles: its declared sources and the headers they include
    (harness.sources), '' if it declares none."""
    from harness.sources import sources_sha

    return sources_sha([pathlib.Path(comp.folder) / name for name in variant.sources])


def _base_row(comp, variant, point, geometry: Geometry, backend) -> dict[str, Any]:
    nbytes = int(comp.bytes_moved(geometry, point))
    return {
        "component": comp.name, "variant": variant.name, "peer": variant.peer,
        "backend": backend.name, "device": None, "status": "ok", "reason": "",
        "ms_p50": np.nan, "ms_p20": np.nan, "ms_p80": np.nan, "ms_min": np.nan, "n": 0,
        "spread": np.nan, "noisy": False, "stop_reason": "",
        "bytes": nbytes, "flops": int(comp.flops(geometry, point)),
        "gbps": np.nan, "gflops": np.nan, "roofline_gbps": np.nan, "roofline_fraction": np.nan,
        "layers": int(comp.layers(geometry)), "ms_all_layers": np.nan,
        "source_sha": _source_sha(comp, variant),
        "rel_err": np.nan, "tolerance": np.nan, "errors": "",
        "checks": "; ".join(f"{name}: {c.describe()}" for name, c in output_checks(comp, point).items()),
        "ref_sample": "all", "point_axes": ",".join(point),
        "resident_bytes": sum(int(r.nbytes(geometry, point)) for r in comp.resident),
        "clock": "", "cache": "", "graph": False, "chain": 1, "throttled": "",
        "sm_clock_mhz_before": None, "sm_clock_mhz_after": None,
        "mem_clock_mhz_before": None, "mem_clock_mhz_after": None,
        "throttle_before": None, "throttle_after": None,
        **{k: v for k, v in point.items()},
    }


def skip_reason(comp, variant, point: dict[str, Any], geometry: Geometry, backend) -> str | None:
    """Why ``variant`` will not run at ``point`` on ``backend`` (its own ``supports``, or a point too
    large for the CPU reference backend), or None."""
    reason = variant.supports(geometry, point)
    need = int(comp.bytes_moved(geometry, point)) + sum(int(r.nbytes(geometry, point)) for r in comp.resident)
    if reason is None and backend.name == "cpu" and need > comp.cpu_max_bytes:
        reason = (f"CPU reference backend runs points up to {comp.cpu_max_bytes >> 20} MiB moved or resident; "
                  f"this one needs {need >> 20} MiB")
    return reason


def _may_run(comp, variant, point, geometry: Geometry, backend) -> bool:
    """False only when the variant will be skipped (a supports() that raises will be a failed row,
    which is measured against the roofline like any other)."""
    try:
        return skip_reason(comp, variant, point, geometry, backend) is None
    except Exception:
        return True


def measure(comp, variant, point: dict[str, Any], geometry: Geometry, backend, timing_conf,
            seed: int, roofline: dict[str, Any] | None, shared: dict | None = None) -> dict[str, Any]:
    """Verify then time one variant at one point; always returns a row (ok / skipped / failed)."""
    row = _base_row(comp, variant, point, geometry, backend)
    checks = output_checks(comp, point)
    row["chain"] = chain_length(timing_conf, comp, geometry)
    streams = reference_streams(comp, geometry, point)
    row["ref_sample"] = describe_sample(streams, point)
    try:
        reason = skip_reason(comp, variant, point, geometry, backend)
    except Exception as exc:  # a broken supports() is the variant's failure, not the sweep's
        row.update(status="failed", reason=f"supports: {type(exc).__name__}: {sweep.first_error_line(exc)}"[:500])
        log.warning("%s/%s failed at %s: %s", comp.name, variant.name, point, row["reason"])
        return row
    if reason:
        row.update(status="skipped", reason=reason)
        return row
    try:
        what = f"{comp.name}/{variant.name}"
        with stages.stage("building inputs and the reference for", what):
            inputs, ref = _case(comp, geometry, point, seed, shared, backend)
        with stages.stage("compiling and building", what):
            launch = variant.build(geometry, point, inputs, backend)
        if not isinstance(launch, registry.Launch):
            raise TypeError(f"{variant.name}: build returned {type(launch).__name__}, not a harness.registry.Launch")
        with stages.stage("verifying", what):
            launch.poison()
            launch()
            out = launch.outputs()
            comparisons = checked(comp, point, out, ref, streams)
        # rel_err / tolerance summarise the relative-error checks (an index set has neither)
        rel = [c.rel_err for c in comparisons if c.rel_err == c.rel_err]
        row["rel_err"] = max(rel) if rel else np.nan
        row["tolerance"] = max((c.tolerance for c in checks.values() if isinstance(c, RelErr)), default=0.0)
        row["errors"] = "; ".join(f"{c.name}={c.rel_err:.3e}" if c.rel_err == c.rel_err else
                                  f"{c.name}={c.mismatches} {c.unit} off" for c in comparisons)
        bad = [c for c in comparisons if not c.ok]
        if bad:
            row.update(status="failed", reason="; ".join(c.describe() for c in bad))
            return row
        del out
        with stages.stage("timing", what):
            result, clocks_before, clocks_after, note = _time(comp, variant, point, geometry, backend, timing_conf,
                                                              inputs, launch, ref, row["chain"], streams)
    except Exception as exc:  # a broken variant is a failed row, never a crashed sweep
        first = sweep.first_error_line(exc)
        if sweep.is_out_of_memory(exc):  # the point does not fit this device: not the variant's fault
            row.update(status="skipped", reason=f"out of memory ({backend.name}): {type(exc).__name__}: {first}"[:500])
            log.warning("%s/%s skipped at %s: out of memory", comp.name, variant.name, point)
            if shared is not None:  # free what the job's cache holds before the next variant tries
                shared.clear()
            return row
        row.update(status="failed", reason=f"{type(exc).__name__}: {first}"[:500])
        # one line in the sweep's log (the row has the reason); the traceback at debug level
        log.warning("%s/%s failed at %s: %s", comp.name, variant.name, point, row["reason"])
        log.debug("%s/%s traceback", comp.name, variant.name, exc_info=True)
        return row
    ms = result.ms_p50
    row.update(
        ms_p50=ms, ms_p20=result.ms_p20, ms_p80=result.ms_p80, ms_min=result.ms_min, n=result.n,
        spread=result.spread, noisy=result.noisy, stop_reason=result.stop_reason,
        clock=result.clock, cache=result.cache, graph=result.graph, chain=result.chain,
        gbps=row["bytes"] / (ms * 1e-3) / 1e9 if ms > 0 else np.nan,
        gflops=row["flops"] / (ms * 1e-3) / 1e9 if ms > 0 else np.nan,
        ms_all_layers=ms * row["layers"],
        sm_clock_mhz_before=clocks_before.get("sm_clock_mhz"), sm_clock_mhz_after=clocks_after.get("sm_clock_mhz"),
        mem_clock_mhz_before=clocks_before.get("mem_clock_mhz"), mem_clock_mhz_after=clocks_after.get("mem_clock_mhz"),
        throttle_before=clocks_before.get("throttle_reasons"), throttle_after=clocks_after.get("throttle_reasons"),
    )
    if roofline:
        row["roofline_gbps"] = roofline["gbps"]
        row["roofline_fraction"] = row["gbps"] / roofline["gbps"]
    # a launch may say how it ran (the config a peer ran, say): kept with the row
    reasons = [r for r in (note, launch.note) if r]
    slowed = provenance.slowdowns(row["throttle_before"], row["throttle_after"])
    row["throttled"] = ",".join(slowed)
    if slowed:
        reasons.append(f"throttled: the GPU reported {', '.join(slowed)} around the timing")
    if result.noisy and result.n < timing_conf.min_reps:
        reasons.append(f"noisy: only {result.n} repetitions < min_reps {timing_conf.min_reps} ({result.stop_reason})")
    elif result.noisy:
        reasons.append(f"noisy: spread {result.spread:.1%} > {timing_conf.max_noise:.0%} ({result.stop_reason})")
    row["reason"] = "; ".join(reasons)
    return row


def chain_length(timing_conf, comp, geometry: Geometry) -> int:
    """Launches per timed sample: ``timing.chain``, or the component's layers per decode step for 0."""
    n = int(getattr(timing_conf, "chain", 1))
    return int(comp.layers(geometry)) if n == 0 else n


def replay(launches: Sequence, backend, use_graph: bool) -> Callable[[], None]:
    """One timed sample: ``launches`` (one variant, each on its own buffers) enqueued back to back.

    With ``use_graph`` they become ONE CUDA graph, so a chain pays graph-internal launch gaps, as a
    decode step captured whole does, not one host launch each. A launch class that captures itself
    (``Launch.captures_itself``: fla records through torch's graph API) does so; otherwise the
    backend captures the class's ``run_many`` step."""
    kind = type(launches[0])
    if use_graph and kind.captures_itself:
        return kind.capture_many(launches)
    run = kind.run_many(launches)
    return backend.capture(run) if use_graph else run


def check_replay(comp, point, group: Sequence, step: Callable[[], None], ref: dict, streams=None) -> None:
    """What is timed must be correct too: reset every launch of ``group``, run the timed ``step``
    once, and compare the first, second and last launch's outputs with the reference (each must
    have advanced exactly one step on its own buffers). Raises on a mismatch."""
    for ln in group:
        ln.poison()
    step()
    for i in sorted({0, min(1, len(group) - 1), len(group) - 1}):
        bad = [c for c in checked(comp, point, group[i].outputs(), ref, streams) if not c.ok]
        if bad:
            raise RuntimeError(f"timed replay, launch {i + 1} of {len(group)}: "
                               + "; ".join(c.describe() for c in bad))


def _time(comp, variant, point, geometry, backend, timing_conf, inputs, launch, ref, chain: int, streams=None):
    """Time one verified launch; returns (result, clocks before, clocks after, note).

    With a chain of N > 1, N - 1 more launches are built from the same inputs (each with its own
    device buffers: N layers' states, as one decode step holds them) and every sample runs all N;
    the result is per launch. Whatever differs from the launch ``measure`` verified (a graph, a
    chain) is replayed once and checked before it is timed."""
    cpu = backend.name == "cpu"
    footprint = comp.footprint_bytes(geometry, point) * chain
    cache = "host" if cpu else timing.choose_cache_mode(timing_conf.cache, footprint, backend.l2_bytes())
    sets = timing.rotation_sets(footprint, backend.l2_bytes()) if cache == "rotate" else 1
    launches = [launch] + [variant.build(geometry, point, inputs, backend) for _ in range(sets * chain - 1)]
    groups = [launches[i * chain:(i + 1) * chain] for i in range(sets)]
    use_graph = bool(timing_conf.graph) and not cpu  # the host clock times plain calls
    note = ""
    try:
        steps = [replay(group, backend, use_graph) for group in groups]
    except Exception as exc:  # say so in the row (graph=False and a reason) rather than fail the point
        note = f"graph capture failed ({type(exc).__name__}: {str(exc).strip()[:200]}); timed as plain launches"
        log.warning("%s: %s", variant.name, note)
        use_graph = False
        steps = [replay(group, backend, False) for group in groups]
    if use_graph or chain > 1:
        check_replay(comp, point, groups[0], steps[0], ref, streams)
    if cpu:
        return timing.per_launch(timing.time_host(steps[0], timing_conf), chain), {}, {}, note
    timing_conf = _with_timing(timing_conf, graph=use_graph)
    device = getattr(backend, "device_id", 0)
    before = provenance.clocks(device)
    result = timing.time_cuda(steps, backend, timing_conf, cache)
    after = provenance.clocks(device)
    return timing.per_launch(result, chain), before, after, note


def _with_timing(conf, **changes):
    """A copy of a timing config (DictConfig or namespace) with ``changes`` applied; the fields
    come from the schema, so a new timing field is carried along."""
    from types import SimpleNamespace

    from harness.config import TimingConf

    values = {f.name: getattr(conf, f.name, f.default) for f in dataclasses.fields(TimingConf)}
    values.update(changes)
    return SimpleNamespace(**values)


def selected_variants(comp, backend_name: str, variant: str, variants: Sequence[str] = ()) -> list:
    """The job's variants on this backend: ``variants`` in their order when given, else one
    ``variant`` or all of them."""
    chosen = [v for v in comp.variants if v.backend == backend_name]
    if variants:
        by_name = {v.name: v for v in chosen}
        return [by_name[n] for n in variants if n in by_name]
    if variant != "all":
        chosen = [v for v in chosen if v.name == variant]
    return chosen


def run_job(cfg, ctx: JobContext) -> list[dict[str, Any]]:
    """Validate, measure every selected variant at the job's point, store the rows atomically."""
    geometry = load_fuel(_fuel_path(cfg.fuel))
    validate(cfg, geometry)
    comp = registry.get(cfg.component.name)
    key = sweep.job_key(cfg)
    first, place = sweep.repeated_job(ctx.sweep_dir, int(ctx.job)) if str(ctx.job).isdigit() else (None, 0)
    if first is not None:
        unread = sorted(set(registry.axes()) - set(comp.axis_names) & set(cfg.keys()))
        log.info("job %s repeats job %d's point (%s reads none of %s): not run", ctx.job, first, comp.name,
                 ", ".join(unread) or "the swept keys")
        return []
    if not sweep.forced() and sweep.stored_job(ctx.job_dir, key):
        log.info("job %s: stored already under this config, sources and commit (--force re-runs it)", ctx.job)
        return store.read_job_rows(ctx.job_dir)
    line = sweep.progress_line(place) if str(ctx.job).isdigit() else ""
    if line:
        log.info("%s: %s", line, " ".join(ctx.overrides))
    backend = backends.get(cfg.backend.name, cfg.backend.device)
    prov = sweep_provenance(ctx, backend, geometry)
    point = point_of(cfg, comp, geometry)
    wanted = list(getattr(cfg, "variants", None) or [])
    chosen = selected_variants(comp, backend.name, cfg.variant, wanted)
    # A job whose every variant will be skipped does not pay for the sweep's copy roofline.
    runnable = [v for v in chosen if _may_run(comp, v, point, geometry, backend)]
    roof = sweep_roofline(ctx, backend, geometry, cfg.timing) if runnable else store.read_roofline(ctx.sweep_dir)
    where = placement.placement()
    where_line = placement.describe(where)
    rows = []
    shared: dict = {}
    started, started_unix = time.perf_counter(), time.time()
    for i, variant in enumerate(chosen, 1):
        row = measure(comp, variant, point, geometry, backend, cfg.timing, cfg.seed, roof, shared)
        row.update(sweep=cfg.sweep, job=ctx.job, device=prov.get("device"), placement=where_line)
        rows.append(row)
        log.info("[%d/%d] %s", i, len(chosen), describe_row(row, backend.label))
    if not chosen:
        row = _base_row(comp, registry.Variant("none", backend.name, None, ""), point, geometry, backend)
        row.update(sweep=cfg.sweep, job=ctx.job, device=prov.get("device"), placement=where_line, status="skipped",
                   reason=f"component {comp.name} has no variant {wanted if wanted else cfg.variant!r} "
                          f"on backend {backend.name}")
        rows.append(row)
    meta = {
        "sweep": cfg.sweep, "job": ctx.job, "overrides": ctx.overrides, "point": point,
        "component": comp.name, "backend": backend.name, "seconds": round(time.perf_counter() - started, 3),
        "provenance": prov, "roofline": roof, "claim": str(getattr(cfg, "claim", "") or ""),
        "job_key": key, "placement": where, "started_unix": round(started_unix, 3),
        "claims": verdicts.check_claims(getattr(cfg, "claims", None), geometry),
        "reopen_if": [str(t) for t in (getattr(cfg, "reopen_if", None) or [])],
        "next_steps": [str(t) for t in (getattr(cfg, "next_steps", None) or [])],
        "step_budget": str(getattr(cfg, "step_budget", "") or ""),
    }
    store.write_job(ctx.job_dir, rows, meta)
    return rows


def describe_row(row: dict[str, Any], label: str) -> str:
    head = f"{row['component']}/{row['variant']}"
    if row["status"] != "ok":
        return f"{head}: {row['status']} - {row['reason']}"
    frac = row.get("roofline_fraction")
    frac_s = f" {frac:6.1%} of roofline" if frac == frac and frac is not None else ""
    chain = f" (x{row['chain']} per sample)" if row.get("chain", 1) > 1 else ""
    return (f"{head}: {row['ms_p50'] * 1e3:9.2f} us{chain}  {row['gbps']:8.1f} GB/s{frac_s}  "
            f"rel_err {row['rel_err']:.2e}  n={row['n']}{' NOISY' if row['noisy'] else ''}  [{label}]")
