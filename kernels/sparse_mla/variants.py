"""Launchers and declarations of the sparse MLA variants and of the gather roofline.

- ``split_cc`` (CUDA cores): ``split_cc.cu``; each stream's selection split over several CTAs
  (M = 32 streams are a quarter of 132 SMs), partial softmax states combined by log-sum-exp in a
  second kernel (``sparse_mla_combine``).
- ``split_mma`` / ``split_mma_fp8`` (tensor cores): ``split_mma.cu`` / ``split_mma_fp8.cu``, one
  template (``sparse_mla_split_mma.cuh``) over the BF16 and the FP8 latent.
- ``split_wgmma`` (tensor cores, Hopper warpgroup MMA, sm_90a, BF16): ``split_wgmma.cu``, the same split
  and combine; compiled with ``WGMMA_OPTIONS`` (``-arch=sm_90a``), as scan_wgmma_e4m3 is.
- ``split_wgmma_ws`` / ``split_wgmma_ws_fp8`` (sm_90a, BF16 / FP8): ``split_wgmma_ws.cu``, split_wgmma's
  math in two consumer warpgroups fed by a producer warpgroup through an mbarrier ring.
- ``split_wgmma_seesaw`` (sm_90a, BF16): ``split_wgmma_seesaw.cu``, the same split and combine with the
  two warpgroups on alternate 32-slot tiles (each the full-depth S and softmax of its own, P handed
  over as register fragments), so one's softmax runs under the other's wgmmas.
- ``split_wgmma_coop_1wave`` (sm_90a, BF16): split_wgmma_1wave with the combine in the kernel, launched
  cooperatively (each CTA merges a share of its row after the row's partials are in).
- ``split_wgmma_resident_1wave`` (component ``sparse_mla_math``): split_wgmma_1wave with its gather taken
  out (one resident tile; the op is the attention over each stream's first 64 slots): the design's math
  and synchronisation alone, the compute ceiling beside the gather one.
- ``torch_gather_bmm`` (peer): what an engineer writes in torch: gather the rows, two bmm and a
  softmax (FP8: the codes widened to BF16, the row scales applied to the scores and the weights).
- ``ref_sparse_mla`` (CPU backend): float32 NumPy on the host.
- ``gather_xor`` (component ``sparse_gather``): reads exactly the selected rows and XORs them into
  a checksum: the family's bandwidth ceiling, as the copy is for KDA; at fp8 the codes and scales.
- ``gather_ring_<rows>x<stages>`` (``sparse_gather``, BF16): the same rows and checksum moved by a
  cp.async shared-memory ring of the wgmma designs' shape, with no math: what that ring's depth
  delivers (NOTES.md).
- ``gather_tma``, ``gather_tma4``, ``gather_bulk`` (``sparse_gather``, BF16): the same rows and
  checksum through the bulk-copy engine (tensor-map boxes of one 128-byte row segment, kernels/tma.py,
  from 1 or 4 producer warps; 1-D bulk copies of whole rows): the rate a bulk-copy producer could
  feed a design (NOTES.md). ``gather_tma4_runs``: gather_tma4 with one box of 4 rows a segment over
  each run of 4 consecutive arena rows (the grouped selection's runs), a quarter of the requests there.

Each CUDA design reads one latent dtype; at the other, ``supports`` gives the reason.

Nothing here imports cupy or torch.cuda at import time.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np

from harness.cuda import KernelCall, KernelStep, get_kernel
from harness.registry import Launch, Variant
from kernels.kda_decode.reference import bf16_to_float
from kernels.wgmma import require_wgmma_device, wgmma_options

from . import spec
from .flashinfer_peer import FLASHINFER_VARIANTS

HERE = pathlib.Path(__file__).resolve().parent
THREADS = 256
COMBINE_THREADS = 128


def source_define(source: str, name: str) -> int:
    """``#define NAME <integer literal>`` of one of this family's .cu files (what the launcher must
    give the kernel: its dynamic shared memory, its block size), read from the source, or from a
    local header it includes (breadth first), so the two are declared once."""
    path = HERE / source
    seen: set[pathlib.Path] = set()
    todo = [path]
    while todo:                      # the source, then the local headers it includes
        f = todo.pop(0)
        if f in seen:
            continue
        seen.add(f)
        text = f.read_text()
        found = re.search(rf"#define\s+{name}\s+\(?([0-9]+)\)?\s", text)
        if found:
            return int(found.group(1))
        todo += [f.parent / inc for inc in re.findall(r'^#include\s+"([^"]+)"', text, re.M)
                 if (f.parent / inc).is_file()]
    raise RuntimeError(f"{source} (with the headers it includes) defines no {name}")


def pick_splits(M: int, W: int, sms: int, quantum: int) -> int:
    """Splits of a W-slot row (each a multiple of ``quantum`` slots): the fewest that give at least
    one CTA per SM, else the most there are; a split count that fills the last wave best wins ties."""
    choices = [d for d in range(1, W // quantum + 1) if (W // quantum) % d == 0]
    enough = [d for d in choices if M * d >= sms]
    if not enough:
        return choices[-1]
    return min(enough[:3], key=lambda d: (-(M * d % sms or sms) / sms, d))


# Device memory a job needs beyond its arena: the FP8 build's chunk temporaries (~1 GiB), the
# torch peer's gathered [M, W, 512] copy and scores (<= 1 GiB at M = 64 dense), q, out, partials.
DEVICE_HEADROOM = 8 << 30


def _arena_fits(geometry, point) -> str | None:
    """A reason when the arena and the job's working set would not fit the current device's
    memory (context 1048576 at large M and arena_scale); None when they fit or no device is there
    to ask (the build then says why)."""
    try:
        import cupy

        total = int(cupy.cuda.runtime.memGetInfo()[1])
    except Exception:
        return None
    need = spec.arena_nbytes(geometry, point) + DEVICE_HEADROOM
    if need > total:
        return (f"the {point['latent_dtype']} arena needs {spec.arena_nbytes(geometry, point) / 2**30:.1f} GiB "
                f"(+ {DEVICE_HEADROOM >> 30} GiB working set); the device has {total / 2**30:.1f} GiB")
    return None


def one_wave_splits(M: int, W: int, sms: int, min_slots: int = 64) -> int:
    """Splits of a W-slot row for one wave of CTAs: as many as put M x splits <= sms (one CTA an
    SM at most, so no SM runs a second CTA's prologue), but no split shorter than ``min_slots``;
    the chunks are W / splits slots, ragged (the split kernels mask a partial last tile)."""
    return max(1, min(sms // M, W // min_slots))


def _supports_cuda(geometry, point) -> str | None:
    H, D, _ = spec.dims(geometry)
    if (H, D) != (64, 512):
        return f"the sparse MLA kernels are written for 64 heads x 512; got {H} x {D}"
    if spec.width(geometry, point) % 64:
        return f"selection width {spec.width(geometry, point)} is not a multiple of 64"
    return _arena_fits(geometry, point)


def _supports_latent(name: str, latent: str, base):
    """``base``'s reason, or one when the point's latent dtype is not the one ``name`` reads."""
    def supports(geometry, point) -> str | None:
        if point["latent_dtype"] != latent:
            return (f"{name} reads the {latent} latent; latent_dtype={point['latent_dtype']} runs in "
                    f"{', '.join(n for n, d in SPLIT_DESIGNS.items() if d[4] == point['latent_dtype'])}")
        return base(geometry, point)
    return supports


class _Device:
    """The inputs on the device: q, the page table and the selection (the arena is resident;
    ``arena_args`` are the pointers a kernel of the point's latent dtype takes for it)."""

    def __init__(self, backend, inputs, point):
        self.q = backend.to_device(inputs["q"])
        self.page_table = backend.to_device(inputs["page_table"])
        self.selection = backend.to_device(inputs["selection"])
        arena = inputs.resident["arena"]
        if point["latent_dtype"] == "fp8":
            self.arena_args = spec.fp8_parts(arena, spec.arena_total_rows(point))   # codes, scales
        else:
            self.arena_args = (arena,)


# split_wgmma.cu's NVRTC options: sm_90a and the define that switches its wgmma body on (kernels/wgmma.py)
WGMMA_OPTIONS = wgmma_options("SPARSE_MLA_WGMMA_SM90A")

# A split design: its file, its kernel, the #defines that size its launch, the latent it reads.
SPLIT_DESIGNS = {
    "split_cc": ("split_cc.cu", "sparse_mla_split_cc", "SPARSE_MLA_SPLIT_SMEM_BYTES", None, "bf16"),
    "split_mma": ("split_mma.cu", "sparse_mla_split_mma", "SPARSE_MLA_SPLIT_MMA_SMEM_BYTES",
                  "SPARSE_MLA_SPLIT_MMA_THREADS", "bf16"),
    "split_mma_fp8": ("split_mma_fp8.cu", "sparse_mla_split_mma_fp8", "SPARSE_MLA_SPLIT_MMA_FP8_SMEM_BYTES",
                      "SPARSE_MLA_SPLIT_MMA_FP8_THREADS", "fp8"),
    "split_mma_ahead": ("split_mma_ahead.cu", "sparse_mla_split_mma_ahead", "SPARSE_MLA_SPLIT_MMA_AHEAD_SMEM_BYTES",
                        "SPARSE_MLA_SPLIT_MMA_AHEAD_THREADS", "bf16"),
    "split_mma_fp8_ahead": ("split_mma_ahead.cu", "sparse_mla_split_mma_fp8_ahead",
                            "SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_SMEM_BYTES", "SPARSE_MLA_SPLIT_MMA_FP8_AHEAD_THREADS", "fp8"),
    "split_wgmma": ("split_wgmma.cu", "sparse_mla_split_wgmma", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES",
                    "SPARSE_MLA_SPLIT_WGMMA_THREADS", "bf16"),
    "split_wgmma_t32": ("split_wgmma.cu", "sparse_mla_split_wgmma_t32", "SPARSE_MLA_SPLIT_WGMMA_T32_SMEM_BYTES",
                        "SPARSE_MLA_SPLIT_WGMMA_THREADS", "bf16"),
    "split_wgmma_ws": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws", "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES",
                       "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_fp8": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_fp8", "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES",
                           "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "fp8"),
    "split_wgmma_ws_nol2": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_nol2", "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES",
                            "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async", "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES",
                             "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_bf16p": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bf16p",
                                   "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_bulkp": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp",
                                   "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_bulkp16": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp16",
                                     "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_qearly_bulkp16": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_qearly_bulkp16",
                                            "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS",
                                            "bf16"),
    # the bulk-store designs again, their partials merged by the batched combine (BATCHED_COMBINES)
    "split_wgmma_ws_async_bulkp_cb": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp",
                                      "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_bulkp16_cb": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp16",
                                        "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    # the bulk-store designs as a programmatic pair with their combine (PROGRAMMATIC)
    "split_wgmma_ws_async_bulkp_pdl": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp_pdl",
                                       "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_bulkp16_pdl": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_bulkp16_pdl",
                                         "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS",
                                         "bf16"),
    "split_wgmma_ws_async_qearly_bulkp16_pdl": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_qearly_bulkp16_pdl",
                                                "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES",
                                                "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_async_qearly": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_qearly",
                                    "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_ws_alt": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_alt", "SPARSE_MLA_SPLIT_WGMMA_WS_ALT_SMEM_BYTES",
                           "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS", "bf16"),
    "split_wgmma_lean": ("split_wgmma.cu", "sparse_mla_split_wgmma_lean", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES",
                         "SPARSE_MLA_SPLIT_WGMMA_THREADS", "bf16"),
    "split_wgmma_resident": ("split_wgmma.cu", "sparse_mla_split_wgmma_resident", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES",
                             "SPARSE_MLA_SPLIT_WGMMA_THREADS", "bf16"),
    "split_wgmma_seesaw": ("split_wgmma_seesaw.cu", "sparse_mla_split_wgmma_seesaw", "SPARSE_MLA_SEESAW_SMEM_BYTES",
                           "SPARSE_MLA_SEESAW_THREADS", "bf16"),
}
# The designs whose partial accumulators are BF16 (the rest: FP32): their combine is
# sparse_mla_combine_bf16p (the rest: sparse_mla_combine).
BF16_PARTIALS = {"split_wgmma_ws_async_bf16p", "split_wgmma_ws_async_bulkp16", "split_wgmma_ws_async_qearly_bulkp16",
                 "split_wgmma_ws_async_bulkp16_cb", "split_wgmma_ws_async_bulkp16_pdl",
                 "split_wgmma_ws_async_qearly_bulkp16_pdl"}
