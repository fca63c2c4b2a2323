"""A component whose variants fail the ways a real sweep's do, defined outside ``kernels/``
(``ATTNBENCH_COMPONENTS=tests.fault_component``): the sweep must turn each fault into a row and go
on, end with a summary, and exit non-zero when a row failed.

``fault_sum``: out[m] = sum of x[m] ([M] float64). Variants (CPU backend):

- ``right``: correct; sleeps ``FAULT_SLEEP_S`` seconds (env, default 0) per launch in its build,
  so a test can interrupt a sweep between jobs;
- ``wrong_output``: off by one: a failed verification (failed, not timed);
- ``compile_error``: its build raises what CuPy raises for a kernel NVRTC cannot compile (the log
  after a first line that names no error);
- ``out_of_memory``: its build raises an OutOfMemoryError as CuPy's allocator does (skipped);
- ``broken_supports``: its ``supports`` raises (a failed row, the job goes on).

The ``fault_only`` axis picks one variant's fault per job (``none``: all four variants).
"""

from __future__ import annotations

import os
import time

import numpy as np

from harness.axes import Axis
from harness.registry import Component, Launch, Variant, register
from harness.verify import RelErr
from kernels.axes import M

FAULT_ONLY = Axis("fault_only", str, "none", "which variant of fault_sum the job runs (none: all)",
                  choices=("none", "right", "wrong_output", "compile_error", "out_of_memory", "broken_supports"))


class CompileException(Exception):
    """Named as CuPy's: its message is the compiler log."""


class OutOfMemoryError(MemoryError):
    """Named as CuPy's allocator error."""


class _Sum(Launch):
    def __init__(self, inputs, offset: float):
        self.x, self.offset = inputs["x"], offset

    def poison(self) -> None:
        self.out = np.full(len(self.x), np.nan)

    def __call__(self) -> None:
        self.out = self.x.sum(axis=1) + self.offset

    def outputs(self) -> dict[str, np.ndarray]:
        return {"out": self.out.copy()}


def _right(g, p, inputs, b):
    time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0")))
    return _Sum(inputs, 0.0)


def _compile_error(g, p, inputs, b):
    raise CompileException("fault_sum.cu(3): warning: variable \"unused\" was declared but never referenced\n"
                           "fault_sum.cu(7): error: identifier \"undefined_symbol\" is undefined\n"
                           "1 error detected in the compilation of \"fault_sum.cu\".")


def _out_of_memory(g, p, inputs, b):
    raise OutOfMemoryError("Out of memory allocating 17,179,869,184 bytes (allocated so far: 0 bytes).")


def _only(name):
    return lambda geometry, point: None if point["fault_only"] in ("none", name) else f"fault_only={point['fault_only']}"


COMPONENT = register(Component(
    name="fault_sum",
    axes=(M, FAULT_ONLY),
    layers=lambda geometry: 1,
    make_inputs=lambda geometry, point, rng: {"x": rng.standard_normal((int(point["M"]), 16))},
    reference=lambda geometry, point, inputs: {"out": inputs["x"].sum(axis=1)},
    checks=lambda point: {"out": RelErr(1e-9)},
    bytes_moved=lambda geometry, point: int(point["M"]) * 17 * 8,
    flops=lambda geometry, point: int(point["M"]) * 16,
    variants=(Variant("right", "cpu", _right, why="correct", supports=_only("right")),
              Variant("wrong_output", "cpu", lambda g, p, i, b: _Sum(i, 1.0), why="off by one",
                      supports=_only("wrong_output")),
              Variant("compile_error", "cpu", _compile_error, why="does not compile",
                      supports=_only("compile_error")),
              Variant("out_of_memory", "cpu", _out_of_memory, why="does not fit",
                      supports=_only("out_of_memory")),
              Variant("broken_supports", "cpu", lambda g, p, i, b: _Sum(i, 0.0), why="its supports() raises",
                      supports=lambda geometry, point: {}[point["fault_only"]] if point["fault_only"] in
                      ("none", "broken_supports") else "fault_only")),
    summary="test component: every way a variant can fail",
    folder=__file__.rsplit("/", 1)[0],
))
