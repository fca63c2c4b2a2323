"""Per-CTA, per-phase timeline of a probed kernel family: where a launch's microseconds go.

    python3 tools/cta_timeline.py dsa_topk radix_union radix_union_own --point M=32 \
        --point context=262144 --point pooling=pooled --point topk=2048 --out $OUT/topk_tl
    python3 tools/cta_timeline.py sparse_mla split_wgmma_ws_async_1wave --point M=32 \
        --point context=262144 --point selection=grouped --out $OUT/smla_tl

The first argument is a component with probes (FAMILIES below: its module declares the probe layout,
harness/cta_probes.py reads it). Each ``--point KEY=V1,V2`` gives an axis its values (the points are
their product; an axis not given takes its default). Every variant whose source carries the probes
(the family's mark macro) is built with the layout's option through its own launcher (the swept
grid, shared memory and inputs) and launched ``--launches`` times in two modes:
  flush   the L2 flushed before the launch, as the sweeps do (code and data cold in L2);
  primed  the L2 flushed, then the same step once on its own copy of the inputs, then the timed
          launch: its data still cold, but its code, launch shape and shared-memory carve-out warm.
The event-timed duration of the whole step (median of the launches; every kernel of it) is set
against the probes of the probed kernel's last launch: the span from the first CTA's entry to the
last CTA's exit, per phase the median and max over CTAs, the family's named intervals and its
counters (the family's module says what each mark ends and what each counter counts). Also times,
the way the sweep times a step (eager launch between CUDA events, L2 flushed before each), an empty
kernel of one CTA (the floor under every measured time) and one of each variant's launch shape
(grid, block, dynamic shared memory, the kernel's own cluster width): what the launch itself costs.
Writes summary.csv, phases.csv, intervals.csv, counters.csv, a marks CSV per run and timeline.png
under --out.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import pathlib

import numpy as np
import pandas as pd

from harness import cta_probes, registry, runner, timing
from harness.backends import CudaBackend
from harness.config import TimingConf
from harness.fuel import load_fuel
from harness.sources import compiled_files

# component -> the module that declares its probes (COMPONENT, MARK_MACRO, LAYOUT)
FAMILIES = {"dsa_topk": "kernels.dsa_indexer.topk_timeline", "sparse_mla": "kernels.sparse_mla.timeline"}
MODES = ("flush", "primed")


def family(component: str):
    """The probe module of ``component``; ValueError (one line) naming the allowed ones."""
    if component not in FAMILIES:
        raise ValueError(f"component: {component!r} has no timeline probes; allowed: {sorted(FAMILIES)}")
    return importlib.import_module(FAMILIES[component])


def carries_probes(path: pathlib.Path, fam) -> bool:
    """Whether the .cu ``path`` compiles the family's probes: its mark macro in the source or in a
    local header it includes (topk_union.cu's marks are in topk_union.cuh)."""
    return any(fam.MARK_MACRO in f.read_text() for f in compiled_files(path))


def probed_variants(comp, fam) -> dict[str, pathlib.Path]:
    """{variant: its .cu source} for every CUDA variant whose source carries the family's probes."""
    here = pathlib.Path(fam.__file__).parent
    out = {}
    for v in comp.variants:
        for name in v.sources:
            path = here / name
            if v.backend == "cuda" and path.suffix == ".cu" and carries_probes(path, fam):
                out[v.name] = path
    return out


def expand_points(comp, geometry, items: list[str]) -> list[dict]:
    """The points of ``--point KEY=V1,V2 ...``: the product of every axis' values, in the order
    given; an axis not given takes its default. Raises ValueError (one line) on a bad item."""
    by_name = {a.name: a for a in comp.axes}
    values: dict[str, list[str]] = {}
    for item in items:
        key, sep, vals = item.partition("=")
        if not sep or key not in by_name or not vals:
            raise ValueError(f"--point: {item!r} must be KEY=V1[,V2...] with KEY one of {sorted(by_name)}")
        if key in values:
            raise ValueError(f"--point: {key} given twice")
        values[key] = vals.split(",")
    for a in comp.axes:
        if a.name not in values:
            values[a.name] = [str(a.default if a.default is not None else a.resolve(geometry))]
    names = [a.name for a in comp.axes]
    return [registry.parse_point(comp, [f"{n}={v}" for n, v in zip(names, combo)])
            for combo in itertools.product(*(values[n] for n in names))]


def point_label(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def result_table(rows: list[dict]) -> pd.DataFrame:
    """summary.csv: one row per (variant, point, mode) with the event-timed µs, the probes' span and
    what is left outside it (event - span: the launch, the step's other kernels such as sparse MLA's
    combine, and the event pair around them)."""
    df = pd.DataFrame(rows)
    df["outside_span_us"] = df.event_us - df.span_us
    return df


class TimelineBackend(CudaBackend):
    """The CUDA backend, compiling every module with the family's probes on; ``compiled`` keeps the
    last module built from each source, so the tool reads the probe buffer of the very module the
    variant's launcher compiled (with its own options, such as sm_90a's)."""

    def __init__(self, option: str):
        super().__init__()
        self.option = option
        self.compiled: dict[pathlib.Path, object] = {}

    def module(self, source, options=()):
        mod = super().module(source, (*options, self.option))
        self.compiled[pathlib.Path(source).resolve()] = mod
        return mod


def _flushed_floor_us(backend, launch) -> float:
    """p50 of ``launch`` timed as a sweep times a step (eager, between events, L2 flushed before)."""
    conf = TimingConf(warmup=5, min_reps=100, max_reps=200, min_time_ms=0.0, graph=False)
    return timing.time_cuda([launch], backend, conf, "flush").ms_p50 * 1e3


# CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH (cuda.h): a kernel's compile-time __cluster_dims__ x, 0 if none
_REQUIRED_CLUSTER_WIDTH = 11


def cluster_width(backend, fn) -> int:
    """The compile-time cluster width of kernel ``fn`` (1 without one), asked of the driver; 1, said
    on stdout, where this CuPy cannot ask (the shape floor is then that of plain CTAs)."""
    try:
        function = getattr(fn, "kernel", fn)  # a RawKernel holds its cupy.cuda.Function as .kernel
        return max(1, int(backend.cp.cuda.driver.funcGetAttribute(_REQUIRED_CLUSTER_WIDTH, function.ptr)))
    except Exception as exc:  # an older CuPy without the binding, or a driver that refuses the attribute
        print(f"cluster width unknown ({type(exc).__name__}: {exc}); the shape floor uses plain CTAs")
        return 1


def empty_floor_us(backend, grid=(1,), threads=32, smem=0, cluster=1) -> float:
    """An empty kernel of this launch shape: grid, threads, dynamic shared memory and clusters of
    ``cluster`` CTAs (the probed kernel's own, ``cluster_width``)."""
    dims = f"__cluster_dims__({cluster}, 1, 1) " if cluster > 1 else ""
    fn = backend.cp.RawModule(code=f'extern "C" __global__ void {dims}cta_tl_empty() {{}}',
                              options=("-std=c++17",)).get_function("cta_tl_empty")
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    return _flushed_floor_us(backend, lambda: fn(tuple(grid), (threads,), (), shared_mem=smem, stream=backend.stream))


def grid_buffers(cp, module, probes) -> dict:
    """{probe: its device words} for each of the family's grid probes whose buffer the module holds
    (a module without the kernel has no such symbol)."""
    out = {}
    for probe in probes:
        try:
            ptr = module.get_global(probe.symbol)
        except Exception:  # CuPy raises its driver error for a symbol the module lacks
            continue
        out[probe] = cp.ndarray((probe.words,), dtype=cp.uint64, memptr=ptr)
    return out


def grid_probe_line(probe, read: dict, span_us: float) -> str:
    """One line on a grid probe's reading against the per-CTA span (first entry to last exit, µs):
    when its first block entered, the gap from the last CTA's exit to its first block past the wait,
    and its own span to its last exit; "" where the step launched no such kernel."""
    k = probe.kernel
    if f"{k}_blocks" not in read:
        return ""
    first_in, waited, last_out = (read[f"{k}_{probe.marks[0]}_first_us"], read[f"{k}_{probe.marks[1]}_first_us"],
                                  read[f"{k}_{probe.marks[-1]}_last_us"])
    return (f"  {k}: {int(read[f'{k}_blocks'])} blocks; first in at {first_in:.2f} µs, first past its wait at "
            f"{waited:.2f} ({waited - span_us:+.2f} after the last CTA's exit), last out at {last_out:.2f} "
            f"({last_out - waited:.2f} from the first past its wait)")


def record(backend, layout, step, primer, source, launches: int, mode: str, n_ctas: int,
           grid_probes=()) -> tuple[np.ndarray, float, dict]:
    """Raw probe words of the last of ``launches`` samples, the median event-timed µs of the whole
    step, and the grid probes' reading of that sample (their columns; {} where the step launched no
    probed later kernel); a sample is a flush, in ``primed`` mode the primer step, then the timed step
    between two events (the grid buffers reset after the primer, so they hold the timed step's)."""
    cp = backend.cp
    module = backend.compiled[pathlib.Path(source).resolve()]
    words = cp.ndarray((layout.capacity,), dtype=cp.uint64, memptr=module.get_global(layout.symbol))
    grids = grid_buffers(cp, module, grid_probes)
    flush = timing.flusher(backend)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(launches):
        step.poison()
        flush()
        if mode == "primed":
            primer()
        with backend.stream:
            words.fill(0)
            for probe, buf in grids.items():
                buf.set(probe.fresh(), stream=backend.stream)
        start.record(backend.stream)
        step()
        end.record(backend.stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    raw = cp.asnumpy(words)
    read: dict = {}
    if grids:
        t0 = layout.entry_ns(raw, n_ctas)
        for probe, buf in grids.items():
            read.update(probe.read(cp.asnumpy(buf), t0))
    return raw, float(np.median(times)), read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("component", help=f"one of {sorted(FAMILIES)}")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--point", action="append", default=[], metavar="KEY=V1[,V2]")
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("cta_timeline"))
    args = ap.parse_args()
    try:
        fam = family(args.component)
    except ValueError as exc:
        raise SystemExit(str(exc))
    layout = fam.LAYOUT
    comp = registry.get(fam.COMPONENT)
    probed = probed_variants(comp, fam)
    for name in args.variants:
        if name not in probed:
            raise SystemExit(f"variant: {name!r} has no timeline probes; allowed: {sorted(probed)}")
    geometry = load_fuel()
    try:
        points = expand_points(comp, geometry, args.point)
    except ValueError as exc:
        raise SystemExit(str(exc))
    backend = TimelineBackend(layout.option)
    args.out.mkdir(parents=True, exist_ok=True)
    floor = empty_floor_us(backend)
    print(f"launch floor (empty kernel, 1 CTA, eager between events after a flush): {floor:.2f} µs")

    rows, tables, intervals, counters, results = [], [], [], [], {}
    for p_i, point in enumerate(points):
        inputs = runner.make_inputs(comp, geometry, point, backend, p_i)
        for name in args.variants:
            reason = comp.variant(name).supports(geometry, point)
            if reason:
                print(f"{name} at {point_label(point)}: skipped: {reason}")
                continue
            step = comp.variant(name).build(geometry, point, inputs, backend)
            primer = comp.variant(name).build(geometry, point, inputs, backend)
            k0 = step.kernels[0]
            grid = k0.grid if isinstance(k0.grid, tuple) else (k0.grid,)
            n_ctas = int(np.prod(grid))
            if n_ctas * layout.slots > layout.capacity:
                raise SystemExit(f"{name}: {n_ctas} CTAs need {n_ctas * layout.slots} probe words; the buffer "
                                 f"holds {layout.capacity}")
            shape_floor = empty_floor_us(backend, grid, k0.threads, k0.smem, cluster_width(backend, k0.fn))
            for mode in MODES:
                raw, event_us, later = record(backend, layout, step, primer, probed[name], args.launches, mode,
                                              n_ctas, getattr(fam, "GRID_PROBES", ()))
                marks = layout.parse(raw, n_ctas)
                run = f"{name}_{p_i}_{mode}"
                cta_probes.save(args.out, run, marks)
                label = dict(variant=name, point=point_label(point), mode=mode)
                results[f"{name} | {point_label(point)} | {mode}"] = marks
                table = layout.phase_table(marks)
                tables.append(table.assign(**label))
                between = layout.interval_table(marks)
                intervals.append(between.assign(**label))
                rate = layout.cycles_per_us(marks)
                count = layout.counter_table(raw, n_ctas)
                if len(count.columns):
                    counters.append(count.reset_index().assign(cycles_per_us=rate, **label))
                rows.append({**label, "grid": str(grid), "threads": k0.threads, "smem": k0.smem, "note": step.note,
                             "floor_us": floor, "shape_floor_us": shape_floor, "event_us": event_us,
                             **layout.span(marks), "cycles_per_us": rate, **later})
                print(f"\n{name} | {point_label(point)} | {mode}: event {event_us:.2f} µs, "
                      f"span {rows[-1]['span_us']:.2f} µs, empty kernel of this shape {shape_floor:.2f} µs")
                for probe in getattr(fam, "GRID_PROBES", ()):
                    line = grid_probe_line(probe, later, rows[-1]["span_us"])
                    if line:
                        print(line)
                print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
                if len(between):
                    print(between.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
                if len(count.columns):
                    print("counters, median over CTAs (cycles / count; µs at the probes' clock):")
                    for c in count.columns:
                        if count[c].isna().all():
                            print(f"  {c}: not counted by this form")
                            continue
                        v = float(count[c].median())
                        print(f"  {c}: {v:.0f}" + (f" ({v / rate:.2f} µs)" if c.endswith("_cycles") else ""))
    summary = result_table(rows)
    summary.to_csv(args.out / "summary.csv", index=False)
    pd.concat(tables).to_csv(args.out / "phases.csv", index=False)
    pd.concat(intervals).to_csv(args.out / "intervals.csv", index=False)
    if counters:
        pd.concat(counters).to_csv(args.out / "counters.csv", index=False)
    layout.plot(results, args.out / "timeline.png", title=f"{fam.COMPONENT} timeline")
    pd.set_option("display.width", 250)
    print(f"\nfloor {floor:.2f} µs\n" + summary.drop(columns=["note"]).to_string(float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