# The designs whose partials go through that combine's batched form (<combine>_batched).
BATCHED_COMBINES = ("split_wgmma_ws_async_bulkp_cb", "split_wgmma_ws_async_bulkp16_cb")
# The designs launched as a programmatic pair (the step's dependent launch): the split kernel triggers
# its dependents at entry and the combine's programmatic form (<combine>_pdl) waits on griddepcontrol
# before reading the partials.
PROGRAMMATIC = ("split_wgmma_ws_async_bulkp_pdl", "split_wgmma_ws_async_bulkp16_pdl",
                "split_wgmma_ws_async_qearly_bulkp16_pdl")


def combine_kernel(name: str) -> str:
    """The combine kernel that reads design ``name``'s partials."""
    combine = "sparse_mla_combine_bf16p" if name in BF16_PARTIALS else "sparse_mla_combine"
    return combine + ("_batched" if name in BATCHED_COMBINES else "_pdl" if name in PROGRAMMATIC else "")


# The designs that compile with extra NVRTC options (the rest with none): every wgmma source.
SPLIT_OPTIONS = {name: WGMMA_OPTIONS for name, design in SPLIT_DESIGNS.items()
                 if design[0] in ("split_wgmma.cu", "split_wgmma_ws.cu", "split_wgmma_seesaw.cu")}


def _supports_split(name: str):
    return _supports_latent(name, SPLIT_DESIGNS[name][4], _supports_cuda)


def _attention_step(backend, kernels: list, buffers: dict, poison: dict, note: str,
                    dependent: bool = False) -> KernelStep:
    """A sparse MLA design's step over its buffers, read back as the component's out (bf16 decoded)
    and lse; poisoned and ready. Plain stream order, or with ``dependent`` each kernel after the first
    a programmatic dependent of the one before (every kernel of the step waits on griddepcontrol)."""
    step = KernelStep(backend, kernels, buffers, {}, poison, lambda b: {
        "out": _bf16(backend.to_host(b["out"])), "lse": backend.to_host(b["lse"]).astype(np.float64)},
        dependent=dependent)
    step.note = note
    return step.ready()


