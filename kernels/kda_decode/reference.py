"""Float64 references for one KDA decode step (torch on the CPU), and bf16 bit helpers (NumPy).

Shapes (M streams, H heads, K key dim, V value dim; K = V = 128 for GLM-5.3-Flash):
    q, k, g : [M, H, K]        v, o : [M, H, V]        beta : [M, H]
    state   : [M, H, K, V]     (row c = key channel, column j = value channel; j contiguous)
    kprev, dprev, knew, dnew (lazy form): [M, H, K] and [M, H, V]

Every ``ref_*`` function accepts NumPy arrays or torch tensors, computes in float64 and returns
float64 NumPy arrays; inputs are never modified. bf16 inputs must already be decoded
(``bf16_to_float``).
"""

from __future__ import annotations

import numpy as np
import torch


def _t(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64)
    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def _normalise(q: torch.Tensor, k: torch.Tensor, eps: float, scale: float):
    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + eps) * scale
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + eps)
    return qn, kn


def ref_step(q, k, v, g, beta, state, eps: float, scale: float):
    """One decode step by the definition, in the definition's order.

    q, k, g: [M, H, K]; v: [M, H, V]; beta: [M, H]; state: [M, H, K, V].
    Returns (o [M, H, V], state_new [M, H, K, V]), both float64 NumPy.

        qn = q / sqrt(|q|^2 + eps) * scale;  kn = k / sqrt(|k|^2 + eps)
        F    = exp(g)[:, None] * S                        fade (per key row c)
        vhat = F^T kn                                      predict
        u    = beta * (v - vhat)                           correct
        S'   = F + kn u^T                                  write
        o    = S'^T qn                                     read (from the updated state)
    """
    q, k, v, g, beta, S = map(_t, (q, k, v, g, beta, state))
    qn, kn = _normalise(q, k, eps, scale)
    F = torch.exp(g)[..., :, None] * S
    vhat = torch.einsum("mhcj,mhc->mhj", F, kn)
    u = beta[..., None] * (v - vhat)
    S_new = F + kn[..., :, None] * u[..., None, :]
    o = torch.einsum("mhcj,mhc->mhj", S_new, qn)
    return o.numpy(), S_new.numpy()


def ref_lazy_step(q, k, v, g, beta, state_stored, kprev, dprev, eps: float, scale: float):
    """One decode step in the lazy (deferred rank-one) form used by the lazy kernels.

    The true state is ``S_true = state_stored + kprev dprev^T`` (per head). Shapes as ``ref_step``
    plus kprev: [M, H, K], dprev: [M, H, V].
    Returns (o, state_stored_new, knew, dnew) as float64 NumPy, with
    ``S_true_new = state_stored_new + knew dnew^T``:

        F    = exp(g)[:, None] * (S_stored + kprev dprev^T)
        vhat = F^T kn;  w = F^T qn;  d = beta * (v - vhat)
        o    = w + d (kn . qn)                             (= (F + kn d^T)^T qn)
        S_stored_new = F;  knew = kn;  dnew = d
    """
    q, k, v, g, beta, S, kp, dp = map(_t, (q, k, v, g, beta, state_stored, kprev, dprev))
    qn, kn = _normalise(q, k, eps, scale)
    F = torch.exp(g)[..., :, None] * (S + kp[..., :, None] * dp[..., None, :])
    vhat = torch.einsum("mhcj,mhc->mhj", F, kn)
    w = torch.einsum("mhcj,mhc->mhj", F, qn)
    d = beta[..., None] * (v - vhat)
    o = w + d * (kn * qn).sum(-1, keepdim=True)
    return o.numpy(), F.numpy(), kn.numpy(), d.numpy()


def materialize(state_stored, k, d) -> np.ndarray:
    """The true state ``state_stored + k d^T`` per head: [M, H, K, V] float64 from
    state_stored [M, H, K, V], k [M, H, K], d [M, H, V]."""
    S, k, d = map(_t, (state_stored, k, d))
    return (S + k[..., :, None] * d[..., None, :]).numpy()


def ref_short_conv(x, taps, weight):
    """One decode token through a depthwise causal convolution with SiLU (the KDA layer's
    q/k/v_conv1d), by the definition: each channel's output is the dot product of its kernel with
    its last W inputs, the new one last.

    x: [M, C] (this token); taps: [M, C, W - 1] (the previous W - 1 inputs, oldest first);
    weight: [C, W] (tap 0 weighs the oldest input). Returns (y [M, C], taps_new [M, C, W - 1]) as
    float64 NumPy:

        window = (taps..., x);   y = silu(sum_w window_w weight_w);   taps_new = window[1:]
    """
    x, taps, weight = map(_t, (x, taps, weight))
    window = torch.cat([taps, x[..., None]], dim=-1)
    pre = (window * weight).sum(-1)
    return (pre * torch.sigmoid(pre)).numpy(), window[..., 1:].numpy()


# -- bf16 as uint16 bit patterns ------------------------------------------------------------------

def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact: bf16 is the top half of a float32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16 bits must be uint16, got {bits.dtype}")
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float_to_bf16(x: np.ndarray) -> np.ndarray:
    """float -> uint16 bf16 bit patterns, round to nearest even (NaN stays NaN, overflow -> Inf),
    the same rounding the kernels use."""
    u = np.ascontiguousarray(np.asarray(x, dtype=np.float32)).view(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet = (u >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)
