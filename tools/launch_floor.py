"""Price what a timed launch pays for the SM's shared-memory configuration, beside the kernels it times.

    python3 tools/launch_floor.py sparse_mla:split_wgmma_1wave:M=32,context=262144,... [...]

Each target (an empty kernel, or a component's variant at a point, built as the sweeps build it)
is timed with CUDA events around one launch, the L2 flushed before each sample as the harness
does, in three orders:
  flush        flush, start, launch, end                      (the harness's cold-cache timing)
  flush+big    flush, an empty kernel of 227 KiB dynamic shared memory, start, launch, end
  flush+small  flush, an empty kernel of no shared memory, start, launch, end
The flush kernel uses no shared memory, so a kernel that needs most of the SM's 228 KiB may pay a
change of the L1 / shared-memory split inside its timed span; `flush+big` leaves the SMs split for
shared memory before the start event, `flush+small` for L1. The difference between the orders is
that cost, measured per target (the empty kernels give the floor of each order).

    python3 tools/launch_floor.py --split dsa_layer:chained:M=32,context=262144,... [...]

With --split, each target must build a multi-kernel step (harness.cuda.KernelStep): its kernels
are launched as the step launches them, the L2 flushed before the step, with an event between
every two kernels, so each kernel's span inside the step is measured; then each kernel alone after
its own flush (its inputs as the last step left them). A kernel slower inside the step than alone
is what a step pays over the sum of its parts.
"""

from __future__ import annotations

import argparse
import statistics

from harness import registry, runner
from harness.backends import CudaBackend
from harness.fuel import load_fuel
from harness.timing import flusher

EMPTY = r"""
extern "C" __global__ void launch_floor_empty(int* sink) {
    extern __shared__ int dyn[];
    if (threadIdx.x == 1023) { dyn[0] = 1; sink[0] = dyn[0]; }  // threadIdx.x < 128: never
}
"""
BIG_SMEM = 232448  # the opt-in maximum a CTA may have on sm_90


def empty_kernels(backend):
    cp = backend.cp
    kern = cp.RawKernel(EMPTY, "launch_floor_empty")
    kern.max_dynamic_shared_size_bytes = BIG_SMEM
    sink = cp.zeros(1, dtype=cp.int32)
    sms = int(backend.props["multiProcessorCount"])

    def small():
        kern((sms,), (128,), (sink,), shared_mem=0, stream=backend.stream)

    def big():
        kern((sms,), (128,), (sink,), shared_mem=BIG_SMEM, stream=backend.stream)

    return small, big


def time_orders(step, backend, reps: int, small, big) -> dict[str, list[float]]:
    cp = backend.cp
    flush = flusher(backend)
    out = {}
    for order, pre in (("flush", None), ("flush+big", big), ("flush+small", small)):
        samples = []
        for i in range(reps + 5):
            flush()
            if pre:
                pre()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(backend.stream)
            step()
            end.record(backend.stream)
            end.synchronize()
            if i >= 5:
                samples.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        out[order] = samples
    return out


def time_split(step, backend, reps: int) -> tuple[list[list[float]], list[list[float]], list[float]]:
    """``(in_step, alone, whole)``: per kernel of the step its µs between the events around it in a
    flushed step, and alone after its own flush; the whole step's µs. ``reps`` samples each, after
    5 unrecorded ones."""
    cp = backend.cp
    flush = flusher(backend)
    n = len(step.kernels)
    in_step, alone, whole = [[] for _ in range(n)], [[] for _ in range(n)], []
    for r in range(reps + 5):
        flush()
        ev = [cp.cuda.Event() for _ in range(n + 1)]
        ev[0].record(backend.stream)
        for i in range(n):
            step.launch_kernel(i)
            ev[i + 1].record(backend.stream)
        ev[n].synchronize()
        if r >= 5:
            for i in range(n):
                in_step[i].append(cp.cuda.get_elapsed_time(ev[i], ev[i + 1]) * 1e3)
            whole.append(cp.cuda.get_elapsed_time(ev[0], ev[n]) * 1e3)
    for i in range(n):
        for r in range(reps + 5):
            flush()
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(backend.stream)
            step.launch_kernel(i)
            b.record(backend.stream)
            b.synchronize()
            if r >= 5:
                alone[i].append(cp.cuda.get_elapsed_time(a, b) * 1e3)
    return in_step, alone, whole