def _make_split_build(name: str, one_wave: bool = False):
    """The launcher of design ``name``; ``one_wave``: fewer, longer splits (``one_wave_splits``)
    instead of ``pick_splits``'s 32-slot multiples that fill the last wave."""
    source, symbol, smem_define, threads_define, _ = SPLIT_DESIGNS[name]
    options = SPLIT_OPTIONS.get(name, ())
    supports = _supports_split(name)

    def build(geometry, point, inputs, backend) -> KernelStep:
        reason = supports(geometry, point)
        if reason:
            raise ValueError(f"{name}: {reason}")
        if options == WGMMA_OPTIONS:
            require_wgmma_device(name, backend)
        cp = backend.cp
        H, D, scale = spec.dims(geometry)
        Mn, W = int(point["M"]), spec.width(geometry, point)
        d = _Device(backend, inputs, point)
        sms = int(backend.props["multiProcessorCount"])
        splits = one_wave_splits(Mn, W, sms) if one_wave else pick_splits(Mn, W, sms, 32)
        smem = source_define(source, smem_define)
        threads = source_define(source, threads_define) if threads_define else THREADS
        split_fn = get_kernel(backend, HERE / source, symbol, smem, options=options)
        combine_fn = get_kernel(backend, HERE / source, combine_kernel(name), options=options)
        part_dtype = cp.uint16 if name in BF16_PARTIALS else cp.float32   # bf16 bits, or FP32
        with backend.stream:
            buffers = {"part_acc": cp.empty((Mn, splits, H, D), part_dtype),
                       "part_ml": cp.empty((Mn, splits, H, 2), cp.float32),
                       "out": cp.empty((Mn, H, D), cp.uint16), "lse": cp.empty((Mn, H), cp.float32)}
        pps, ps = np.int32(spec.pages_per_stream(point)), np.int32(point["page_size"])
        kernels = [
            KernelCall(split_fn, (splits, Mn), threads, smem, lambda b: (
                d.q, *d.arena_args, d.page_table, d.selection, b["part_acc"], b["part_ml"], np.int32(Mn),
                np.int32(W), pps, ps, np.int32(splits), np.float32(scale))),
            KernelCall(combine_fn, Mn * H, COMBINE_THREADS, 0, lambda b: (
                b["part_acc"], b["part_ml"], b["out"], b["lse"], np.int32(Mn), np.int32(splits))),
        ]
        poison = {"part_acc": 0xFFFF if name in BF16_PARTIALS else np.float32(np.nan), "part_ml": np.float32(np.nan),
                  "out": 0xFFFF, "lse": np.float32(np.nan)}
        return _attention_step(backend, kernels, buffers, poison, f"{splits} splits per stream"
                               + (", the combine a programmatic dependent" if name in PROGRAMMATIC else ""),
                               dependent=name in PROGRAMMATIC)

    build.__name__ = f"build_{name}{'_1wave' if one_wave else ''}"
    return build


# The cooperative-combine designs (one_wave_splits, the combine inside the kernel): variant name ->
# (file, kernel, the #defines of its shared memory and threads). The DSA layer's step launches one of
# them too (coop_kernel).
COOP_DESIGNS = {
    "split_wgmma_coop_1wave": ("split_wgmma.cu", "sparse_mla_split_wgmma_coop", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES",
                               "SPARSE_MLA_SPLIT_WGMMA_THREADS"),
    "split_wgmma_lean_coop_1wave": ("split_wgmma.cu", "sparse_mla_split_wgmma_lean_coop",
                                    "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_THREADS"),
    "split_wgmma_ws_async_coop_1wave": ("split_wgmma_ws.cu", "sparse_mla_split_wgmma_ws_async_coop",
                                        "SPARSE_MLA_SPLIT_WGMMA_WS_SMEM_BYTES", "SPARSE_MLA_SPLIT_WGMMA_WS_THREADS"),
}


def current_device_sms() -> int | None:
    """The current CUDA device's SM count; None where no device is there to ask."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["multiProcessorCount"])
    except Exception:
        return None


def coop_grid_problem(name: str, Mn: int, W: int, sms: int | None) -> str | None:
    """Why cooperative design ``name``'s one-wave grid at M = Mn cannot be resident at once on a
    device of ``sms`` SMs (one CTA an SM, so M x splits <= sms); None when it can or sms is unknown."""
    if sms is None:
        return None
    splits = one_wave_splits(Mn, W, sms)
    if Mn * splits > sms:
        return f"{name}: M = {Mn} needs {Mn * splits} CTAs resident at once; this device holds {sms}"
    return None


def supports_coop(name: str, base):
    """``base``'s reason, or the current device's refusal of cooperative design ``name``'s grid
    (coop_grid_problem): a skipped row where the launch would only be refused at build."""
    def supports(geometry, point) -> str | None:
        return base(geometry, point) or coop_grid_problem(
            name, int(point["M"]), spec.width(geometry, point), current_device_sms())
    return supports


def coop_kernel(backend, name: str, Mn: int, W: int, args) -> tuple[KernelCall, int]:
    """Cooperative design ``name``'s one launch at M = Mn over W-slot rows, and its splits
    (one_wave_splits). ``args(b)`` gives the kernel's arguments from the step's buffers (its
    signature: q, arena..., page_table, selection, part_acc, part_ml, out, lse, row_count, M, W,
    pages_per_stream, page_size, splits, scale). Refused in one line (ValueError) where the grid
    cannot be resident at once: one CTA an SM, so M x splits <= the SMs."""
    require_wgmma_device(name, backend)
    sms = int(backend.props["multiProcessorCount"])
    problem = coop_grid_problem(name, Mn, W, sms)
    if problem:
        raise ValueError(problem)
    splits = one_wave_splits(Mn, W, sms)
    source, symbol, smem_define, threads_define = COOP_DESIGNS[name]
    smem = source_define(source, smem_define)
    fn = get_kernel(backend, HERE / source, symbol, smem, options=WGMMA_OPTIONS)
    return KernelCall(fn, (splits, Mn), source_define(source, threads_define), smem, args, cooperative=True), splits


def coop_row_tickets(cp, Mn: int):
    """A cooperative design's row counters (row_count): zero at build and never reset (the kernel's
    tickets count launches); 64 bits, the kernel's type (wg_coop_combine says why)."""
    return cp.zeros(Mn, cp.uint64)


def _make_coop_build(name: str, split_design: str):
    """The launcher of cooperative design ``name`` (COOP_DESIGNS), which runs ``split_design``'s
    split, holding its row counters (coop_row_tickets)."""
    supports = _supports_split(split_design)

    def build(geometry, point, inputs, backend) -> KernelStep:
        reason = supports(geometry, point)
        if reason:
            raise ValueError(f"{name}: {reason}")
        cp = backend.cp
        H, D, scale = spec.dims(geometry)
        Mn, W = int(point["M"]), spec.width(geometry, point)
        d = _Device(backend, inputs, point)
        pps, ps = np.int32(spec.pages_per_stream(point)), np.int32(point["page_size"])
        call, splits = coop_kernel(backend, name, Mn, W, lambda b: (
            d.q, *d.arena_args, d.page_table, d.selection, b["part_acc"], b["part_ml"], b["out"], b["lse"],
            b["row_count"], np.int32(Mn), np.int32(W), pps, ps, np.int32(splits), np.float32(scale)))
        with backend.stream:
            buffers = {"part_acc": cp.empty((Mn, splits, H, D), cp.float32),
                       "part_ml": cp.empty((Mn, splits, H, 2), cp.float32),
                       "out": cp.empty((Mn, H, D), cp.uint16), "lse": cp.empty((Mn, H), cp.float32),
                       "row_count": coop_row_tickets(cp, Mn)}
        poison = {"part_acc": np.float32(np.nan), "part_ml": np.float32(np.nan), "out": 0xFFFF,
                  "lse": np.float32(np.nan)}
        return _attention_step(backend, [call], buffers, poison,
                               f"{splits} splits per stream, the combine in the kernel (cooperative launch)")
    build.__name__ = f"build_{name}"
    return build


