"""Shared by the GPU test and its CPU stand-in: a chain of KDA launches where each layer's input is
the output of the layer before, as in a model, so an input read moved ahead of the programmatic
dependent launch's wait shows (the sweeps' chains give every layer independent inputs)."""

from __future__ import annotations

import numpy as np

from harness.runner import replay
from kernels.kda_decode import spec
from kernels.kda_decode.reference import float_to_bf16


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check_dependent_chain(launches: list, backend, inputs: dict, use_graph: bool, geometry, point: dict,
                          tol_o: float, tol_state: float) -> None:
    """Layer i's v is layer i-1's o (both [M, H, 128] bf16); every o starts poisoned (NaN). One
    chain (``runner.replay``, as timed) must leave each layer one step ahead of its own initial
    state, computed from the v that layer i-1 actually wrote."""
    for before, after in zip(launches, launches[1:]):
        after.dev["v"] = before.dev["o"]
    for launch in launches:
        launch.poison()
    replay(launches, backend, use_graph)()
    v = inputs["v"]
    for i, launch in enumerate(launches):
        out = launch.outputs()
        assert np.isfinite(out["o"]).all(), f"layer {i}: o has NaN (read its input before the layer ahead wrote it?)"
        ref = spec.reference(geometry, point, {**inputs, "v": v})
        e_o, e_s = rel(out["o"], ref["o"]), rel(out["state"], ref["state"])
        assert e_o < tol_o and e_s < tol_state, f"layer {i}: o {e_o:.3e}, state {e_s:.3e}"
        v = float_to_bf16(out["o"])  # exactly the bf16 words the next layer reads
