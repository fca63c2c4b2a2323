"""Launchers and declarations of the ``kda_decode_conv`` variants (the step with its short
convolution; ``conv_spec.py`` has the op).

- ``fused_conv_bulk_early_pdl``: ONE launch, the ring of ``bulk32k_early_pdl`` with the convolution
  in its per-tile prologue (``ring<..., CONV>``: fused_conv_bulk_early_pdl.cu).
- ``conv_then_bulk32k_early_pdl``: ours unfused, TWO launches: ``kda_conv_update`` writes q, k, v
  in BF16, then ``bulk32k_early_pdl`` reads them, as its programmatic dependent.
- ``fla_conv_then_recurrent`` (peer): fla's Triton ``causal_conv1d_update`` once per tensor, as
  fla's KimiDeltaAttention layer runs its three ShortConvolution modules at decode, then its
  ``fused_recurrent_kda`` kernel: FOUR launches.
- ``ref_conv_lazy`` (CPU backend): the float64 convolution and the lazy-form step on the host.

Nothing here imports cupy, torch.cuda or fla at import time.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from harness.cuda import KernelCall, KernelStep, get_kernel, persistent_grid
from harness.registry import Variant

from . import conv_spec
from .reference import bf16_to_float, ref_short_conv
from .variants import (_DESIGNS, _KV, _SYMBOL_SUFFIX, DESIGN_SOURCES, FLA_PACKAGES, _CpuLazyLaunch, _FlaLaunch,
                       _check_inputs, _decode_state, _dims, _fla_forward, _stage_bytes, design_source,
                       fla_ready, fla_step_tensors, kernel_launch_shape, step_scalars, supports_cuda,
                       supports_fla, torch_on)

_CONV_THREADS = 256            # kda_conv_update's block
_FUSED_THREADS, _FUSED_STAGES = 256, 3  # DEFINE_RING_CONV(fused_conv_bulk_early_pdl, ...)
_TAP_BYTES = 3 * _KV * 3 * 2          # ShortConv::TAP_BYTES: one head's taps, after the stages
_UNFUSED_STEP = "bulk32k_early_pdl"   # the kda_decode design the unfused path runs second
# The fused rings and their ConvFusion mode (DEFINE_RING_CONV in their files; a test checks). Built on
# ring<>, so an -DKDA_TIMELINE build records them too (tools/kda_timeline.py).
FUSED_CONFIGS = {"fused_conv_bulk_early_pdl": "CONV"}
PROBED = tuple(FUSED_CONFIGS)


def _conv_fits(geometry) -> str | None:
    kda = geometry.kda
    if (kda.conv_kernel, kda.conv_tensors, kda.conv_state_dtype) != (4, 3, "bf16"):
        return (f"short_conv.cuh's ShortConv is written for 3 tensors, kernel 4, bf16 taps; got "
                f"{kda.conv_tensors} tensors, kernel {kda.conv_kernel}, {kda.conv_state_dtype}")
    return None


def supports_conv_cuda(geometry, point) -> str | None:
    return supports_cuda(geometry, point) or _conv_fits(geometry)


def _check_conv_inputs(geometry, point, inputs) -> tuple[int, int, int, int, str]:
    """Shapes and dtypes of every input; the step's part through ``variants._check_inputs``."""
    M, H, K, V, dtype = _check_inputs(geometry, point, {
        **inputs, "q": inputs["x_q"], "k": inputs["x_k"], "v": inputs["x_v"]})
    C, W, T = conv_spec.channels(geometry), geometry.kda.conv_kernel, geometry.kda.conv_tensors
    want = {"conv_state": (M, T, C, W - 1), "conv_weight": (T, C, W)}
    for name, shape in want.items():
        a = inputs[name]
        if a.shape != shape or a.dtype != np.uint16:
            raise ValueError(f"kda_decode_conv input {name!r}: expected uint16{list(shape)}, "
                             f"got {a.dtype.name}{list(a.shape)}")
    return M, H, K, V, dtype


def _read_outputs(backend):
    """The step's outputs as the reference has them (BF16 bits decoded, the state in float64)."""
    def read(d: dict) -> dict[str, np.ndarray]:
        return {"o": bf16_to_float(backend.to_host(d["o"])).astype(np.float64),
                "state": _decode_state(backend.to_host(d["state"])),
                "conv_state": bf16_to_float(backend.to_host(d["conv_state"])).astype(np.float64)}
    return read


