"""Per-CTA timeline of one KDA decode step for ring variants: where a launch's microseconds go.

Ring variants: kda_decode's RING_CONFIGS and the ring with the short convolution fused
(kda_decode_conv's PROBED); one run takes variants of one component.

    python3 tools/kda_timeline.py ring32k_reread bulk32k_early --point M=32 --point state_dtype=bf16 \
        --out $OUT/timeline
    python3 tools/kda_timeline.py bulk32k_early_pdl --chain 4 --point M=32 --out $OUT/timeline_chain
    python3 tools/kda_timeline.py --replot DIR     # redraw DIR/timeline.png from the CSVs a run saved there, no GPU

Builds the chosen variants' design files with -DKDA_TIMELINE (probes that a normal build compiles to
nothing) through the sweep's own launcher, so grid, shared memory and inputs are the swept ones.
Each launch follows an L2 flush, as in the sweeps, but is a plain launch (not a graph replay); the
last of ``--launches`` is kept and its event-timed duration reported. ``--chain N`` records N
launches on their own buffers as the sweeps' ``timing.chain`` runs them (one graph, programmatic
dependent launches for the _pdl variants), each CTA tagged with its layer, and adds a per-layer
table (``<variant>_chain.csv``: when each layer starts, issues its first stores and ends, and how
long no layer issued stores around each boundary). Prints a summary per variant
(kernels/kda_decode/timeline.py says what each column means) and writes ctas/tiles CSVs and a plot.
Also times an empty kernel the way the sweeps time a step (graph replay after a flush): the floor
that launch and event overhead put under every measured time.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import pandas as pd

from harness import registry, timing
from harness.backends import CudaBackend
from harness.config import TimingConf
from harness.fuel import load_fuel
from harness.runner import replay
from kernels.kda_decode import timeline
from kernels.kda_decode import conv_variants
from kernels.kda_decode.variants import RING_CONFIGS, design_source

TIMELINE_OPTION = "-DKDA_TIMELINE"
# Every variant built on ring<> (the ones with probes), and the component that declares it.
PROBED = {**{name: "kda_decode" for name in RING_CONFIGS},
          **{name: "kda_decode_conv" for name in conv_variants.PROBED}}


class TimelineBackend(CudaBackend):
    """The CUDA backend, compiling every module with the timeline probes on."""

    def module(self, source, options=()):
        return super().module(source, (*options, TIMELINE_OPTION))


def launch_floor_ms(backend: CudaBackend) -> float:
    """p50 of an empty kernel timed like a sweep step (graph replay, L2 flushed before each)."""
    empty = backend.cp.RawModule(code='extern "C" __global__ void attnbench_empty() {}').get_function(
        "attnbench_empty")
    step = backend.capture(lambda: backend.launch(empty, (1,), (32,), ()))
    conf = TimingConf(warmup=10, min_reps=200, min_time_ms=0.0, graph=True)
    return timing.time_cuda([step], backend, conf, "flush").ms_p50


def record(backend: TimelineBackend, chain: list, launches: int, source) -> tuple[np.ndarray, float]:
    """Raw probe words and the event-timed ms of the last of ``launches`` flushed samples; a
    sample is one launch, or the whole ``chain`` as one graph (its layers tagged by state).
    ``source``: the design file the chain's kernels came from. Every design file's module holds its
    own probe buffers; the backend caches a module by its files and options, so this is the module
    the launcher got its kernel from."""
    cp = backend.cp
    module = backend.module(source)
    words = cp.ndarray((timeline.TL_CAPACITY,), dtype=cp.uint64, memptr=module.get_global("kda_timeline"))
    layer_of = cp.ndarray((timeline.TL_MAX_LAYERS,), dtype=cp.uint64, memptr=module.get_global("kda_tl_states"))
    table = np.zeros(timeline.TL_MAX_LAYERS, dtype=np.uint64)
    if len(chain) > 1:
        table[: len(chain)] = [launch.dev["state"].data.ptr for launch in chain]
    layer_of.set(table)
    step = chain[0] if len(chain) == 1 else replay(chain, backend, True)
    flush = timing.flusher(backend)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(launches):
        for launch in chain:
            launch.poison()
        with backend.stream:
            words.fill(0)
        flush()
        start.record(backend.stream)
        step()
        end.record(backend.stream)
        end.synchronize()
    return cp.asnumpy(words), cp.cuda.get_elapsed_time(start, end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="*", help=f"ring variants: {sorted(PROBED)}")
    ap.add_argument("--replot", type=pathlib.Path, metavar="DIR",
                    help="redraw DIR/timeline.png from the CSVs a run saved there, without a GPU")
    ap.add_argument("--point", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--chain", type=int, default=1, metavar="N",
                    help="layers recorded together, each on its own buffers (default 1: one launch)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("timeline"))
    args = ap.parse_args()
    if args.replot:
        if args.variants or args.point:
            raise SystemExit("--replot: takes only the folder; variants and --point come from its CSVs")
        timeline.plot(timeline.load(args.replot), args.replot / "timeline.png",
                      title=timeline.title_of(args.replot))
        print(f"timeline: {args.replot / 'timeline.png'}")
        return
    if not args.variants:
        raise SystemExit(f"variants: name at least one of {sorted(PROBED)} (or use --replot DIR)")
    for name in args.variants:
        if name not in PROBED:
            raise SystemExit(f"variant: {name!r} has no timeline probes; allowed: {sorted(PROBED)}")
    if len({PROBED[name] for name in args.variants}) > 1:
        raise SystemExit(f"variants: one component per run; {args.variants} span "
                         f"{sorted({PROBED[name] for name in args.variants})}")

    if not 1 <= args.chain <= timeline.TL_MAX_LAYERS:
        raise SystemExit(f"--chain: {args.chain} is out of range; allowed: 1..{timeline.TL_MAX_LAYERS}")
    comp = registry.get(PROBED[args.variants[0]])
    try:
        point = registry.parse_point(comp, args.point)
    except ValueError as exc:
        raise SystemExit(str(exc))
    geometry = load_fuel()
    backend = TimelineBackend()
    inputs = comp.make_inputs(geometry, point, np.random.default_rng(0))
    args.out.mkdir(parents=True, exist_ok=True)
    floor = launch_floor_ms(backend)
    print(f"launch floor (empty kernel, graph replay after a flush): {floor * 1e3:.2f} µs")

    results, rows = {}, []
    for name in args.variants:
        chain = [comp.variant(name).build(geometry, point, inputs, backend) for _ in range(args.chain)]
        grid = chain[0].grid
        if args.chain * grid * timeline.TL_SLOTS > timeline.TL_CAPACITY:
            raise SystemExit(f"--chain: {args.chain} layers of {grid} CTAs need "
                             f"{args.chain * grid * timeline.TL_SLOTS} probe words; the buffer holds "
                             f"{timeline.TL_CAPACITY} (at most {timeline.TL_CAPACITY // (grid * timeline.TL_SLOTS)} layers)")
        raw, event_ms = record(backend, chain, args.launches, design_source(name))
        ctas, tiles = timeline.parse(raw, grid, args.chain)
        summary = timeline.summarize(ctas, tiles)
        results[name] = (ctas, tiles)
        rows.append({"variant": name, "point": " ".join(f"{k}={v}" for k, v in point.items()),
                     "grid": grid, "chain": args.chain, "floor_us": floor * 1e3,
                     "event_us": event_ms * 1e3, "event_per_layer_us": event_ms * 1e3 / args.chain,
                     **summary})
        timeline.save(args.out, name, ctas, tiles)
        if args.chain > 1:
            per_layer = timeline.chain_summary(ctas, tiles)
            per_layer.to_csv(args.out / f"{name}_chain.csv", index=False)
            print(f"{name}, {args.chain} layers (µs from the first entry):")
            print(per_layer.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "summary.csv", index=False)
    timeline.plot(results, args.out / "timeline.png",
                  title=timeline.title_of(args.out))
    pd.set_option("display.width", 250)
    print(f"point {point}; floor {floor * 1e3:.2f} µs")
    print(table.T.to_string(float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
