"""Launch chosen variants of one component at one point (once each by default), for a profiler.

    ncu --clock-control none -k regex:kda_ python3 tools/profile_variants.py kda_decode \
        ring32k_reread pipelined_cpasync --point M=32 --point state_dtype=bf16

Builds each variant through the launcher the sweeps use, so the profiled kernel is the swept one
(same grid, shared memory and inputs). Times nothing itself: the profiler does.
"""

from __future__ import annotations

import argparse

from harness import registry, runner
from harness.backends import CudaBackend
from harness.fuel import load_fuel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("component")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--point", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--launches", type=int, default=1)
    args = ap.parse_args()

    comp = registry.get(args.component)
    try:
        point = registry.parse_point(comp, args.point)
    except ValueError as exc:
        raise SystemExit(str(exc))
    geometry = load_fuel()
    backend = CudaBackend()
    # the inputs as a sweep's job builds them (host arrays and, for components with resident inputs
    # such as sparse_mla's arena, the device-built ones), without the float64 reference
    inputs = runner.make_inputs(comp, geometry, point, backend, 0)
    by_name = {v.name: v for v in comp.variants if v.backend == "cuda"}
    for name in args.variants:
        if name not in by_name:
            raise SystemExit(f"variant: unknown value {name!r}; allowed: {sorted(by_name)}")
        launch = by_name[name].build(geometry, point, inputs, backend)
        for _ in range(args.launches):
            launch()
        backend.stream.synchronize()
        print(f"{args.component}/{name} {point}: {args.launches} launch(es)")


if __name__ == "__main__":
    main()
