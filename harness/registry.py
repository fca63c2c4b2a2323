"""The registry: each kernel family declares one `Component`, its axes and its `Variant`s, once.

The harness (runner, tests, reports) only ever walks this registry, so a new variant is swept,
verified, tested and reported without any harness change. Nothing here knows about one kernel.

A *point* is a plain dict of the axis values that define one shape (``{"M": 32, "state_dtype":
"bf16"}``); a component lists the `Axis` objects it reads in ``axes``. Arrays handed between the
pieces are NumPy on the host, except a component's resident inputs, which live on the backend.

Families are found by importing the ``kernels`` package, plus every module named in the
``ATTNBENCH_COMPONENTS`` environment variable (comma-separated; how a component defined outside
``kernels/``, a test's say, is swept by the same command line).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import os
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from harness.axes import Axis, ConfigError, same_declaration

Point = Mapping[str, Any]
PLUGINS_ENV = "ATTNBENCH_COMPONENTS"


class Launch(abc.ABC):
    """One prepared kernel invocation on a backend, built by `Variant.build`.

    ``poison()`` restores every in-place input to its initial value and fills every output with
    NaN (integer outputs: bytes no correct kernel writes, 0xAA for index outputs, whose -1 is a
    legal slot), so a launch that skips an element cannot pass.
    ``__call__()`` enqueues exactly one decode step on the backend's stream (no synchronisation).
    ``outputs()`` synchronises and returns the outputs as host arrays keyed like the reference.

    What a launch class may do beyond that is stated here, never probed:

    - ``run_many(launches) -> step``: how a chain of launches of this class (each on its own
      buffers, ``runner.replay``) is enqueued back to back; the default calls them in order. A
      class whose later launches are programmatic dependents overrides it. The backend captures
      the step as one CUDA graph when the timing asks for one.
    - ``captures_itself``: True when the class records its own graph (``capture_many``), as a
      torch-launched peer does through torch's graph API; then the backend does not capture it.
    - ``note``: how the launch ran (the config a peer ran); the row's ``reason`` carries it.
    """

    captures_itself: ClassVar[bool] = False
    note: str = ""

    @abc.abstractmethod
    def poison(self) -> None: ...

    @abc.abstractmethod
    def __call__(self) -> None: ...

    @abc.abstractmethod
    def outputs(self) -> dict[str, np.ndarray]: ...

    @classmethod
    def run_many(cls, launches: Sequence["Launch"]) -> Callable[[], None]:
        if len(launches) == 1:
            return launches[0]

        def step() -> None:
            for launch in launches:
                launch()
        return step

    @classmethod
    def capture_many(cls, launches: Sequence["Launch"]) -> Callable[[], None]:
        raise NotImplementedError(f"{cls.__name__} does not capture itself (captures_itself is False)")


@dataclasses.dataclass(frozen=True)
class ResidentInput:
    """An input built once per job on the backend's device (generated there, never copied from
    the host), read-only, shared by every variant of the job, every link of a chain and every
    L2-rotation set: a paged latent arena of many GiB, say.

    build:  ``build(geometry, point, backend, seed) -> array`` on the backend (CuPy on ``cuda``,
            NumPy on ``cpu``; ``backend.xp`` is the array module); deterministic in ``seed``.
    nbytes: ``nbytes(geometry, point) -> int``, what it occupies (checked against the build, and
            what the CPU reference backend's size cap counts).
    """

    name: str
    build: Callable[..., Any]
    nbytes: Callable[[Any, Point], int]


class Inputs(dict):
    """A job's inputs: host arrays by name (fresh random, drawn once per job), plus ``resident``,
    the component's resident inputs on the backend. A build copies the host arrays to its own
    buffers and uses the resident ones as they are; nothing writes either."""

    def __init__(self, host: Mapping[str, np.ndarray], resident: Mapping[str, Any] | None = None,
                 backend=None):
        super().__init__(host)
        self.resident = dict(resident or {})
        self.backend = backend

    def resident_rows(self, name: str, rows) -> np.ndarray:
        """A host copy of ``rows`` (an index array or slice over the first axis) of a resident
        input: what a reference reads of it."""
        arr = self.resident[name]
        return np.asarray(self.backend.to_host(arr[rows]) if self.backend is not None else arr[rows])


@dataclasses.dataclass(frozen=True)
class Variant:
    """One implementation of a component on one backend.

    name:     stable identifier used in configs, rows and reports (``lazy_1pass``).
    backend:  ``cuda`` or ``cpu``.
    build:    ``build(geometry, point, inputs, backend) -> Launch``; ``inputs`` is the job's
              `Inputs`, shared by every variant: a build copies the host arrays, never modifies
              them, and uses ``inputs.resident`` in place.
    why:      one line: what this variant changes and why it is shaped that way.
    supports: ``supports(geometry, point) -> reason | None``; a reason makes a skipped row.
    peer:     a third-party implementation measured side by side (fla), not ours.
    sources:  kernel source files (relative to the component folder); what they compile (with
              their local headers, harness.sources) is each row's ``source_sha``.
    packages: installed distributions its code runs on or is compiled by (a peer's library): the
              sweep's provenance records their versions.
    """

    name: str
    backend: str
    build: Callable[..., Launch]
    why: str
    supports: Callable[[Any, Point], str | None] = lambda geometry, point: None
    peer: bool = False
    sources: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()


PLOT_METRICS = ("us", "gbps")


@dataclasses.dataclass(frozen=True)
class Plot:
    """One figure a component's write-up draws, declared by its family: ``y`` (``us``: µs per
    launch, or ``gbps``) against the numeric axis ``x``, one panel per value of ``facet``, one
    line per variant (and per other axis that still varies), the rows pinned by ``where`` (an
    axis value the rows do not hold leaves the figure out). ``beside`` names other components
    whose rows at the same points are drawn with it (a floor measured in the same sweep: the
    gather of the same rows, the stream-only scan); ``roofline`` draws the sweep's copy roofline
    (GB/s figures only)."""

    x: str
    y: str = "us"
    facet: str | None = None
    where: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    beside: tuple[str, ...] = ()
    roofline: bool = False
    title: str = ""


@dataclasses.dataclass(frozen=True)
class Component:
    """A kernel family: the op, its axes, its float64 reference, its byte/FLOP counts, its checks
    and its variants.

    axes:        the `Axis` objects that define a point for this component (declared in its folder).
    layers:      ``layers(geometry) -> int``: how many layers of this kind one decode step runs.
    make_inputs: ``make_inputs(geometry, point, rng) -> dict[str, np.ndarray]`` (fresh, random).
    reference:   ``reference(geometry, point, inputs) -> dict[str, np.ndarray]`` in float64, for
                 the streams ``reference_streams`` names (all of them when it is None); it may
                 also return auxiliary arrays a check reads (scores for an index set).
    checks:      ``checks(point) -> {output name: Check}``: how each output is judged
                 (harness.verify: byte-exact, relative error, index set with its tie rule).
    bytes_moved: the fewest bytes the algorithm must move (each input read once, each output
                 written once); every variant is charged the same count so GB/s compare honestly.
    flops:       FLOPs of the algorithm at that point.
    footprint:   bytes one step touches, each buffer once (an in-place state counts once, where
                 bytes_moved counts it read and written); sizes the L2 rotation. None: bytes_moved.
    check_point: ``check_point(geometry, point) -> error | None``: cross-field rules of this
                 component's axes, whatever the variant (the one-line config error).
    resident:    inputs built once per job on the device (`ResidentInput`), shared by everything.
    reference_streams: ``reference_streams(geometry, point) -> stream indices | None``: the streams
                 the reference computes when all of them would cost too much on the host (a
                 large arena); every output's first axis is then the stream, and only those rows
                 are compared. None (the default): every stream.
    cpu_max_bytes: the CPU reference backend skips points that move more than this.
    folder:      the component's folder, for hashing sources.
    plots:       the figures its write-up draws (`Plot`); none declared: GB/s against the first
                 numeric axis that varies.
    """

    name: str
    axes: tuple[Axis, ...]
    layers: Callable[[Any], int]
    make_inputs: Callable[..., dict[str, np.ndarray]]
    reference: Callable[..., dict[str, np.ndarray]]
    checks: Callable[[Point], Mapping[str, Any]]
    bytes_moved: Callable[[Any, Point], int]
    flops: Callable[[Any, Point], int]
    variants: tuple[Variant, ...]
    summary: str
    check_point: Callable[[Any, Point], str | None] = lambda geometry, point: None
    footprint: Callable[[Any, Point], int] | None = None
    resident: tuple[ResidentInput, ...] = ()
    reference_streams: Callable[[Any, Point], Sequence[int] | None] = lambda geometry, point: None
    cpu_max_bytes: int = 1 << 30
    folder: str = ""
    plots: tuple[Plot, ...] = ()

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

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
_AXES: dict[str, Axis] = {}
_LOADED = False


def declare_axes(*axes: Axis) -> None:
    """Make axes known to the job schema (a component's are declared when it registers; axes
    shared by families that have not landed yet can be declared ahead of them). One name, one
    declaration: a different axis under a known name is refused."""
    for axis in axes:
        known = _AXES.get(axis.name)
        if known is not None and not same_declaration(known, axis):
            raise ValueError(f"axis {axis.name!r} declared twice with different definitions: {known} and {axis}")
        _AXES.setdefault(axis.name, axis)


def register(component: Component) -> Component:
    if component.name in _COMPONENTS:
        raise ValueError(f"component {component.name!r} registered twice")
    names = [v.name for v in component.variants]
    if len(set(names)) != len(names):
        raise ValueError(f"component {component.name!r} declares a variant name twice: {names}")
    if len(set(component.axis_names)) != len(component.axes):
        raise ValueError(f"component {component.name!r} lists an axis twice: {component.axis_names}")
    for i, plot in enumerate(component.plots):
        named = [plot.x, *([plot.facet] if plot.facet else []), *plot.where]
        unknown = [a for a in named if a not in component.axis_names]
        if unknown or plot.y not in PLOT_METRICS:
            raise ValueError(f"component {component.name!r} plots[{i}]: "
                             + (f"axis {unknown[0]!r} is not one of its axes ({', '.join(component.axis_names)})"
                                if unknown else f"y {plot.y!r}; allowed: {', '.join(PLOT_METRICS)}"))
    declare_axes(*component.axes)
    _COMPONENTS[component.name] = component
    return component


def _load() -> None:
    """Import the kernel families, then the modules ``ATTNBENCH_COMPONENTS`` names (once)."""
    global _LOADED
    if _LOADED:
        return
    import kernels  # noqa: F401  (importing the package registers every family)

    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(module)
    _LOADED = True


def components() -> dict[str, Component]:
    """All registered components, importing the kernel families on first use."""
    _load()
    return dict(_COMPONENTS)


def axes() -> dict[str, Axis]:
    """Every declared axis by name, in declaration order."""
    _load()
    return dict(_AXES)


def get(name: str) -> Component:
    comps = components()
    if name not in comps:
        raise KeyError(name)
    return comps[name]


def parse_point(component: Component, items: list[str]) -> dict[str, Any]:
    """A point from ``KEY=VALUE`` strings (command-line tools); every axis of ``component`` must be
    given, each parsed and checked by its declaration. Raises ValueError with a one-line message."""
    by_name = {a.name: a for a in component.axes}
    point: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in by_name:
            raise ValueError(f"--point: {item!r} must be KEY=VALUE with KEY one of {sorted(by_name)}")
        if key in point:
            raise ValueError(f"--point: {key} given twice")
        try:
            point[key] = by_name[key].parse(value)
        except ConfigError as exc:
            raise ValueError(f"--point: {exc}") from None
    missing = [axis for axis in component.axis_names if axis not in point]
    if missing:
        raise ValueError(f"--point: give every axis of {component.name}; missing {missing}")
    return point