def _conv_step(backend, kernels: list[KernelCall], dev: dict, initial: dict) -> KernelStep:
    """One step of ours: one kernel (fused) or two (the convolution, then the step as its
    programmatic dependent). Every kernel of ours here waits (griddepcontrol.wait) before it reads
    what an earlier launch wrote, so in a chain each step but the first is a programmatic
    dependent too; o and the unfused path's q, k, v are poisoned with BF16 NaN bits."""
    poison = {name: 0xFFFF for name in ("o", "q", "k", "v") if name in dev}
    return KernelStep(backend, kernels, dev, initial, poison, _read_outputs(backend)).ready()


def _device_buffers(backend, inputs: dict, M: int, H: int, V: int) -> tuple[dict, dict]:
    """Device copies of the inputs, o, and the initial values of the two in-place states."""
    dev = {name: backend.to_device(inputs[name]) for name in
           (*conv_spec.PROJECTIONS, "conv_weight", "g", "beta", "state", "conv_state")}
    initial = {name: backend.to_device(inputs[name]) for name in ("state", "conv_state")}
    with backend.stream:
        dev["o"] = backend.cp.empty((M, H, V), dtype=backend.cp.uint16)
    return dev, initial


def _make_fused_build(name: str) -> Callable[..., KernelStep]:
    def build(geometry, point, inputs, backend) -> KernelStep:
        return build_fused(name, geometry, point, inputs, backend)
    build.__name__ = f"build_{name}"
    return build


def build_fused(name: str, geometry, point, inputs, backend) -> KernelStep:
    reason = supports_conv_cuda(geometry, point)
    if reason:
        raise ValueError(f"{name}: {reason}")
    M, H, K, V, dtype = _check_conv_inputs(geometry, point, inputs)
    _, _, _, scale, eps = _dims(geometry)
    smem = _FUSED_STAGES * _stage_bytes(_KV, dtype) + _TAP_BYTES  # whole-head tiles
    fn = get_kernel(backend, design_source(name), f"kda_{name}_{_SYMBOL_SUFFIX[dtype]}", smem)
    # A multiple of H: each CTA then meets one head h (of every stream) and reads its weights
    # once; the kernel traps otherwise. At M = 32 the makespan is 8 BF16 tiles either way.
    grid = persistent_grid(backend, fn, _FUSED_THREADS, smem, M * H)
    grid -= grid % H
    if grid == 0:
        raise RuntimeError(f"{name}: fewer resident CTAs than the {H} heads")
    scalars = step_scalars(M, H, eps, scale)
    kernels = [KernelCall(fn, grid, _FUSED_THREADS, smem, lambda d: (
        d["x_q"], d["x_k"], d["x_v"], d["conv_state"], d["conv_weight"], d["g"], d["beta"],
        d["state"], d["o"]) + scalars)]
    dev, initial = _device_buffers(backend, inputs, M, H, V)
    return _conv_step(backend, kernels, dev, initial)


def build_unfused(geometry, point, inputs, backend) -> KernelStep:
    reason = supports_conv_cuda(geometry, point)
    if reason:
        raise ValueError(f"conv_then_{_UNFUSED_STEP}: {reason}")
    M, H, K, V, dtype = _check_conv_inputs(geometry, point, inputs)
    _, _, _, scale, eps = _dims(geometry)
    conv_fn = get_kernel(backend, design_source("conv_update"), "kda_conv_update")
    threads_total = M * geometry.kda.conv_tensors * conv_spec.channels(geometry)
    step_fn, step_smem, step_grid = kernel_launch_shape(backend, _UNFUSED_STEP, _DESIGNS[_UNFUSED_STEP],
                                                        dtype, M * H)
    scalars = step_scalars(M, H, eps, scale)
    kernels = [
        KernelCall(conv_fn, -(-threads_total // _CONV_THREADS), _CONV_THREADS, 0, lambda d: (
            d["x_q"], d["x_k"], d["x_v"], d["conv_state"], d["conv_weight"], d["q"], d["k"], d["v"],
            np.int32(M), np.int32(H))),
        KernelCall(step_fn, step_grid, _DESIGNS[_UNFUSED_STEP].threads, step_smem, lambda d: (
            d["q"], d["k"], d["v"], d["g"], d["beta"], d["state"], d["o"]) + scalars),
    ]
    dev, initial = _device_buffers(backend, inputs, M, H, V)
    with backend.stream:
        for name in ("q", "k", "v"):
            dev[name] = backend.cp.empty((M, H, K), dtype=backend.cp.uint16)
    return _conv_step(backend, kernels, dev, initial)