def _coop_variant(name: str, split_design: str, why: str) -> Variant:
    """Cooperative design ``name`` (COOP_DESIGNS) as a variant: its launcher, and the supports of
    the split design it runs (``split_design``) plus the device's residency (supports_coop)."""
    return Variant(name, "cuda", _make_coop_build(name, split_design), why=why,
                   supports=supports_coop(name, _supports_split(split_design)), sources=(COOP_DESIGNS[name][0],))


def _one_wave_variant(design: str) -> Variant:
    """``<design>_1wave``: design's kernels with split_mma_1wave's splits (one wave of CTAs)."""
    return Variant(f"{design}_1wave", "cuda", _make_split_build(design, one_wave=True),
                   why=f"{design} with split_mma_1wave's splits (one wave of CTAs, ragged chunks)",
                   supports=_supports_split(design), sources=(SPLIT_DESIGNS[design][0],))


# split_wgmma.cu's cluster kernels (sparse_mla_split_wgmma_t32_c<CS>): a cluster's CTAs split the
# 512 output columns, so CS divides 512; 8 is the portable cluster limit.
CLUSTER_SIZES = (2, 4, 8)
CLUSTER_MIN_M = 4   # below, the two-kernel forms (split_wgmma_t32_1wave): the lead's task, issue 13


def cluster_splits(M: int, W: int, sms: int) -> int | None:
    """Splits (= CTAs of one cluster) of a stream for the cluster form: the largest of CLUSTER_SIZES
    not above one_wave_splits (one wave of CTAs, no split shorter than 64 slots); None where not
    even 2 fit (M > sms / 2) or M < CLUSTER_MIN_M."""
    if M < CLUSTER_MIN_M:
        return None
    fit = [cs for cs in CLUSTER_SIZES if cs <= one_wave_splits(M, W, sms)]
    return fit[-1] if fit else None


CLUSTER_SOURCE = "split_wgmma.cu"
# The cluster forms: (kernel prefix, the #define of their dynamic shared memory, the two-kernel
# variant of the same tile that runs M below CLUSTER_MIN_M).
CLUSTER_FORMS = {
    "split_wgmma_t32_cluster": ("sparse_mla_split_wgmma_t32_c", "SPARSE_MLA_SPLIT_WGMMA_T32_SMEM_BYTES",
                                "split_wgmma_t32_1wave"),
    "split_wgmma_cluster": ("sparse_mla_split_wgmma_c", "SPARSE_MLA_SPLIT_WGMMA_SMEM_BYTES", "split_wgmma_1wave"),
}


def _supports_cluster(name: str):
    def supports(geometry, point) -> str | None:
        reason = _supports_split("split_wgmma")(geometry, point)
        if reason:
            return reason.replace("split_wgmma reads", f"{name} reads")
        M = int(point["M"])
        if M < CLUSTER_MIN_M:
            return (f"{name} runs M >= {CLUSTER_MIN_M}; M = {M} runs in {CLUSTER_FORMS[name][2]} "
                    f"(split + combine kernels)")
        sms = _device_sms()
        if cluster_splits(M, spec.width(geometry, point), sms) is None:
            return f"{name} needs 2 CTAs a stream in one wave (M <= {sms // 2} on {sms} SMs); M = {M}"
        return None
    return supports


