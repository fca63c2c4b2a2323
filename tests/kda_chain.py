"""Shared by the GPU tests and their CPU stand-in: a chain of KDA launches where each layer's input is
the output of the layer before, as in a model, so an input read moved ahead of the programmatic
dependent launch's wait shows (the sweeps' chains give every layer independent inputs)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from harness.runner import replay
from harness.verify import compare_all
from kernels.kda_decode import spec
from kernels.kda_decode.reference import float_to_bf16


def check_dependent_chain(launches: list, backend, inputs: dict, use_graph: bool, geometry, point: dict,
                          checks: dict, linked: str = "v",
                          reference: Callable = spec.reference) -> None:
    """Layer i's input ``linked`` (``v``; ``x_v`` when the convolution is fused in front) is layer
    i-1's o (both [M, H, 128] bf16); every o starts poisoned (NaN). One chain (``runner.replay``, as
    timed) must leave each layer one step ahead of its own initial states, computed by
    ``reference`` (the component's) from what layer i-1 actually wrote, judged by ``checks`` (the
    component's, ``spec.checks(point)``)."""
    for before, after in zip(launches, launches[1:]):
        after.dev[linked] = before.dev["o"]
    for launch in launches:
        launch.poison()
    replay(launches, backend, use_graph)()
    fed = inputs[linked]
    for i, launch in enumerate(launches):
        out = launch.outputs()
        assert np.isfinite(out["o"]).all(), f"layer {i}: o has NaN (read its input before the layer ahead wrote it?)"
        ref = reference(geometry, point, {**inputs, linked: fed})
        bad = [c.describe() for c in compare_all(out, ref, checks) if not c.ok]
        assert not bad, f"layer {i}: " + "; ".join(bad)
        fed = float_to_bf16(out["o"])  # exactly the bf16 words the next layer reads