_WHY = {
    "fused_conv_bulk_early_pdl":
        "one launch: bulk32k_early_pdl's ring with the three short convolutions in each tile's "
        "prologue (taps copied one tile ahead by the bulk engine, weights read once per CTA, taps "
        "shifted in place, q/k/v kept in float); whole-head tiles in both dtypes so one CTA owns a "
        "head's taps (64 KiB FP32 tiles, 1 CTA/SM)",
    "conv_then_bulk32k_early_pdl":
        "ours unfused: kda_conv_update (one thread per channel, q/k/v written in BF16), then "
        "bulk32k_early_pdl as its programmatic dependent; what the fusion saves is this minus the "
        "fused row",
}

CUDA_VARIANTS: tuple[Variant, ...] = (
    *(Variant(name, "cuda", _make_fused_build(name), why=_WHY[name], supports=supports_conv_cuda,
              sources=(DESIGN_SOURCES[name],)) for name in FUSED_CONFIGS),
    Variant(f"conv_then_{_UNFUSED_STEP}", "cuda", build_unfused,
            why=_WHY[f"conv_then_{_UNFUSED_STEP}"], supports=supports_conv_cuda,
            sources=(DESIGN_SOURCES["conv_update"], DESIGN_SOURCES[_UNFUSED_STEP])),
)


# -- CPU reference backend ------------------------------------------------------------------------

class _CpuConvLazyLaunch(_CpuLazyLaunch):
    """``ref_short_conv`` per tensor, then the lazy-form step of ``_CpuLazyLaunch`` on its q, k, v,
    in float64 on the host; the taps are one more in-place state."""

    def __init__(self, geometry, point, inputs):
        x = conv_spec.spec.decoded(inputs)
        self.projections = [x[name].astype(np.float64) for name in conv_spec.PROJECTIONS]
        self.weight = x["conv_weight"].astype(np.float64)
        self.taps0 = x["conv_state"].astype(np.float64)
        # q, k, v are set from the convolution at every call; the projections stand in until then.
        super().__init__(geometry, point, {**inputs, "q": inputs["x_q"], "k": inputs["x_k"], "v": inputs["x_v"]})

    def poison(self) -> None:
        super().poison()
        self.taps = self.taps0.copy()

    def __call__(self) -> None:
        M = self.shape_v[0]
        qkv, taps = [], []
        for i, x in enumerate(self.projections):
            y, t = ref_short_conv(x.reshape(M, -1), self.taps[:, i], self.weight[i])
            qkv.append(y.reshape(x.shape))
            taps.append(t)
        self.taps = np.stack(taps, axis=1)
        self.q, self.k, self.v = qkv
        super().__call__()

    def outputs(self) -> dict[str, np.ndarray]:
        return {**super().outputs(), "conv_state": self.taps.copy()}


def build_cpu_conv_lazy(geometry, point, inputs, backend) -> _CpuConvLazyLaunch:
    _check_conv_inputs(geometry, point, inputs)
    return _CpuConvLazyLaunch(geometry, point, inputs)


CPU_VARIANTS: tuple[Variant, ...] = (
    Variant("ref_conv_lazy", "cpu", build_cpu_conv_lazy,
            why="float64 short convolution then the lazy-form step (torch on the host), state "
                "materialised; checked against the definition reference",
            sources=("reference.py",)),
)


# -- fla peer -------------------------------------------------------------------------------------

def _fla_conv_update():
    from fla.modules.causal_conv1d import causal_conv1d_update

    return causal_conv1d_update


def _autotuner(kernel):
    """The Triton autotuner inside ``kernel``'s decorators (fla wraps it in heuristics)."""
    while not (hasattr(kernel, "configs") and hasattr(kernel, "cache")):
        kernel = kernel.fn
    return kernel


# fla's convolution config for every M: the one fla's own autotuner picked when it tuned at M = 1
# and at M = 16 on the H200 (BD = 128 channels per program, 4 warps). Its autotuner keys on (D, W)
# only, not on the streams, tunes on an isolated warm-cache call and caches the pick on disk; left
# to it, the pick depended on the M it first saw and on the run (reports/
# 2026-11-29-kda_decode_conv-h200-170451: tuned at each M it chose BD 8 / 16 / 64 with 4-16 warps at
# M = 8 / 32 / 64, and fla's layer took 64.9 µs at BF16 M = 8 against 38.6 at M = 16).
FLA_CONV_CONFIG = {"BD": 128, "num_warps": 4}


def pin_fla_conv():
    """Pin fla's convolution to FLA_CONV_CONFIG (no tuning, nothing cached on disk) and return its
    autotuner, whose best_config then names what ran."""
    import triton
    from fla.modules.causal_conv1d import ops

    tuner = _autotuner(ops.causal_conv1d_update_kernel)
    cfg = FLA_CONV_CONFIG
    if [(c.kwargs, c.num_warps) for c in tuner.configs] != [({"BD": cfg["BD"]}, cfg["num_warps"])]:
        tuner.configs = [triton.Config({"BD": cfg["BD"]}, num_warps=cfg["num_warps"])]
        tuner.cache.clear()
    tuner.cache_results = False
    return tuner