def _device_sms(default: int = 132) -> int:
    """The current device's SM count; the H200's 132 where no device can be asked (CPU tests)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["multiProcessorCount"])
    except Exception:
        return default


def _make_cluster_build(name: str):
    """A cluster form's launcher: the split kernel with the combine done by the stream's cluster
    through distributed shared memory; one launch, out and lse written by the split kernel."""
    prefix, smem_define, _ = CLUSTER_FORMS[name]
    supports = _supports_cluster(name)

    def build(geometry, point, inputs, backend) -> KernelStep:
        reason = supports(geometry, point)
        if reason:
            raise ValueError(f"{name}: {reason}")
        require_wgmma_device(name, backend)
        cp = backend.cp
        H, D, scale = spec.dims(geometry)
        Mn, W = int(point["M"]), spec.width(geometry, point)
        sms = int(backend.props["multiProcessorCount"])
        cs = cluster_splits(Mn, W, sms)
        if cs is None:
            raise ValueError(f"{name}: M = {Mn} leaves fewer than 2 CTAs a stream on {sms} SMs")
        d = _Device(backend, inputs, point)
        smem = source_define(CLUSTER_SOURCE, smem_define)
        fn = get_kernel(backend, HERE / CLUSTER_SOURCE, f"{prefix}{cs}", smem, options=WGMMA_OPTIONS)
        with backend.stream:
            buffers = {"out": cp.empty((Mn, H, D), cp.uint16), "lse": cp.empty((Mn, H), cp.float32)}
        pps, ps = np.int32(spec.pages_per_stream(point)), np.int32(point["page_size"])
        threads = source_define(CLUSTER_SOURCE, "SPARSE_MLA_SPLIT_WGMMA_THREADS")
        kernels = [KernelCall(fn, (cs, Mn), threads, smem, lambda b: (
            d.q, *d.arena_args, d.page_table, d.selection, b["out"], b["lse"], np.int32(Mn), np.int32(W), pps, ps,
            np.int32(cs), np.float32(scale)))]
        return _attention_step(backend, kernels, buffers, {"out": 0xFFFF, "lse": np.float32(np.nan)},
                               f"{cs} splits per stream, one cluster of {cs} CTAs")

    build.__name__ = f"build_{name}"
    return build


def _bf16(bits: np.ndarray) -> np.ndarray:
    return bf16_to_float(bits).astype(np.float64)


GATHER_SYMBOLS = {"bf16": "sparse_gather_xor", "fp8": "sparse_gather_xor_fp8"}


def _gather_step(backend, point, fn, splits: int, W: int, threads: int, smem: int, args: tuple) -> KernelStep:
    """The gather roofline's step: one kernel over grid (splits, M) writing partial
    [M][splits][words], whose XOR over the splits is each stream's checksum; ``args`` the kernel's
    arguments before partial."""
    cp = backend.cp
    Mn = int(point["M"])
    with backend.stream:
        buffers = {"partial": cp.empty((Mn, splits, spec.checksum_words(point)), cp.uint32)}
    pps, ps = np.int32(spec.pages_per_stream(point)), np.int32(point["page_size"])
    kernels = [KernelCall(fn, (splits, Mn), threads, smem, lambda b: (
        *args, b["partial"], np.int32(Mn), np.int32(W), pps, ps, np.int32(splits)))]
    # Poison with a pattern no XOR of a CTA's rows is likely to leave: a partial that is never
    # written corrupts its stream's checksum.
    step = KernelStep(backend, kernels, buffers, {}, {"partial": np.uint32(0xA5A5A5A5)}, lambda b: {
        "checksum": np.bitwise_xor.reduce(backend.to_host(b["partial"]), axis=1)}, dependent=False)
    step.note = f"{splits} CTAs per stream"
    return step.ready()


def build_gather(geometry, point, inputs, backend) -> KernelStep:
    reason = _supports_cuda(geometry, point)
    if reason:
        raise ValueError(f"gather_xor: {reason}")
    Mn, W = int(point["M"]), spec.width(geometry, point)
    d = _Device(backend, inputs, point)
    splits = pick_splits(Mn, W, int(backend.props["multiProcessorCount"]), 8)
    fn = get_kernel(backend, HERE / "gather.cu", GATHER_SYMBOLS[point["latent_dtype"]])
    return _gather_step(backend, point, fn, splits, W, THREADS, 0, (*d.arena_args, d.page_table, d.selection))


def _supports_gather_tma(geometry, point) -> str | None:
    if point["latent_dtype"] != "bf16":
        return f"the TMA gathers read the bf16 latent; latent_dtype={point['latent_dtype']} runs in gather_xor"
    return _supports_cuda(geometry, point)


# The bulk-copy gathers: variant -> kernel (gather.cu's gather_tma_body: tensor-map boxes from 1 and
# 4 producer warps, and 1-D bulk row copies, which take the arena instead of a tensor map)
GATHER_TMA_SYMBOLS = {"gather_tma": "sparse_gather_tma", "gather_tma4": "sparse_gather_tma4",
                      "gather_tma4_runs": "sparse_gather_tma4_runs", "gather_bulk": "sparse_gather_bulk"}


def build_gather_tma(name: str):
    """The launcher of a TMA gather: one wave of one CTA an SM, the arena through a 2-D tensor map
    of 64-element, one-row boxes with the 128-byte swizzle (one segment of a wgmma tile row)."""
    def build(geometry, point, inputs, backend) -> KernelStep:
        return _build_gather_tma(name, geometry, point, inputs, backend)
    build.__name__ = f"build_{name}"
    return build


def _build_gather_tma(name, geometry, point, inputs, backend) -> KernelStep:
    from kernels import tma

    reason = _supports_gather_tma(geometry, point)
    if reason:
        raise ValueError(f"{name}: {reason}")
    cp = backend.cp
    Mn, W = int(point["M"]), spec.width(geometry, point)
    _, D, _ = spec.dims(geometry)
    d = _Device(backend, inputs, point)
    (arena,) = d.arena_args
    if name == "gather_bulk":
        src = arena
    else:
        boxes = ((64, 1), (64, 4)) if name == "gather_tma4_runs" else ((64, 1),)   # the runs' map at + 128 B
        desc = b"".join(tma.encode_2d(int(arena.data.ptr), spec.arena_total_rows(point), D, 2, 2 * D, box, "128B")
                        for box in boxes)
        with backend.stream:
            src = cp.asarray(np.frombuffer(desc, np.uint8))   # device allocations are 256-B aligned
    splits = one_wave_splits(Mn, W, int(backend.props["multiProcessorCount"]))
    smem = source_define("gather.cu", "GTMA_SMEM")
    fn = get_kernel(backend, HERE / "gather.cu", GATHER_TMA_SYMBOLS[name], smem)
    return _gather_step(backend, point, fn, splits, W, source_define("gather.cu", "GTMA_THREADS"), smem,
                        (src, d.page_table, d.selection))


SMEM_LIMIT = 232448   # dynamic shared memory one CTA may take on sm_90 (227 KiB)
# The cp.async ring gathers (gather.cu's gather_ring_body): variant -> (rows a stage, stages)
GATHER_RING = {f"gather_ring_{t}x{n}": (t, n) for t, n in ((64, 2), (32, 4), (64, 3), (32, 6))}


def _supports_gather_ring(geometry, point) -> str | None:
    if point["latent_dtype"] != "bf16":
        return f"the ring gathers read the bf16 latent; latent_dtype={point['latent_dtype']} runs in gather_xor"
    return _supports_cuda(geometry, point)


def build_gather_ring(name: str):
    """The launcher of a ring gather: split_wgmma_1wave's grid (one_wave_splits, one CTA an SM)."""
    rows, stages = GATHER_RING[name]
    symbol, ring_define = f"sparse_gather_ring_{rows}x{stages}", f"GRING_RING_{rows}x{stages}"

    def build(geometry, point, inputs, backend) -> KernelStep:
        reason = _supports_gather_ring(geometry, point)
        if reason:
            raise ValueError(f"{name}: {reason}")
        Mn, W = int(point["M"]), spec.width(geometry, point)
        d = _Device(backend, inputs, point)
        splits = one_wave_splits(Mn, W, int(backend.props["multiProcessorCount"]))
        chunk = -(-W // splits)                                # the longest chunk, in slots
        smem = source_define("gather.cu", ring_define) + 4 * rows * -(-chunk // rows)   # the ring, the row list
        if smem > SMEM_LIMIT:
            raise ValueError(f"{name}: {chunk} slots a CTA need {smem} B of shared memory; an SM holds {SMEM_LIMIT}")
        fn = get_kernel(backend, HERE / "gather.cu", symbol, smem)
        return _gather_step(backend, point, fn, splits, W, source_define("gather.cu", "GRING_THREADS"), smem,
                            (*d.arena_args, d.page_table, d.selection))
    build.__name__ = f"build_{name}"
    return build


class _TorchGatherBmm(Launch):
    """torch, as an engineer writes it: rows gathered into a [M, W, D] copy, scores by bmm, masked
    softmax in float32, the weighted sum by bmm; on our stream. FP8: the gathered codes widened to
    BF16 (exact), the row scales applied to the float32 scores and to the softmax weights before
    their BF16 rounding, so both bmm run on the codes as the BF16 path runs on the rows."""

    def __init__(self, geometry, point, inputs, backend):
        import torch

        self.torch, self.backend = torch, backend
        H, D, self.scale = spec.dims(geometry)
        self.fp8 = point["latent_dtype"] == "fp8"
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)
        rows = spec.arena_rows(point, inputs["page_table"], inputs["selection"])
        dev = torch.device("cuda", backend.device_id)
        with torch.cuda.stream(self.ext):
            arena = torch.from_dlpack(inputs.resident["arena"])
            if self.fp8:
                R = spec.arena_total_rows(point)                       # spec.fp8_parts, for torch
                self.arena = arena[:R * D].view(R, D)                 # e4m3 codes as uint8
                self.row_scale = arena[R * D:].view(torch.float32)
            else:
                self.arena = arena.view(torch.bfloat16)
            self.rows = torch.from_numpy(np.where(rows >= 0, rows, 0)).to(dev)
            self.mask = torch.from_numpy(rows < 0).to(dev)
            self.q = torch.from_numpy(inputs["q"].view(np.int16)).to(dev).view(torch.bfloat16)
            self.out = torch.empty(self.q.shape, dtype=torch.bfloat16, device=dev)
            self.lse = torch.empty(self.q.shape[:2], dtype=torch.float32, device=dev)
        backend.stream.synchronize()

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.out.view(self.torch.int16).fill_(-1)
            self.lse.fill_(float("nan"))

    def __call__(self) -> None:
        torch = self.torch
        with torch.cuda.stream(self.ext):
            c = self.arena[self.rows]                                   # [M, W, D] bf16 (fp8: codes)
            if self.fp8:
                # gathered as uint8 (index kernels cover it), then widened: e4m3 is exact in BF16
                c = c.view(torch.float8_e4m3fn).to(torch.bfloat16)
                row_scale = self.row_scale[self.rows]                   # [M, W] float32
            s = torch.bmm(self.q, c.transpose(1, 2)).float() * self.scale  # [M, H, W]
            if self.fp8:
                s = s * row_scale[:, None, :]
            s.masked_fill_(self.mask[:, None, :], float("-inf"))
            self.lse.copy_(torch.logsumexp(s, dim=-1))
            p = torch.softmax(s, dim=-1)
            if self.fp8:
                p = p * row_scale[:, None, :]
            self.out.copy_(torch.bmm(p.to(torch.bfloat16), c))

    def outputs(self) -> dict[str, np.ndarray]:
        torch = self.torch
        self.backend.stream.synchronize()
        with torch.cuda.stream(self.ext):
            return {"out": self.out.double().cpu().numpy(), "lse": self.lse.double().cpu().numpy()}


def _supports_torch(geometry, point) -> str | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
    except Exception as exc:
        return f"torch not importable: {type(exc).__name__}: {exc}"
    return _arena_fits(geometry, point)


class _HostSparseMla(Launch):
    """CPU reference backend: float32 NumPy, every stream, reading the arena in place (FP8 rows
    dequantized). first: only the selection's first slots (sparse_mla_math's op)."""

    def __init__(self, geometry, point, inputs, first: int | None = None):
        _, _, self.scale = spec.dims(geometry)
        self.point, self.inputs = point, inputs
        selection = inputs["selection"] if first is None else inputs["selection"][:, :first]
        self.rows = spec.arena_rows(point, inputs["page_table"], selection)
        self.q = inputs["q"]

    def poison(self) -> None:
        self.out = np.full(self.q.shape, np.nan)
        self.lse = np.full(self.q.shape[:2], np.nan)

    def __call__(self) -> None:
        out, lse = [], []
        for m in range(len(self.q)):
            c = spec.latent(*spec.selected_rows(self.point, self.inputs, self.rows[m][self.rows[m] >= 0]))
            o, l = spec.attend(bf16_to_float(self.q[m]), c, self.scale)  # float32 throughout
            out.append(o)
            lse.append(l)
        self.out, self.lse = np.stack(out), np.stack(lse)

    def outputs(self) -> dict[str, np.ndarray]:
        return {"out": self.out.astype(np.float64), "lse": self.lse.astype(np.float64)}


class _HostGather(Launch):
    """CPU reference backend: the selected rows' XOR on the host (FP8: codes, then scales)."""

    def __init__(self, point, inputs):
        self.point, self.inputs = point, inputs
        self.rows = spec.arena_rows(point, inputs["page_table"], inputs["selection"])

    def poison(self) -> None:
        self.checksum = np.full((len(self.rows), spec.checksum_words(self.point)), 0xA5A5A5A5, np.uint32)

    def __call__(self) -> None:
        self.checksum = np.stack([spec.row_checksum(*spec.selected_rows(self.point, self.inputs, r[r >= 0]))
                                  for r in self.rows])

    def outputs(self) -> dict[str, np.ndarray]:
        return {"checksum": self.checksum.copy()}


MLA_VARIANTS = (
    Variant("split_cc", "cuda", _make_split_build("split_cc"),
            why="first design, CUDA cores: q staged in shared memory once, 32-row latent tiles by "
                "cp.async, online softmax, each stream's selection split over CTAs and combined by "
                "log-sum-exp; bound by CUDA-core FMA rate, not memory (NOTES.md)",
            supports=_supports_split("split_cc"), sources=("split_cc.cu",)),
    Variant("split_mma", "cuda", _make_split_build("split_mma"),
            why="split_cc's split and combine with both products on tensor cores (mma.sync m16n8k16 "
                "BF16, FP32 accumulation): q by ldmatrix from shared memory, a 4-tile cp.async ring "
                "of 32 rows, P rounded to BF16 straight from the score fragments into P.V",
            supports=_supports_split("split_mma"), sources=("split_mma.cu",)),
    Variant("split_mma_fp8", "cuda", _make_split_build("split_mma_fp8"),
            why="split_mma over the FP8 latent (same template): e4m3 codes (512 B a row) and row scales "
                "by cp.async in a 6-stage ring, widened to BF16 in shared memory once a tile, the row "
                "scale applied to the FP32 scores and to the softmax weights before their BF16 rounding",
            supports=_supports_split("split_mma_fp8"), sources=("split_mma_fp8.cu",)),
    # Part 2 (b) of issue 13, one cost at a time: the same kernels, fewer and longer splits.
    Variant("split_mma_1wave", "cuda", _make_split_build("split_mma", one_wave=True),
            why="split_mma with one wave of CTAs (splits = SMs // M, at least 64 slots a split: 4 at "
                "M = 32, 528 ragged slots each): one prologue per SM instead of three and 16 MiB of "
                "FP32 partials instead of 44 MiB, the same tiles per SM",
            supports=_supports_split("split_mma"), sources=("split_mma.cu",)),
    Variant("split_mma_fp8_1wave", "cuda", _make_split_build("split_mma_fp8", one_wave=True),
            why="split_mma_fp8 with split_mma_1wave's splits",
            supports=_supports_split("split_mma_fp8"), sources=("split_mma_fp8.cu",)),
    Variant("split_mma_ahead", "cuda", _make_split_build("split_mma_ahead"),
            why="split_mma with each tile's selection and page-table reads made one and two tiles "
                "early in registers (lane l = slot l, broadcast by shuffle): no dependent global "
                "round trip between a tile's barrier and its first MMA (the SASS of split_mma has two "
                "a row)",
            supports=_supports_split("split_mma_ahead"), sources=("split_mma_ahead.cu",)),
    Variant("split_mma_fp8_ahead", "cuda", _make_split_build("split_mma_fp8_ahead"),
            why="split_mma_fp8 with split_mma_ahead's early row resolution",
            supports=_supports_split("split_mma_fp8_ahead"), sources=("split_mma_ahead.cu",)),
    Variant("split_mma_ahead_1wave", "cuda", _make_split_build("split_mma_ahead", one_wave=True),
            why="split_mma_ahead with split_mma_1wave's splits: both costs removed",
            supports=_supports_split("split_mma_ahead"), sources=("split_mma_ahead.cu",)),
    Variant("split_wgmma", "cuda", _make_split_build("split_wgmma"),
            why="split_mma_ahead's split and early row resolution on Hopper's warpgroup MMA (sm_90a): two "
                "warpgroups own a latent half each, S by wgmma m64n64k16 from 128-byte-swizzled shared "
                "q and tile (SS), the two partial S summed through shared memory, P from registers into "
                "wgmma m64n256k16 with the same tile as the transposed B (RS): no ldmatrix, no "
                "duplicated S, 64-slot tiles in a 2-stage cp.async ring",
            supports=_supports_split("split_wgmma"), sources=("split_wgmma.cu",)),
    _one_wave_variant("split_wgmma"),
    # Issue 13, split_wgmma tuning (1): more bytes in flight an SM, the copy issue off S's path.
    Variant("split_wgmma_t32", "cuda", _make_split_build("split_wgmma_t32"),
            why="split_wgmma (same template) with 32-slot tiles in a 4-stage ring: 3 tiles (96 KiB) in "
                "flight while one computes instead of one 64 KiB tile, tile it + 3 issued under tile it's "
                "S wgmmas (m64n32k16 SS, bound by the shared-memory port: 1.5x its MMA time), PV in 2 "
                "k-steps of m64n256k16 RS",
            supports=_supports_split("split_wgmma_t32"), sources=("split_wgmma.cu",)),
    _one_wave_variant("split_wgmma_t32"),
    # Issue 13, split_wgmma tuning (2): no second launch, no partials round trip.
    Variant("split_wgmma_t32_cluster", "cuda", _make_cluster_build("split_wgmma_t32_cluster"),
            why="split_wgmma_t32 (one wave) with each stream's splits one thread-block cluster (2, 4 or 8 "
                "CTAs: the most of those within one_wave_splits, M >= 4): the (max, sum) exchanged and "
                "each CTA's O scaled by exp(max - gmax) in its own shared memory, then CTA r reduces "
                "columns [r 512 / CS, (r + 1) 512 / CS) over the cluster through distributed shared "
                "memory and writes out and lse: no combine kernel, no 16 MiB of partials",
            supports=_supports_cluster("split_wgmma_t32_cluster"), sources=("split_wgmma.cu",)),
    Variant("split_wgmma_cluster", "cuda", _make_cluster_build("split_wgmma_cluster"),
            why="split_wgmma (64-slot tiles, 2 stages: faster per tile than the 32-slot form on the H200) "
                "with split_wgmma_t32_cluster's combine in the stream's cluster: one launch, no partials",
            supports=_supports_cluster("split_wgmma_cluster"), sources=("split_wgmma.cu",)),
    # Issue 13, the warp-specialised design: the tile chain overlapped, BF16 and the FP8 latent.
    Variant("split_wgmma_ws", "cuda", _make_split_build("split_wgmma_ws"),
            why="split_wgmma's math in two consumer warpgroups fed by a producer warpgroup (384 threads, "
                "setmaxnreg 40 / 232): a 2-stage ring of 64-slot tiles with full / empty mbarriers (no "
                "CTA-wide barrier in the loop), the rows resolved ahead and tiles t + 1 .. t + 3 "
                "prefetched into L2 (prefetch.global.L2, 4 lines a producer thread a tile) while tile t "
                "is copied, so a tile's copy reads L2 and 192 KiB an SM are in flight from DRAM beyond the ring",
            supports=_supports_split("split_wgmma_ws"), sources=("split_wgmma_ws.cu",)),
    _one_wave_variant("split_wgmma_ws"),
    Variant("split_wgmma_ws_nol2_1wave", "cuda", _make_split_build("split_wgmma_ws_nol2", one_wave=True),
            why="split_wgmma_ws_1wave without the L2 look-ahead (the same kernel, no prefetch): the look-ahead's "
                "share once the consumers carry no copy work",
            supports=_supports_split("split_wgmma_ws_nol2"), sources=("split_wgmma_ws.cu",)),
    Variant("split_wgmma_ws_async", "cuda", _make_split_build("split_wgmma_ws_async"),
            why="split_wgmma_ws_nol2 whose producer never waits for its own copies: each producer thread "
                "arrives on the stage's full barrier by cp.async.mbarrier.arrive.noinc (the arrive happens when "
                "its copies land) and goes on to the next tile; the consumers fence the proxies after their "
                "wait and build split_wgmma_lean's descriptors",
            supports=_supports_split("split_wgmma_ws_async"), sources=("split_wgmma_ws.cu",)),
    _one_wave_variant("split_wgmma_ws_async"),
    _coop_variant("split_wgmma_ws_async_coop_1wave", "split_wgmma_ws_async",
                  why="split_wgmma_ws_async_1wave with split_wgmma_coop_1wave's combine in the kernel (cooperative "
                      "launch; the 256 consumer threads of each CTA merge a share of its row)"),
    # Issue 13: the partials (the timeline: 4.8 us of FP32 partial stores and ~7 us of combine at M = 32).
    Variant("split_wgmma_ws_async_bf16p_1wave", "cuda", _make_split_build("split_wgmma_ws_async_bf16p", one_wave=True),
            why="split_wgmma_ws_async_1wave with its partial accumulators stored in BF16 (m and l in FP32) and a "
                "combine that widens them: half the 16 MiB that every CTA writes at once at M = 32 and the "
                "combine reads back",
            supports=_supports_split("split_wgmma_ws_async_bf16p"), sources=("split_wgmma_ws.cu",)),
    Variant("split_wgmma_ws_async_bulkp_1wave", "cuda", _make_split_build("split_wgmma_ws_async_bulkp", one_wave=True),
            why="split_wgmma_ws_async_1wave with its FP32 partials staged in the free ring (rows padded to 2080 "
                "bytes: two wavefronts a warp store) and written by one 2 KiB bulk copy a row: the same bytes in "
                "64 linear requests a CTA, where BF16 partials showed the scattered stores' count binds",
            supports=_supports_split("split_wgmma_ws_async_bulkp"), sources=("split_wgmma_ws.cu",)),
    Variant("split_wgmma_ws_async_bulkp16_1wave", "cuda", _make_split_build("split_wgmma_ws_async_bulkp16", one_wave=True),
            why="split_wgmma_ws_async_bulkp_1wave with BF16 partials (staged rows of 1040 bytes, one 1 KiB bulk "
                "copy a row; sparse_mla_combine_bf16p): the bulk form's epilogue fell only from 4.25 to 4.03 us "
                "on the H200, so with few linear requests the 16 MiB of FP32 partials bind, and half of them go",
            supports=_supports_split("split_wgmma_ws_async_bulkp16"), sources=("split_wgmma_ws.cu",)),
    Variant("split_wgmma_ws_async_qearly_bulkp16_1wave", "cuda",
            _make_split_build("split_wgmma_ws_async_qearly_bulkp16", one_wave=True),
            why="split_wgmma_ws_async_bulkp16_1wave with qearly's cold chain (q's copies issued under the first "
                "tokens' flight): the two fixed costs the timeline measured, cut together",
            supports=_supports_split("split_wgmma_ws_async_qearly_bulkp16"), sources=("split_wgmma_ws.cu",)),
    *(Variant(f"{design}_1wave", "cuda", _make_split_build(design, one_wave=True),
              why=f"{design.removesuffix('_cb')}_1wave with its partials merged by the batched combine "
                  f"({combine_kernel(design)}: every split's loads of a batch of 4 in flight at once, where the "
                  "combine's loop made two dependent L2 round trips a split, 32 in series at M = 8's 16 splits); "
                  "the same bits out",
              supports=_supports_split(design), sources=("split_wgmma_ws.cu",)) for design in BATCHED_COMBINES),
    # Issue 13: the gap between the two launches (the timeline: ~11 us of the event outside the split's span).
    *(Variant(f"{design}_1wave", "cuda", _make_split_build(design, one_wave=True),
              why=f"{design.removesuffix('_pdl')}_1wave with its combine ({combine_kernel(design)}) launched as a "
                  "programmatic dependent: the split kernel triggers at entry, so the combine's blocks are "
                  "launched while it runs and wait on griddepcontrol for its partials; the second launch's gap "
                  "leaves the step",
              supports=_supports_split(design), sources=("split_wgmma_ws.cu",)) for design in PROGRAMMATIC),
    # Issue 13: the cold chain (ncu: a third of the kernel's samples run once a CTA).
    Variant("split_wgmma_ws_async_qearly_1wave", "cuda", _make_split_build("split_wgmma_ws_async_qearly", one_wave=True),
            why="split_wgmma_ws_async_1wave with q's 32 copies a producer thread issued while the first tiles' "
                "tokens are in flight, not after their rows are known, where issuing them delays tile 0's copies "
                "(tile 0's full barrier waits for q's copies in both)",
            supports=_supports_split("split_wgmma_ws_async_qearly"), sources=("split_wgmma_ws.cu",)),
    # Issue 13: FlashMLA's split of the tile work (read for technique), on split_wgmma_ws_async's producer.
    Variant("split_wgmma_ws_alt", "cuda", _make_split_build("split_wgmma_ws_alt"),
            why="split_wgmma_ws_async's producer and ring with the consumers on alternate whole 64-slot tiles: "
                "each warpgroup computes S over all 512 dims and the softmax of every other tile, O is split "
                "along the latent (its own P from registers, the partner's from shared memory), only the row "
                "maxima cross before the PVs, and each stage's latent halves have their own full and empty "
                "mbarriers, freed by the PV that reads them last, so one warpgroup's softmax runs under the "
                "other's wgmmas and a half's refill starts while the other half is read",
            supports=_supports_split("split_wgmma_ws_alt"), sources=("split_wgmma_ws.cu",)),
    _one_wave_variant("split_wgmma_ws_alt"),
    Variant("split_wgmma_ws_fp8", "cuda", _make_split_build("split_wgmma_ws_fp8"),
            why="split_wgmma_ws over the FP8 latent (same template): the producer (setmaxnreg 72 / 216) "
                "reads the e4m3 codes by 16-B loads, widens them exactly to f16 and stores them in the "
                "swizzled tile; f16 wgmma (q rounded to f16 once), the row scale applied to the scores "
                "and to the weights (over the CTA's reference scale, to keep them out of f16's subnormals)",
            supports=_supports_split("split_wgmma_ws_fp8"), sources=("split_wgmma_ws.cu",)),
    _one_wave_variant("split_wgmma_ws_fp8"),
    # Issue 13: split_wgmma in fewer instructions (its warps are issue-latency bound; sparse_mla_math).
    Variant("split_wgmma_lean_1wave", "cuda", _make_split_build("split_wgmma_lean", one_wave=True),
            why="split_wgmma_1wave with its copy addresses hoisted (two per-thread swizzle offsets and a row "
                "base: ~5 instructions a 16-byte copy instead of ~25) and each wgmma's descriptors added to "
                "once-built ones: the same schedule and math, the issue path the resident form measured",
            supports=_supports_split("split_wgmma_lean"), sources=("split_wgmma.cu",)),
    _coop_variant("split_wgmma_lean_coop_1wave", "split_wgmma",
                  why="split_wgmma_lean_1wave with split_wgmma_coop_1wave's combine in the kernel (cooperative "
                      "launch, each CTA merging a share of its row)"),
    # Issue 13, the seesaw: one warpgroup's softmax under the other's wgmmas.
    Variant("split_wgmma_seesaw", "cuda", _make_split_build("split_wgmma_seesaw"),
            why="split_wgmma's split and combine with the two warpgroups on alternate 32-slot tiles: each "
                "computes the full-depth S (32 x wgmma m64n32k16 SS) and the softmax of its own tile, hands "
                "P to the other as register fragments through shared memory (named barriers, no CTA "
                "barrier in the loop), and both multiply every tile into their own 256 columns of O; each "
                "keeps its own running max (the partner's is never below it), so one warpgroup's softmax "
                "runs under the other's wgmmas",
            supports=_supports_split("split_wgmma_seesaw"), sources=("split_wgmma_seesaw.cu",)),
    _one_wave_variant("split_wgmma_seesaw"),
    _coop_variant("split_wgmma_coop_1wave", "split_wgmma",
                  why="split_wgmma_1wave with the combine in the kernel: launched cooperatively (every CTA "
                      "resident), each CTA takes a ticket on its row's counter after writing its partials, waits "
                      "for the row's other splits and merges a 1 / splits share of the row's outputs from L2: "
                      "no second launch, the merge spread over the row's SMs (the last-CTA forms merged on one)"),
    *FLASHINFER_VARIANTS,
    Variant("torch_gather_bmm", "cuda", lambda g, p, i, b: _TorchGatherBmm(g, p, i, b),
            why="torch: gather the rows into a [M, W, 512] copy, bmm, masked softmax, bmm",
            supports=_supports_torch, peer=True),  # torch's version is in every provenance already
    Variant("ref_sparse_mla", "cpu", lambda g, p, i, b: _HostSparseMla(g, p, i),
            why="float32 NumPy on the host, every stream", sources=("spec.py",)),
)

MATH_VARIANTS = (
    Variant("split_wgmma_resident_1wave", "cuda", _make_split_build("split_wgmma_resident", one_wave=True),
            why="split_wgmma_1wave's kernel, grid and combine with the gather taken out: every CTA copies the "
                "stream's first 64 selected rows once and runs its chunk's iterations over them (the same "
                "barriers, S wgmmas, S exchange, softmax and PV wgmmas; no copy, no row chain): the time of "
                "split_wgmma_1wave's math and synchronisation alone",
            supports=_supports_split("split_wgmma_resident"), sources=("split_wgmma.cu",)),
    Variant("ref_sparse_mla_math", "cpu", lambda g, p, i, b: _HostSparseMla(g, p, i, first=spec.RESIDENT_SLOTS),
            why="float32 NumPy on the host, every stream, over its first 64 selected slots", sources=("spec.py",)),
)

GATHER_VARIANTS = (
    Variant("gather_xor", "cuda", build_gather,
            why="reads exactly the selected rows with 16-byte loads, several rows in flight per "
                "lane, and XORs them into a checksum: the gather's bandwidth ceiling (fp8: the codes, "
                "8 rows in flight, and each row's scale)",
            supports=_supports_cuda, sources=("gather.cu",)),
    Variant("gather_tma", "cuda", build_gather_tma("gather_tma"),
            why="the same rows and checksum copied into shared memory by the bulk-copy engine: one "
                "64-element, 128-B-swizzled box a row segment (a wgmma tile row's layout), 8 a row, a "
                "6-stage mbarrier ring of 32 rows, one producer warp: what a TMA producer could feed",
            supports=_supports_gather_tma, sources=("gather.cu",)),
    Variant("gather_tma4", "cuda", build_gather_tma("gather_tma4"),
            why="gather_tma with 4 producer warps issuing 2 segments of each row apiece (4 XOR warps): "
                "whether the box rate is one issuing warp's or the SM's copy engine's",
            supports=_supports_gather_tma, sources=("gather.cu",)),
    Variant("gather_tma4_runs", "cuda", build_gather_tma("gather_tma4_runs"),
            why="gather_tma4 with one box of 4 rows a segment wherever a quad of lanes holds 4 consecutive "
                "arena rows (the grouped selection's runs of 4 tokens on a 64-token page), into a "
                "segment-major stage (a wgmma tile's layout): whether a quarter of the requests brings "
                "the copy engine to the gather's rate (ws_async's consumers wait a third of their time "
                "for its cp.async producer)",
            supports=_supports_gather_tma, sources=("gather.cu",)),
    Variant("gather_bulk", "cuda", build_gather_tma("gather_bulk"),
            why="gather_tma's ring with each row one 1 KiB 1-D bulk copy (no tensor map, no swizzle: no "
                "wgmma operand layout): whether the copy engine's rate is per request or per byte",
            supports=_supports_gather_tma, sources=("gather.cu",)),
    *(Variant(name, "cuda", build_gather_ring(name),
              why=f"the same rows and checksum moved by the wgmma designs' copy schedule alone: a cp.async ring of "
                  f"{GATHER_RING[name][1]} stages of {GATHER_RING[name][0]} rows (1 KiB each) "
                  f"in one CTA an SM, all stages but one in flight, each tile XORed by the threads that copied it: "
                  f"what a shared-memory ring of that depth delivers with no math (split_wgmma: 64 x 2, "
                  f"split_wgmma_t32 and split_wgmma_seesaw: 32 x 4)",
              supports=_supports_gather_ring, sources=("gather.cu",)) for name in GATHER_RING),
    Variant("numpy_gather", "cpu", lambda g, p, i, b: _HostGather(p, i),
            why="NumPy on the host: the selected rows' XOR"),
)
