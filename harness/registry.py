"""The registry: each kernel family declares one `Component` and its `Variant`s here, once.

The harness (runner, tests, reports) only ever walks this registry, so a new variant is swept,
verified, tested and reported without any harness change. Nothing here knows about one kernel.

A *point* is a plain dict of the axis values that define one shape (``{"M": 32, "state_dtype":
"bf16"}``); a component names the axes it reads in ``axes``. Arrays handed between the pieces are
NumPy on the host; backends move them to the device.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Protocol

import numpy as np

Point = Mapping[str, Any]


class Launch(Protocol):
    """One prepared kernel invocation on a backend, built by `Variant.build`.

    ``poison()`` restores every in-place input to its initial value and fills every output with
    NaN (0xFF bytes for integer outputs), so a launch that skips an element cannot pass.
    ``__call__()`` enqueues exactly one decode step on the backend's stream (no synchronisation).
    ``outputs()`` synchronises and returns the outputs as host arrays keyed like the reference.
    Two optional classmethods shape a chain of launches of one variant (each on its own buffers,
    ``runner.replay``): ``run_many(launches) -> step`` enqueues them back to back (default: their
    plain calls in order), and the harness captures that step as one CUDA graph;
    ``capture_many(launches) -> replay`` replaces that capture (fla records through torch).
    An optional ``note`` string says how the launch ran (the config a peer ran): the row's
    ``reason`` carries it.
    """

    def poison(self) -> None: ...

    def __call__(self) -> None: ...

    def outputs(self) -> dict[str, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class Variant:
    """One implementation of a component on one backend.

    name:     stable identifier used in configs, rows and reports (``lazy_1pass``).
    backend:  ``cuda`` or ``cpu``.
    build:    ``build(geometry, point, inputs, backend) -> Launch``; inputs are host arrays
              shared by every variant of a job: a build copies them, never modifies them.
    why:      one line: what this variant changes and why it is shaped that way.
    supports: ``supports(geometry, point) -> reason | None``; a reason makes a skipped row.
    peer:     a third-party implementation measured side by side (fla), not ours.
    sources:  kernel source files (relative to the component folder); their hash is each row's
              ``source_sha`` (the sweep's provenance hashes every source file too).
    """

    name: str
    backend: str
    build: Callable[..., Launch]
    why: str
    supports: Callable[[Any, Point], str | None] = lambda geometry, point: None
    peer: bool = False
    sources: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Component:
    """A kernel family: the op, its float64 reference, its byte/FLOP counts and its variants.

    axes:        JobConfig keys that define a point for this component.
    layers:      ``layers(geometry) -> int``: how many layers of this kind one decode step runs.
    make_inputs: ``make_inputs(geometry, point, rng) -> dict[str, np.ndarray]`` (fresh, random).
    reference:   ``reference(geometry, point, inputs) -> dict[str, np.ndarray]`` in float64.
    bytes_moved: the fewest bytes the algorithm must move (each input read once, each output
                 written once); every variant is charged the same count so GB/s compare honestly.
    flops:       FLOPs of the algorithm at that point.
    tolerance:   ``tolerance(point, output_name) -> float`` on ||out - ref|| / ||ref||
                 (0.0 means byte-exact).
    footprint:   bytes one step touches, each buffer once (an in-place state counts once, where
                 bytes_moved counts it read and written); sizes the L2 rotation. None: bytes_moved.
    check_point: ``check_point(geometry, point) -> error | None`` for values that are invalid for
                 this component whatever the variant (the one-line config error).
    cpu_max_bytes: the CPU reference backend skips points that move more than this.
    folder:      the component's folder, for hashing sources.
    """

    name: str
    axes: tuple[str, ...]
    layers: Callable[[Any], int]
    make_inputs: Callable[..., dict[str, np.ndarray]]
    reference: Callable[..., dict[str, np.ndarray]]
    bytes_moved: Callable[[Any, Point], int]
    flops: Callable[[Any, Point], int]
    tolerance: Callable[[Point, str], float]
    variants: tuple[Variant, ...]
    summary: str
    check_point: Callable[[Any, Point], str | None] = lambda geometry, point: None
    footprint: Callable[[Any, Point], int] | None = None
    cpu_max_bytes: int = 1 << 30
    folder: str = ""

    def footprint_bytes(self, geometry, point: Point) -> int:
        return int((self.footprint or self.bytes_moved)(geometry, point))

    def variant_names(self, backend: str | None = None) -> list[str]:
        return [v.name for v in self.variants if backend is None or v.backend == backend]

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)


_COMPONENTS: dict[str, Component] = {}


def register(component: Component) -> Component:
    if component.name in _COMPONENTS:
        raise ValueError(f"component {component.name!r} registered twice")
    names = [v.name for v in component.variants]
    if len(set(names)) != len(names):
        raise ValueError(f"component {component.name!r} declares a variant name twice: {names}")
    _COMPONENTS[component.name] = component
    return component


def components() -> dict[str, Component]:
    """All registered components, importing the kernel families on first use."""
    import kernels  # noqa: F401  (importing the package registers every family)

    return dict(_COMPONENTS)


def get(name: str) -> Component:
    comps = components()
    if name not in comps:
        raise KeyError(name)
    return comps[name]


def parse_point(component: Component, items: list[str]) -> dict[str, Any]:
    """A point from ``KEY=VALUE`` strings (command-line tools); every axis of ``component`` must be
    given, and integers are read as integers. Raises ValueError with a one-line message."""
    point: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in component.axes:
            raise ValueError(f"--point: {item!r} must be KEY=VALUE with KEY one of {sorted(component.axes)}")
        if key in point:
            raise ValueError(f"--point: {key} given twice")
        try:
            point[key] = int(value)
        except ValueError:
            point[key] = value
    missing = [axis for axis in component.axes if axis not in point]
    if missing:
        raise ValueError(f"--point: give every axis of {component.name}; missing {missing}")
    return point
