"""The KDA decode step with its short convolution, as one component (``kda_decode_conv``).

Per stream m, for each of q, k, v (seed 000 Geometry; seed 003 §8.2, §9.3: depthwise, kernel 4,
SiLU, one convolution per tensor) and then the decode step of ``spec.py`` on the results:

    x_q, x_k, x_v : [M, H, K] BF16      the projections of this token, before the convolution
    conv_state    : [M, 3, H * K, 3] BF16 the last 3 inputs per tensor and channel, oldest first,
                                          updated in place (the taps shift by one token)
    conv_weight   : [3, H * K, 4] BF16   q_conv1d, k_conv1d, v_conv1d weights ([8192, 1, 4] each)
    g, beta, state: as ``spec.py``       o: [M, H, V] BF16

    q = silu(conv(x_q)), k = silu(conv(x_k)), v = silu(conv(x_v));  (o, state) = step(q, k, v, ...)

Bytes are the fewest the fused step must move: ``spec.bytes_moved`` with x_q, x_k, x_v in place of
q, k, v (same size), plus the taps read and written and the weights read once per launch. An
unfused pipeline also writes q, k, v and reads them back; that shows as a lower GB/s.
"""

from __future__ import annotations

import numpy as np

from harness.accounting import dtype_bytes, kda_conv_bytes_per_layer
from harness.verify import as_check

from . import spec
from .reference import float_to_bf16, ref_short_conv, ref_step

AXES = spec.AXES
PROJECTIONS = ("x_q", "x_k", "x_v")

# The taps are copied, never computed: byte-exact. o and state as spec.TOLERANCE, except an FP32
# state: an unfused pipeline rounds q, k, v to BF16 between its launches (relative 2^-9 at most per
# element), and the update kn_c u_j carries that rounding of v_j (|v| up to ~4 after the SiLU) into
# single elements: on the H200 (reports/2026-11-29-kda_decode_conv-h200, at 1e-3) 2-12 elements per
# point were off by more than 1e-3 x max|S|, max_abs up to 4.1e-3, for fla and ours alike, while
# the norm-wise error was 1.6e-4. 5e-3 (o's bound) admits that; a wrong tap or weight is off by O(1).
TOLERANCE = {
    **spec.TOLERANCE,
    ("fp32", "state"): 5e-3,
    ("bf16", "conv_state"): 0.0,
    ("fp32", "conv_state"): 0.0,
}


def channels(geometry) -> int:
    return geometry.kda.heads * geometry.kda.head_k_dim


def make_inputs(geometry, point, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``spec.make_inputs`` for g, beta and the state; the projections and the taps N(0, 1) like
    activations; weights uniform in +-1/sqrt(kernel) (the default init of a depthwise conv of that
    width). Never zeros."""
    M, H, K, _ = spec.shapes(geometry, point)
    C, W = channels(geometry), geometry.kda.conv_kernel
    step = spec.make_inputs(geometry, point, rng)
    inputs = {name: float_to_bf16(rng.standard_normal((M, H, K))) for name in PROJECTIONS}
    inputs["conv_state"] = float_to_bf16(rng.standard_normal((M, geometry.kda.conv_tensors, C, W - 1)))
    bound = 1.0 / np.sqrt(W)
    inputs["conv_weight"] = float_to_bf16(rng.uniform(-bound, bound, (geometry.kda.conv_tensors, C, W)))
    inputs.update({name: step[name] for name in ("g", "beta", "state")})
    return inputs


def reference(geometry, point, inputs) -> dict[str, np.ndarray]:
    x = spec.decoded(inputs)
    M, H, K, _ = spec.shapes(geometry, point)
    qkv, taps = [], []
    for i, name in enumerate(PROJECTIONS):
        y, t = ref_short_conv(x[name].reshape(M, -1), x["conv_state"][:, i], x["conv_weight"][i])
        qkv.append(y.reshape(M, H, -1))
        taps.append(t)
    o, state = ref_step(*qkv, x["g"], x["beta"], x["state"],
                        eps=geometry.kda.l2norm_eps, scale=geometry.kda.q_scale)
    return {"o": o, "state": state, "conv_state": np.stack(taps, axis=1)}


def bytes_moved(geometry, point) -> int:
    M = int(point["M"])
    weights = geometry.kda.conv_tensors * channels(geometry) * geometry.kda.conv_kernel * dtype_bytes("bf16")
    return spec.bytes_moved(geometry, point) + 2 * M * kda_conv_bytes_per_layer(geometry) + weights


def footprint(geometry, point) -> int:
    """Bytes one step touches: each in-place state once, inputs, weights and the output."""
    M = int(point["M"])
    return bytes_moved(geometry, point) - M * kda_conv_bytes_per_layer(geometry) - (
        spec.bytes_moved(geometry, point) - spec.footprint(geometry, point))


def flops(geometry, point) -> int:
    """The step's 7 K V per head plus, per tensor and channel, W multiply-adds (2 W) and the SiLU
    (counted as 4: exp, add, divide, multiply)."""
    M = int(point["M"])
    per_channel = 2 * geometry.kda.conv_kernel + 4
    return spec.flops(geometry, point) + M * geometry.kda.conv_tensors * channels(geometry) * per_channel


OUTPUTS = (*spec.OUTPUTS, "conv_state")


def checks(point) -> dict:
    """How each output is judged (harness.verify): o and state by relative error, the taps
    byte-exact (a tolerance of 0 is verify.Exact)."""
    return {name: as_check(TOLERANCE[(point["state_dtype"], name)]) for name in OUTPUTS}