def split_table(names: list[str], in_step: list[list[float]], alone: list[list[float]], whole: list[float]) -> str:
    """The --split table: one row a kernel (p50 in the step, p50 alone, their difference), then the
    sums and the whole step (µs)."""
    rows = ["| kernel | in the step p50 µs | alone p50 µs | step - alone |", "| --- | --- | --- | --- |"]
    s_in = s_alone = 0.0
    for name, a, b in zip(names, in_step, alone):
        pa, pb = statistics.median(a), statistics.median(b)
        s_in, s_alone = s_in + pa, s_alone + pb
        rows.append(f"| {name} | {pa:.2f} | {pb:.2f} | {pa - pb:+.2f} |")
    rows.append(f"| sum of the kernels | {s_in:.2f} | {s_alone:.2f} | {s_in - s_alone:+.2f} |")
    rows.append(f"| the whole step (first event to last) | {statistics.median(whole):.2f} | | |")
    return "\n".join(rows)


def kernel_names(step) -> list[str]:
    """Each kernel's symbol where its function carries one (CuPy's does not: then its launch shape)."""
    return [getattr(k.fn, "symbol", None) or f"kernel {i}: grid {k.grid}, {k.threads} threads, {k.smem} B dynamic"
            for i, k in enumerate(step.kernels)]


def parse_target(spec: str):
    """``COMPONENT:VARIANT:K=V,K=V`` -> (component, its CUDA variant, the point); a one-line
    ValueError naming the part that is wrong and what is allowed."""
    parts = spec.split(":")
    if len(parts) != 3:
        raise ValueError(f"target {spec!r}: expected COMPONENT:VARIANT:K=V,K=V (every axis of the component)")
    comp_name, variant, point_text = parts
    names = list(registry.components())
    if comp_name not in names:
        raise ValueError(f"component: unknown value {comp_name!r}; allowed: {sorted(names)}")
    comp = registry.get(comp_name)
    by_name = {v.name: v for v in comp.variants if v.backend == "cuda"}
    if variant not in by_name:
        raise ValueError(f"variant: unknown value {variant!r}; allowed: {sorted(by_name)}")
    return comp, by_name[variant], registry.parse_point(comp, point_text.split(","))


def build_target(spec: str, geometry, backend):
    comp, variant, point = parse_target(spec)
    inputs = runner.make_inputs(comp, geometry, point, backend, 0)
    return variant.build(geometry, point, inputs, backend)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", metavar="COMPONENT:VARIANT:K=V,K=V")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--split", action="store_true", help="time each kernel of a multi-kernel step (module docstring)")
    args = ap.parse_args()
    for spec in args.targets:          # every target's spelling checked before the GPU is touched
        try:
            parse_target(spec)
        except ValueError as exc:
            raise SystemExit(str(exc))
    geometry = load_fuel()
    backend = CudaBackend()
    if args.split:
        for spec in args.targets:
            step = build_target(spec, geometry, backend)
            if not hasattr(step, "kernels"):
                raise SystemExit(f"{spec}: --split needs a multi-kernel step (harness.cuda.KernelStep)")
            print(f"{spec}: {getattr(step, 'note', '')}")
            print(split_table(kernel_names(step), *time_split(step, backend, args.reps)), flush=True)
        return
    small, big = empty_kernels(backend)
    targets = [("empty, no shared memory", small), ("empty, 227 KiB shared memory", big)]
    for spec in args.targets:
        try:
            targets.append((spec, build_target(spec, geometry, backend)))
        except Exception as exc:  # one bad target must not lose the others' rows
            print(f"skip {spec}: {type(exc).__name__}: {exc}")
    print("| target | flush p50 µs | flush+big p50 | flush+small p50 | flush - flush+big |")
    print("| --- | --- | --- | --- | --- |")
    for name, step in targets:
        t = time_orders(step, backend, args.reps, small, big)
        p50 = {k: statistics.median(v) for k, v in t.items()}
        print(f"| {name} | {p50['flush']:.2f} | {p50['flush+big']:.2f} | {p50['flush+small']:.2f} | "
              f"{p50['flush'] - p50['flush+big']:+.2f} |", flush=True)


if __name__ == "__main__":
    main()
