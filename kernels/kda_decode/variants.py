"""Launchers and declarations of the KDA decode-step variants.

Each design is one `Variant` whose kernels are in its own CUDA file (``DESIGN_SOURCES``); the state
dtype (``point["state_dtype"]`` in {"bf16", "fp32"}) only picks the ``_bf16`` / ``_f32`` symbol.
``CUDA_VARIANTS`` are ours, ``CPU_VARIANTS`` the float64 lazy reference timed by the CPU backend,
``PEER_VARIANTS`` the fla Triton kernel measured side by side.

Nothing here imports cupy, torch.cuda or fla at import time: they are imported inside ``build``
so the module loads on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable

import numpy as np

from harness.cuda import get_kernel, persistent_grid
from harness.registry import Launch, Variant

from .reference import bf16_to_float, materialize, ref_lazy_step

HERE = pathlib.Path(__file__).resolve().parent

# Each design's CUDA file in this folder, for every kernel of the family (conv_variants' too). A row's
# source_sha hashes it with the headers it includes (harness.sources); variants that are one design
# with other template arguments share a file.
DESIGN_SOURCES: dict[str, str] = {
    "lazy_1pass": "lazy_1pass.cu",
    "global_2pass": "global_2pass.cu",
    "vec2": "vec2.cu",
    "smem_staged": "smem_staged.cu",
    "regs_v16": "regs_v16.cu",
    "lazy_v16": "lazy_v16.cu",
    "pipelined_cpasync": "pipelined_cpasync.cu",
    "regs_pipelined": "regs_pipelined.cu",
    "regs_wide": "regs_wide.cu",
    "regs_wide3": "regs_wide.cu",
    "regs_wide3_pdl": "regs_wide.cu",
    "ring32k_reread": "ring32k_reread.cu",
    "bulk32k_hold": "bulk32k_hold.cu",
    "bulk32k_early": "bulk32k_early.cu",
    "bulk32k_reread": "bulk32k_reread.cu",
    "ring32k_reread_pdl": "ring32k_reread_pdl.cu",
    "bulk32k_early_pdl": "bulk_early_pdl.cu",
    "bulk_head_early_pdl": "bulk_early_pdl.cu",
    # kda_decode_conv (conv_variants.py)
    "fused_conv_bulk_early_pdl": "fused_conv_bulk_early_pdl.cu",
    "conv_update": "conv_update.cu",
}


def design_source(name: str) -> pathlib.Path:
    """The CUDA file with design ``name``'s kernels (``kda_<name>_bf16`` / ``_f32``; ``conv_update``:
    ``kda_conv_update``)."""
    return HERE / DESIGN_SOURCES[name]


# The kernels hard-code K = V = 128 (KDIM/VDIM) and these shared-memory layouts; keep in step with it.
_KV = 128
_TILE_COLS = 64                       # Tile16<T>::COLS: column slice of the 16-byte variants
_PIPE_STAGES = {"bf16": 3, "fp32": 2}  # instantiated stage counts (see pipelined_cpasync.cu for why)
_STATE_DTYPES = {"bf16": np.uint16, "fp32": np.float32}
_SYMBOL_SUFFIX = {"bf16": "bf16", "fp32": "f32"}


@dataclasses.dataclass(frozen=True)
class _Design:
    """How one kernel design is launched."""

    lazy: bool
    threads: int
    blocks_per_head: int | dict = 1   # column slices per head, or {dtype: slices} (not persistent)
    persistent: bool = False
    smem: Callable[[str], int] = lambda dtype: 0   # dynamic shared memory per block, bytes
    tiles_per_head: Callable[[str], int] = lambda dtype: _KV // _TILE_COLS  # persistent designs
    # Programmatic dependent launch: in a chain (timing.chain), every launch after the first may
    # start while the one before drains (the kernel waits before reading that one's outputs).
    pdl: bool = False


# ring<T, COLS, THREADS, STAGES, KEEP, LOADER, OVERLAP> (ring.cuh): (tile, threads, stages, keep,
# loader, overlap) per variant, the same for both dtypes. The tile is in bytes (a 32 KiB tile is 128
# BF16 or 64 FP32 columns) or WHOLE_HEAD (128 columns in both). tests/test_kda_component checks this
# table against the DEFINE_RING lines of the design files.
WHOLE_HEAD = "head"
RING_CONFIGS: dict[str, tuple[int | str, int, int, str, str, str]] = {
    "ring32k_reread": (32768, 128, 2, "REREAD", "CPASYNC", "SOLO"),
    "bulk32k_hold": (32768, 256, 3, "HOLD", "BULK", "SOLO"),
    "bulk32k_early": (32768, 256, 3, "HOLD_EARLY", "BULK", "SOLO"),
    "bulk32k_reread": (32768, 128, 2, "REREAD", "BULK", "SOLO"),
    "ring32k_reread_pdl": (32768, 128, 2, "REREAD", "CPASYNC", "PDL"),
    "bulk32k_early_pdl": (32768, 256, 3, "HOLD_EARLY", "BULK", "PDL"),
    "bulk_head_early_pdl": (WHOLE_HEAD, 256, 3, "HOLD_EARLY", "BULK", "PDL"),
}


def ring_cols(name: str, dtype: str) -> int:
    tile = RING_CONFIGS[name][0]
    return _KV if tile == WHOLE_HEAD else tile // (_KV * _itemsize(dtype))


def _stage_bytes(cols: int, dtype: str) -> int:
    """One shared-memory stage of the cp.async / bulk rings for a tile of ``cols`` state columns:
    the tile (128 rows), then q, k (bf16), g (f32) and the tile's slice of v (bf16): Stage<T> and
    RingTile<...>::BYTES in the CUDA files."""
    return _KV * cols * _itemsize(dtype) + 2 * _KV * 2 + _KV * 4 + cols * 2


def _ring_design(name: str) -> _Design:
    _, threads, stages, _, _, overlap = RING_CONFIGS[name]
    return _Design(lazy=False, threads=threads, persistent=True, pdl=overlap == "PDL",
                   tiles_per_head=lambda d: _KV // ring_cols(name, d),
                   smem=lambda d: stages * _stage_bytes(ring_cols(name, d), d))


def _itemsize(dtype: str) -> int:
    return np.dtype(_STATE_DTYPES[dtype]).itemsize


_DESIGNS: dict[str, _Design] = {
    "lazy_1pass": _Design(lazy=True, threads=128),
    "global_2pass": _Design(lazy=False, threads=128),
    "vec2": _Design(lazy=True, threads=64),
    "smem_staged": _Design(lazy=False, threads=128, smem=lambda d: _KV * _KV * _itemsize(d)),
    "regs_v16": _Design(lazy=False, threads=256, blocks_per_head=_KV // _TILE_COLS),
    "lazy_v16": _Design(lazy=True, threads=256, blocks_per_head=_KV // _TILE_COLS),
    "pipelined_cpasync": _Design(
        lazy=False, threads=256, persistent=True,
        smem=lambda d: _PIPE_STAGES[d] * _stage_bytes(_TILE_COLS, d)),
    # 64-column tiles in both dtypes (TileG<T, 64> in regs_pipelined.cu), persistent: tiles = heads x 2.
    "regs_pipelined": _Design(lazy=False, threads=256, persistent=True),
    # 32 KiB per block: the whole head in BF16 (TileG<bf16, 128>), half a head in FP32.
    "regs_wide": _Design(lazy=False, threads=256, blocks_per_head={"bf16": 1, "fp32": 2}),
    "regs_wide3": _Design(lazy=False, threads=256, blocks_per_head={"bf16": 1, "fp32": 2}),
    "regs_wide3_pdl": _Design(lazy=False, threads=256, blocks_per_head={"bf16": 1, "fp32": 2}, pdl=True),
    **{name: _ring_design(name) for name in RING_CONFIGS},
}

_WHY = {
    "lazy_1pass": "seed design: 1 block/head, thread j walks column j, lazy rank-one deferral so S "
                  "is read once and written once in the same sweep",
    "global_2pass": "exact form at the seed geometry: pass 1 reads the column for vhat/w, pass 2 "
                    "re-reads it (L2) to write F + kn u; measures the cost of staying exact",
    "vec2": "lazy_1pass with 2 adjacent columns per thread (64 threads/head): half the load/store "
            "instructions, 4/8-byte accesses",
    "smem_staged": "seed comparison point: whole 128x128 tile copied to shared memory (32/64 KiB), "
                   "exact form from there; occupancy capped by shared memory",
    "regs_v16": "exact form, state slice held in registers: 16-byte loads issued before the "
                "prologue, shuffle+smem column reduction, 16-byte stores; 2 slices x 256 thr/head",
    "lazy_v16": "lazy form with the 16-byte register pattern: rows stored as soon as faded, a pure "
                "streaming read-modify-write plus the column reductions",
    "pipelined_cpasync": "persistent CTAs over (head, column-half) tiles with a cp.async ring "
                         "(3 stages bf16, 2 fp32) so the next tiles stream in while one computes; "
                         "exact form, 16-byte stores",
    "regs_pipelined": "persistent CTAs over 64-column tiles, next tile's 16-byte loads issued before "
                      "the current tile reduces and stores (register double buffering); exact form",
    "regs_wide": "regs_v16 with 32 KiB per block in both dtypes (whole head in BF16), tile kept as raw "
                 "words and decoded twice, capped at 64 registers for 4 blocks/SM: 128 KiB in flight",
    "regs_wide3": "regs_wide without the register cap: 3 blocks/SM in BF16 and no spill, to weigh "
                  "the cap's 92-byte spill against the fourth block's bytes in flight",
    "regs_wide3_pdl": "regs_wide3 launched as a programmatic dependent of the layer before it in a "
                      "step: its blocks issue their state loads, then wait for that layer; the next "
                      "layer's blocks start as this one's last wave drains; a single launch is "
                      "regs_wide3",
    "ring32k_reread": "ring with 32 KiB tiles and 128 threads owning 16 rows each; the tile is re-read "
                      "from shared memory for the write instead of held: few registers, 3 CTAs/SM",
    "bulk32k_hold": "ring with 32 KiB tiles loaded by the bulk copy engine (cp.async.bulk, one "
                    "instruction per tile row, completion on an mbarrier), 3 stages, 256 threads, faded "
                    "tile held in registers so a stage is refilled before the next wait",
    "bulk32k_early": "bulk32k_hold refilling a stage as soon as its tile is in registers (after the "
                     "column-partials barrier) instead of at the next tile's top: one more tile in "
                     "flight during the sums, the write and the wait",
    "bulk32k_reread": "ring32k_reread loading through the bulk copy engine instead of per-thread "
                      "16-byte cp.async",
    "ring32k_reread_pdl": "ring32k_reread launched as a programmatic dependent of the layer before "
                          "it in a step: its CTAs fill SMs as that layer's CTAs exit and load their "
                          "first state tiles before waiting for it (the launch floor and the ramp "
                          "overlap the previous tail); a single launch is ring32k_reread",
    "bulk32k_early_pdl": "bulk32k_early with the same programmatic dependent launch as "
                         "ring32k_reread_pdl (three state tiles in flight before the wait)",
    "bulk_head_early_pdl": "bulk32k_early_pdl with whole-head tiles in both dtypes: BF16 is the same "
                           "tile, FP32 a 64 KiB one with one CTA of 256 threads per SM; the tile the "
                           "fused short convolution needs (kda_decode_conv), without the convolution",
}


# -- checks ---------------------------------------------------------------------------------------

def _dims(geometry) -> tuple[int, int, int, float, float]:
    kda = geometry.kda
    return (int(kda.heads), int(kda.head_k_dim), int(kda.head_v_dim), float(kda.q_scale),
            float(kda.l2norm_eps))


def supports_cuda(geometry, point) -> str | None:
    """Reason the CUDA kernels cannot run this point, or None."""
    H, K, V, _, _ = _dims(geometry)
    if K != _KV or V != _KV:
        return f"the kda_decode kernels are written for head_k_dim = head_v_dim = {_KV}; got K={K}, V={V}"
    if point.get("state_dtype") not in _STATE_DTYPES:
        return f"state_dtype must be one of {sorted(_STATE_DTYPES)}; got {point.get('state_dtype')!r}"
    M = int(point["M"])
    if M < 1:
        return f"M must be >= 1; got {M}"
    if M * H * _KV * _KV >= 2 ** 31:  # blockIdx/tile counters are int; offsets are size_t
        return f"M*H*K*V = {M * H * _KV * _KV} exceeds the kernels' 32-bit head/tile counters"
    return None


def _check_inputs(geometry, point, inputs) -> tuple[int, int, int, int, str]:
    H, K, V, _, _ = _dims(geometry)
    M, dtype = int(point["M"]), point.get("state_dtype")
    if dtype not in _STATE_DTYPES:
        raise ValueError(f"state_dtype must be one of {sorted(_STATE_DTYPES)}; got {dtype!r}")
    want = {
        "q": ((M, H, K), np.uint16), "k": ((M, H, K), np.uint16), "v": ((M, H, V), np.uint16),
        "g": ((M, H, K), np.float32), "beta": ((M, H), np.float32),
        "state": ((M, H, K, V), _STATE_DTYPES[dtype]),
    }
    for name, (shape, dt) in want.items():
        a = inputs[name]
        if a.shape != shape or a.dtype != dt:
            raise ValueError(f"kda_decode input {name!r}: expected {np.dtype(dt).name}{list(shape)}, "
                             f"got {a.dtype.name}{list(a.shape)}")
    return M, H, K, V, dtype


def _decode_state(state: np.ndarray) -> np.ndarray:
    if state.dtype == np.uint16:
        return bf16_to_float(state).astype(np.float64)
    return state.astype(np.float64)


# -- CUDA launches --------------------------------------------------------------------------------

def step_scalars(M: int, H: int, eps: float, scale: float) -> tuple:
    """The trailing ``M, H, eps, scale`` arguments of every step kernel, typed as the kernels take them."""
    return (np.int32(M), np.int32(H), np.float32(eps), np.float32(scale))


class _CudaLaunch(Launch):
    """One step of one of our kernels on ``backend.stream``.

    Lazy designs ping-pong two (kn, d) buffer pairs: step i reads pair p and writes pair 1-p, so the
    blocks of one head that still read kprev never see another block's knew. ``poison`` zeroes both
    pairs (S_true = the initial state) and keeps ``_parity``, the pair the last launch wrote: a
    captured launch always reads and writes the pairs it had when captured, and ``_parity`` was
    flipped then, so after poison and one replay ``outputs`` reads the pair the replay wrote.
    """

    def __init__(self, backend, design: _Design, kernel, grid: int, dyn_smem: int, dev: dict,
                 state0, M: int, H: int, eps: float, scale: float):
        self.backend, self.design, self.kernel = backend, design, kernel
        self.grid, self.dyn_smem, self.dev, self.state0 = grid, dyn_smem, dev, state0
        self.M, self.H = M, H
        self._scalars = step_scalars(M, H, eps, scale)
        self._parity = 0

    def _args(self) -> tuple:
        d = self.dev
        head = (d["q"], d["k"], d["v"], d["g"], d["beta"], d["state"])
        if self.design.lazy:
            p = self._parity
            return head + (d["kn"][p], d["d"][p], d["kn"][1 - p], d["d"][1 - p], d["o"]) + self._scalars
        return head + (d["o"],) + self._scalars

    def poison(self) -> None:
        cp, d = self.backend.cp, self.dev
        with self.backend.stream:
            cp.copyto(d["state"], self.state0)
            d["o"].fill(0xFFFF)  # bf16 NaN bits
            if self.design.lazy:
                for buf in (*d["kn"], *d["d"]):
                    buf.fill(0)

    def __call__(self, programmatic: bool = False) -> None:
        self.backend.launch(self.kernel, (self.grid,), (self.design.threads,), self._args(),
                            shared_mem=self.dyn_smem, programmatic=programmatic)
        if self.design.lazy:
            self._parity ^= 1

    @classmethod
    def run_many(cls, launches: "list[_CudaLaunch]"):
        """The launches in order; a PDL design launches every one after the first as a
        programmatic dependent of the one before, the first plainly, so a sample never overlaps
        what ran before it (the flush, the previous sample). ``runner.replay`` captures this as
        one graph, where the PDL launches become programmatic edges."""
        def chain() -> None:
            for i, launch in enumerate(launches):
                launch(programmatic=launch.design.pdl and i > 0)
        return chain

    def outputs(self) -> dict[str, np.ndarray]:
        b, d = self.backend, self.dev
        b.stream.synchronize()
        o = bf16_to_float(b.to_host(d["o"])).astype(np.float64)
        state = _decode_state(b.to_host(d["state"]))
        if self.design.lazy:  # pair _parity is the one the last step wrote (zeros after poison)
            state = materialize(state, b.to_host(d["kn"][self._parity]).astype(np.float64),
                                b.to_host(d["d"][self._parity]).astype(np.float64))
        return {"o": o, "state": state}


def kernel_launch_shape(backend, name: str, design: _Design, dtype: str, heads: int):
    """(kernel, dynamic shared memory, grid) of design ``name`` for ``heads`` = M x H heads."""
    dyn_smem = design.smem(dtype)
    kernel = get_kernel(backend, design_source(name), f"kda_{name}_{_SYMBOL_SUFFIX[dtype]}", dyn_smem)
    if design.persistent:
        return kernel, dyn_smem, persistent_grid(backend, kernel, design.threads, dyn_smem,
                                                 heads * design.tiles_per_head(dtype))
    bph = design.blocks_per_head
    return kernel, dyn_smem, heads * (bph[dtype] if isinstance(bph, dict) else bph)


def _make_cuda_build(name: str) -> Callable[..., _CudaLaunch]:
    design = _DESIGNS[name]

    def build(geometry, point, inputs, backend) -> _CudaLaunch:
        reason = supports_cuda(geometry, point)
        if reason:
            raise ValueError(f"{name}: {reason}")
        M, H, K, V, dtype = _check_inputs(geometry, point, inputs)
        _, _, _, scale, eps = _dims(geometry)
        cp = backend.cp

        kernel, dyn_smem, grid = kernel_launch_shape(backend, name, design, dtype, M * H)

        dev = {name_: backend.to_device(inputs[name_]) for name_ in ("q", "k", "v", "g", "beta")}
        state0 = backend.to_device(inputs["state"])
        dev["state"] = backend.to_device(inputs["state"])
        with backend.stream:
            dev["o"] = cp.empty((M, H, V), dtype=cp.uint16)
            if design.lazy:
                dev["kn"] = [cp.zeros((M, H, K), dtype=cp.float32) for _ in range(2)]
                dev["d"] = [cp.zeros((M, H, V), dtype=cp.float32) for _ in range(2)]
        launch = _CudaLaunch(backend, design, kernel, grid, dyn_smem, dev, state0, M, H, eps, scale)
        launch.poison()
        backend.stream.synchronize()
        return launch

    build.__name__ = f"build_{name}"
    return build


CUDA_VARIANTS: tuple[Variant, ...] = tuple(
    Variant(name, "cuda", _make_cuda_build(name), why=_WHY[name], supports=supports_cuda,
            sources=(DESIGN_SOURCES[name],))
    for name in _DESIGNS
)


# -- CPU reference backend ------------------------------------------------------------------------

class _CpuLazyLaunch(Launch):
    """``ref_lazy_step`` in float64 on the host; ``outputs`` materialises the true state."""

    def __init__(self, geometry, point, inputs):
        M = int(point["M"])
        H, K, V, self.scale, self.eps = _dims(geometry)
        self.q = bf16_to_float(inputs["q"]).astype(np.float64)
        self.k = bf16_to_float(inputs["k"]).astype(np.float64)
        self.v = bf16_to_float(inputs["v"]).astype(np.float64)
        self.g = np.asarray(inputs["g"], dtype=np.float64)
        self.beta = np.asarray(inputs["beta"], dtype=np.float64)
        self.state0 = _decode_state(inputs["state"])
        self.shape_k, self.shape_v = (M, H, K), (M, H, V)
        self.poison()

    def poison(self) -> None:
        self.state = self.state0.copy()
        self.kprev = np.zeros(self.shape_k)
        self.dprev = np.zeros(self.shape_v)
        self.o = np.full(self.shape_v, np.nan)

    def __call__(self) -> None:
        self.o, self.state, self.kprev, self.dprev = ref_lazy_step(
            self.q, self.k, self.v, self.g, self.beta, self.state, self.kprev, self.dprev,
            self.eps, self.scale)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"o": self.o.copy(), "state": materialize(self.state, self.kprev, self.dprev)}


def build_cpu_lazy(geometry, point, inputs, backend) -> _CpuLazyLaunch:
    _check_inputs(geometry, point, inputs)
    return _CpuLazyLaunch(geometry, point, inputs)


CPU_VARIANTS: tuple[Variant, ...] = (
    Variant("ref_lazy", "cpu", build_cpu_lazy,
            why="float64 lazy-form step (torch on the host), state materialised S + kn d^T; "
                "checked against the definition reference",
            sources=("reference.py",)),
)


# -- fla peer -------------------------------------------------------------------------------------

def _fla_forward():
    """fla's forward entry with in-place state update, or raise ImportError with the reason.

    The public ``fused_recurrent_kda`` hard-codes ``inplace_final_state=False``: it would write a
    fresh float32 final state every step (and never update a bf16 state in place), which is not the
    decode-serving path. ``fused_recurrent_kda_fwd`` (same Triton kernel, what vLLM-style decode
    calls) takes ``inplace_final_state=True`` and stores the state back in its own dtype.
    """
    import inspect

    from fla.ops.kda import fused_recurrent_kda  # noqa: F401  (the public API must import too)
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    params = inspect.signature(fused_recurrent_kda_fwd).parameters
    for needed in ("inplace_final_state", "out", "use_qk_l2norm_in_kernel"):
        if needed not in params:
            raise ImportError(f"fused_recurrent_kda_fwd has no {needed!r} parameter")
    return fused_recurrent_kda_fwd


FLA_PACKAGES = ("fla-core", "triton")  # fla's Triton kernels: their versions go into provenance
_FLA_EPS = 1e-6  # hard-coded in fla's kernel for use_qk_l2norm_in_kernel


def supports_fla(geometry, point) -> str | None:
    try:
        _fla_forward()
    except Exception as exc:  # ImportError, or triton/torch failing underneath
        return f"fla not importable: {type(exc).__name__}: {exc}"
    if point.get("state_dtype") not in _STATE_DTYPES:
        return f"state_dtype must be one of {sorted(_STATE_DTYPES)}"
    _, _, _, _, eps = _dims(geometry)
    if abs(eps - _FLA_EPS) > 1e-12:
        return f"fla's in-kernel l2norm uses eps={_FLA_EPS}; geometry l2norm_eps={eps}"
    return None


class _FlaLaunch(Launch):
    """fla's Triton fused_recurrent KDA kernel at T=1, sharing ``backend.stream``; it records its
    own graphs through torch (``capture_many``)."""

    captures_itself = True

    def __init__(self, backend, forward, tensors: dict, state0, scale: float):
        import torch

        self.backend, self.forward, self.t, self.state0, self.scale = backend, forward, tensors, state0, scale
        self.torch = torch
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)

    def _step(self) -> None:
        self._recurrent(self.t["q"], self.t["k"], self.t["v"])

    def _recurrent(self, q, k, v) -> None:
        """fla's step on q, k, v ([M, 1, H, 128] bf16) and this launch's g, beta, state and o."""
        t = self.t
        self.forward(q=q, k=k, v=v, g=t["g"], beta=t["beta"],
                     initial_state=t["state"], inplace_final_state=True, output_final_state=False,
                     scale=self.scale, use_qk_l2norm_in_kernel=True, out=t["o"])

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.t["state"].copy_(self.state0)
            self.t["o"].view(self.torch.int16).fill_(-1)  # 0xFFFF: bf16 NaN

    def __call__(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self._step()

    @classmethod
    def capture_many(cls, launches: "list[_FlaLaunch]"):
        """Capture the steps of ``launches`` (each on its own tensors) back to back into ONE CUDA
        graph on our stream, through torch's graph API as its docs prescribe (the Triton launch
        goes through torch's stream and allocator); capturing does not execute the steps. Returns
        the replay. Each launch ran once in ``build`` (Triton JIT, autotune-free here)."""
        first = launches[0]
        torch = first.torch
        first.backend.stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=first.ext):
            for launch in launches:
                launch._step()

        def replay() -> None:
            with torch.cuda.stream(first.ext):
                graph.replay()
        replay.graph = graph  # keep the graph alive with its replay
        return replay

    def outputs(self) -> dict[str, np.ndarray]:
        torch = self.torch
        self.backend.stream.synchronize()
        with torch.cuda.stream(self.ext):
            o = self.t["o"].to(torch.float64).cpu().numpy()
            state = self.t["state"].to(torch.float64).cpu().numpy()
        M, H = o.shape[0], o.shape[2]
        return {"o": o.reshape(M, H, -1), "state": state}


def torch_on(a: np.ndarray, shape, device) -> "torch.Tensor":
    """A host input as a torch tensor of ``shape`` on ``device``: uint16 (bf16 bits) as bfloat16,
    anything else in its own dtype."""
    import torch

    host = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16) \
        if a.dtype == np.uint16 else torch.from_numpy(np.ascontiguousarray(a))
    return host.reshape(shape).to(device)


def fla_step_tensors(inputs: dict, M: int, H: int, K: int, V: int, device) -> tuple[dict, "torch.Tensor"]:
    """fla's g, beta and o ([M, 1, H, ...]) and the initial state (its own dtype), on ``device``."""
    import torch

    t = {"g": torch_on(inputs["g"], (M, 1, H, K), device),
         "beta": torch_on(inputs["beta"], (M, 1, H), device),
         "o": torch.empty((M, 1, H, V), dtype=torch.bfloat16, device=device)}
    return t, torch_on(inputs["state"], (M, H, K, V), device)


