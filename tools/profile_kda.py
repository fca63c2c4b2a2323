"""Launch chosen KDA decode variants a few times each at one point, for a profiler to capture.

    ncu --clock-control none -k regex:kda_ring python3 tools/profile_kda.py --M 32 --dtype bf16 \
        ring32k_reread pipelined_cpasync

Builds each variant through the same launcher the sweeps use (kernels/kda_decode/variants.py), so
the profiled kernel is the swept one: same grid, shared memory and inputs. Times nothing itself.
"""

from __future__ import annotations

import argparse

import numpy as np

from harness import registry
from harness.backends import CudaBackend
from harness.fuel import load_fuel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--M", type=int, default=32)
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()

    comp = registry.get("kda_decode")
    geometry = load_fuel()
    backend = CudaBackend()
    point = {"M": args.M, "state_dtype": args.dtype}
    inputs = comp.make_inputs(geometry, point, np.random.default_rng(0))
    by_name = {v.name: v for v in comp.variants if v.backend == "cuda"}
    for name in args.variants:
        if name not in by_name:
            raise SystemExit(f"variant: unknown value {name!r}; allowed: {sorted(by_name)}")
        launch = by_name[name].build(geometry, point, inputs, backend)
        for _ in range(args.launches):
            launch()
        backend.stream.synchronize()
        print(f"{name} M={args.M} {args.dtype}: {args.launches} launches")


if __name__ == "__main__":
    main()