def supports_fla_conv(geometry, point) -> str | None:
    try:
        _fla_conv_update()
    except Exception as exc:
        return f"fla not importable: {type(exc).__name__}: {exc}"
    return supports_fla(geometry, point) or _conv_fits(geometry)


class _FlaConvLaunch(_FlaLaunch):
    """fla at T = 1: ``causal_conv1d_update`` on each tensor's own [M, C, 4] cache (fla keeps the
    new token too: its taps are cache[..., 1:] before the step and after it), then
    ``fused_recurrent_kda_fwd`` on the BF16 results, the state updated in place."""

    def __init__(self, backend, forward, conv_update, tensors: dict, state0, caches0, scale: float):
        super().__init__(backend, forward, tensors, state0, scale)
        self.conv_update, self.caches0 = conv_update, caches0
        self.note = ""  # the convolution's config, once built (the row's reason carries it)

    def _step(self) -> None:
        t = self.t
        M, H, K = t["o"].shape[0], t["o"].shape[2], t["o"].shape[3]
        qkv = []
        for i, name in enumerate(conv_spec.PROJECTIONS):
            y, _ = self.conv_update(x=t[name], cache=t["caches"][i], weight=t["conv_weight"][i],
                                    activation="silu")
            qkv.append(y.view(M, 1, H, K))
        self._recurrent(*qkv)

    def poison(self) -> None:
        super().poison()
        with self.torch.cuda.stream(self.ext):
            for cache, cache0 in zip(self.t["caches"], self.caches0):
                cache.copy_(cache0)

    def outputs(self) -> dict[str, np.ndarray]:
        out = super().outputs()
        torch = self.torch
        with torch.cuda.stream(self.ext):
            taps = torch.stack([c[..., 1:] for c in self.t["caches"]], dim=1)
            out["conv_state"] = taps.to(torch.float64).cpu().numpy()
        return out


def build_fla_conv(geometry, point, inputs, backend) -> _FlaConvLaunch:
    reason = supports_fla_conv(geometry, point)
    if reason:
        raise RuntimeError(reason)
    import torch

    forward, conv_update = _fla_forward(), _fla_conv_update()
    M, H, K, V, _ = _check_conv_inputs(geometry, point, inputs)
    _, _, _, scale, _ = _dims(geometry)
    C = conv_spec.channels(geometry)
    device = torch.device("cuda", getattr(backend, "device_id", 0))
    ext = torch.cuda.ExternalStream(backend.stream.ptr)
    with torch.cuda.stream(ext):
        t, state0 = fla_step_tensors(inputs, M, H, K, V, device)
        t.update({name: torch_on(inputs[name], (M, C), device) for name in conv_spec.PROJECTIONS})
        t["conv_weight"] = torch_on(inputs["conv_weight"], inputs["conv_weight"].shape, device)
        caches0 = fla_caches(torch_on(inputs["conv_state"], inputs["conv_state"].shape, device))
        t["caches"] = [c.clone() for c in caches0]
        t["state"] = state0.clone()
    backend.stream.synchronize()
    tuner = pin_fla_conv()
    launch = fla_ready(_FlaConvLaunch(backend, forward, conv_update, t, state0, caches0, scale), backend)
    launch.note = f"fla causal_conv1d_update pinned (conv_variants.FLA_CONV_CONFIG): {tuner.best_config}"
    return launch


def fla_caches(taps) -> list:
    """fla's [M, C, W] cache per tensor from our taps [M, 3, C, W - 1]: fla keeps the W inputs
    including the newest; slot 0 is shifted out before it is read, so zeros do."""
    import torch

    return [torch.cat([torch.zeros_like(taps[:, i, :, :1]), taps[:, i]], dim=-1).contiguous()
            for i in range(taps.shape[1])]


PEER_VARIANTS: tuple[Variant, ...] = (
    Variant("fla_conv_then_recurrent", "cuda", build_fla_conv,
            why="fla 0.6: Triton causal_conv1d_update with SiLU once per tensor (fla's KDA layer "
                "has three ShortConvolution modules), q/k/v in BF16, then fused_recurrent_kda_fwd "
                "with the state updated in place; four launches; the convolution at one pinned "
                "config (FLA_CONV_CONFIG, not fla's shape-blind autotuner)",
            supports=supports_fla_conv, peer=True, packages=FLA_PACKAGES),
)