def fla_ready(launch: "_FlaLaunch", backend) -> "_FlaLaunch":
    """Run the launch once (Triton compiles, and autotunes where a kernel does, before any capture
    or timed sample), then restore its inputs."""
    launch()
    launch.poison()
    backend.stream.synchronize()
    return launch


def build_fla(geometry, point, inputs, backend) -> _FlaLaunch:
    reason = supports_fla(geometry, point)
    if reason:
        raise RuntimeError(reason)
    import torch

    forward = _fla_forward()
    M, H, K, V, _ = _check_inputs(geometry, point, inputs)
    _, _, _, scale, _ = _dims(geometry)
    device = torch.device("cuda", getattr(backend, "device_id", 0))
    ext = torch.cuda.ExternalStream(backend.stream.ptr)
    with torch.cuda.stream(ext):
        t, state0 = fla_step_tensors(inputs, M, H, K, V, device)
        t.update(q=torch_on(inputs["q"], (M, 1, H, K), device), k=torch_on(inputs["k"], (M, 1, H, K), device),
                 v=torch_on(inputs["v"], (M, 1, H, V), device), state=state0.clone())
    backend.stream.synchronize()
    return fla_ready(_FlaLaunch(backend, forward, t, state0, scale), backend)


PEER_VARIANTS: tuple[Variant, ...] = (
    Variant("fla_fused_recurrent", "cuda", build_fla,
            why="fla 0.6 Triton fused_recurrent_kda kernel (via fused_recurrent_kda_fwd with "
                "inplace_final_state=True: the public wrapper forces a fresh fp32 state), T=1, "
                "in-kernel l2norm, state updated in place in its own dtype",
            supports=supports_fla, peer=True, packages=FLA_PACKAGES),
)
