"""FlashInfer's MLA paged decode as a sparse MLA peer (``flashinfer_mla``).

What serving engines run for sparse MLA on Hopper: the selection handed to
``flashinfer.mla.BatchMLAPagedAttentionWrapper`` as a page table of 1-token pages. For stream m
the "pages" are the arena rows of its valid slots in slot order (the -1 slots dropped), so
kv_len[m] is its count of valid slots and qo_indptr = arange(M + 1) (one query token a stream).
The latent cache is our resident arena viewed as BF16 [rows, 1, 512] (no copy), whatever the
point's page_size (the arena rows are the same bytes); head_dim_ckv = 512, head_dim_kpe = 0 (NoPE:
empty q_pe / kpe views), backend ``fa3`` (the SM90 kernel the wheelhouse README checked on the
H200), non-causal, softmax_scale from the fuel.

``plan()`` is host work done once per selection layout, in build (as an engine does once per
step layout); ``__call__`` times ``run()`` only, on our stream.

FlashInfer is not a dependency of attnbench: on the GPU host it comes from ``<repo>/.fi/`` (the
pruned site tarball and the prebuilt sm_90a modules of /work/shared/wheelhouse/flashinfer, copied
there and carried; ``.fi/`` is git-ignored), unpacked under /tmp by `prepare_flashinfer`.

Nothing here imports torch, cupy or flashinfer at import time.
"""

from __future__ import annotations

import functools
import lzma
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile

import numpy as np

from harness.fuel import REPO_ROOT
from harness.registry import Launch, Variant

from . import spec

FI_DIR = REPO_ROOT / ".fi"
FI_TARBALL = "flashinfer-0.7.2.post1-pruned-site.tar.xz"
FI_PREBUILT = "prebuilt-sm90a"
FI_VERSION = "0.7.2.post1"            # the version the prebuilt modules were compiled for
UNPACK_ROOT = pathlib.Path("/tmp/fi")      # the tarball holds site/
WORKSPACE = pathlib.Path("/tmp/fi_ws")
BACKEND = "fa3"
WORKSPACE_BYTES = 128 << 20           # FlashInfer's usual float workspace (split-KV partials)

_prebuilt_dir: pathlib.Path | None = None   # where prepare_flashinfer wired the AOT modules, if it did


def paged_layout(point, page_table: np.ndarray, selection: np.ndarray):
    """The selection as a page_size = 1 CSR page table: ``(qo_indptr [M+1], kv_indptr [M+1],
    kv_indices [sum kv_len], kv_len [M])``, NumPy int32. kv_indices lists, stream after stream,
    the arena row of every valid slot in slot order (-1 slots dropped); a stream with no valid
    slot gets kv_len 0."""
    rows = spec.arena_rows(point, page_table, selection)            # [M, W] int64, -1 = empty
    valid = rows >= 0
    if valid.any() and int(rows.max()) >= 2 ** 31:
        raise ValueError(f"arena row {int(rows.max())} does not fit FlashInfer's int32 indices")
    kv_len = valid.sum(axis=1).astype(np.int32)
    kv_indices = rows[valid].astype(np.int32)                       # row-major: streams, then slots
    kv_indptr = np.concatenate([[0], np.cumsum(kv_len, dtype=np.int64)]).astype(np.int32)
    qo_indptr = np.arange(len(rows) + 1, dtype=np.int32)
    return qo_indptr, kv_indptr, kv_indices, kv_len


def _import_flashinfer():
    import flashinfer  # noqa: F401
    import flashinfer.mla  # noqa: F401

    return flashinfer


def _forget_flashinfer() -> None:
    """Drop what a failed ``import flashinfer`` left in sys.modules, so a retry starts clean."""
    for name in [n for n in sys.modules if n == "flashinfer" or n.startswith(("flashinfer.", "tvm_ffi"))]:
        del sys.modules[name]


def _unpack_site(tarball: pathlib.Path) -> pathlib.Path:
    """``tarball``'s site/ at /tmp/fi/site, unpacked once (into a private folder, then renamed,
    so two processes never see half a tree)."""
    site = UNPACK_ROOT / "site"
    if (site / "flashinfer" / "__init__.py").exists():
        return site
    UNPACK_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".unpack-", dir=UNPACK_ROOT))
    try:
        with tarfile.open(tarball, "r:xz") as tar:
            try:
                tar.extractall(tmp, filter="data")
            except TypeError:           # a Python without extraction filters
                tar.extractall(tmp)
        try:
            os.rename(tmp / "site", site)
        except OSError:
            if not (site / "flashinfer" / "__init__.py").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return site


def _decompress_prebuilt(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """Every ``<module>/<module>.so.xz`` of ``src`` as ``dst/<module>/<module>.so`` (the layout
    FLASHINFER_AOT_DIR has), each written to a temporary name and renamed into place."""
    for d in sorted(p for p in src.iterdir() if p.is_dir()):
        (dst / d.name).mkdir(parents=True, exist_ok=True)
        for f in d.glob("*.so.xz"):
            target = dst / d.name / f.name[:-3]
            if target.exists() and target.stat().st_size > 0:
                continue
            tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            with lzma.open(f) as i, open(tmp, "wb") as o:
                shutil.copyfileobj(i, o)
            os.replace(tmp, target)
    return dst


@functools.cache
def prepare_flashinfer() -> str | None:
    """Make ``import flashinfer`` work and wire in the prebuilt sm_90a modules, as the wheelhouse
    README says; None, or the reason it could not. Cached: the work is done once a process.

    If FlashInfer is not importable, its pruned site is unpacked from ``<repo>/.fi/`` into
    /tmp/fi and put on sys.path. The workspace and TVM-FFI cache go under /tmp/fi_ws (FlashInfer
    reads them when ``flashinfer.jit.env`` is imported, so they are set before the first import).
    The prebuilt modules (``.fi/prebuilt-sm90a``, xz-compressed) are decompressed into
    /tmp/fi_ws/prebuilt and ``flashinfer.jit.env.FLASHINFER_AOT_DIR`` pointed there; a module
    missing from there is JIT-compiled on first use."""
    global _prebuilt_dir
    try:
        os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(WORKSPACE))
        os.environ.setdefault("TVM_FFI_CACHE_DIR", str(WORKSPACE / "tvm-ffi"))
        try:
            flashinfer = _import_flashinfer()
        except Exception as first:
            _forget_flashinfer()
            tarball = FI_DIR / FI_TARBALL
            if not tarball.is_file():
                return (f"flashinfer not importable ({type(first).__name__}: {first}) and no .fi/ folder with "
                        f"FlashInfer in the checkout ({tarball.relative_to(REPO_ROOT)} missing: copy "
                        f"/work/shared/wheelhouse/flashinfer's tarball and {FI_PREBUILT}/ there and carry .fi)")
            site = str(_unpack_site(tarball))
            if site not in sys.path:
                sys.path.insert(0, site)
            try:
                flashinfer = _import_flashinfer()
            except Exception as exc:
                _forget_flashinfer()
                return f"flashinfer from {site} not importable: {type(exc).__name__}: {exc}"[:500]
        version = str(getattr(flashinfer, "__version__", "unknown"))
        prebuilt = FI_DIR / FI_PREBUILT
        if prebuilt.is_dir() and version == FI_VERSION:
            from flashinfer.jit import env as jit_env

            _prebuilt_dir = _decompress_prebuilt(prebuilt, WORKSPACE / "prebuilt")
            jit_env.FLASHINFER_AOT_DIR = _prebuilt_dir
        return None
    except Exception as exc:
        return f"preparing flashinfer failed: {type(exc).__name__}: {exc}"[:500]


def supports(geometry, point) -> str | None:
    """A reason unless torch sees a Hopper GPU and FlashInfer imports (with the prebuilt modules
    wired in); never raises."""
    try:
        H, D, _ = spec.dims(geometry)
        if (H, D) != (64, 512):
            return f"the FlashInfer MLA peer runs 64 heads x 512 (head_dim_ckv); got {H} x {D}"
        if point["latent_dtype"] != "bf16":
            return (f"FlashInfer's MLA paged decode reads a BF16 latent cache (kv_data_type); "
                    f"latent_dtype={point['latent_dtype']} (per-row-scaled e4m3) has no path there")
        try:
            import torch
        except Exception as exc:
            return f"torch not importable: {type(exc).__name__}: {exc}"
        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        major, minor = torch.cuda.get_device_capability()
        if major != 9:
            return f"FlashInfer's {BACKEND} MLA backend needs SM90 (Hopper); this device is sm_{major}{minor}"
        return prepare_flashinfer()
    except Exception as exc:
        return f"flashinfer_mla support check failed: {type(exc).__name__}: {exc}"[:500]


class _FlashInferMla(Launch):
    """``BatchMLAPagedAttentionWrapper`` (backend fa3) over the selection as 1-token pages;
    planned once here, ``run()`` on our stream."""

    captures_itself = False

    def __init__(self, geometry, point, inputs, backend):
        reason = prepare_flashinfer()
        if reason:
            raise RuntimeError(reason)
        import flashinfer
        import torch
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        self.torch, self.backend = torch, backend
        H, D, scale = spec.dims(geometry)
        qo_indptr, kv_indptr, kv_indices, kv_len = paged_layout(point, inputs["page_table"], inputs["selection"])
        self.ext = torch.cuda.ExternalStream(backend.stream.ptr)
        dev = torch.device("cuda", backend.device_id)
        with torch.cuda.stream(self.ext):
            arena = torch.from_dlpack(inputs.resident["arena"]).view(torch.bfloat16)   # [rows, D], no copy
            self.ckv = arena.view(arena.shape[0], 1, D)                  # [pages, page_size = 1, D]
            self.kpe = self.ckv[..., D:]                                 # [pages, 1, 0]: NoPE
            self.q = torch.from_numpy(inputs["q"].view(np.int16)).to(dev).view(torch.bfloat16)  # [M, H, D]
            self.q_pe = self.q[..., D:]                                  # [M, H, 0]
            self.out = torch.empty(self.q.shape, dtype=torch.bfloat16, device=dev)
            self.lse = torch.empty(self.q.shape[:2], dtype=torch.float32, device=dev)
            workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
            self.wrapper = BatchMLAPagedAttentionWrapper(workspace, backend=BACKEND)
            self.wrapper.plan(
                metadata=MLAPlanMetadata.csr(
                    qo_indptr=torch.from_numpy(qo_indptr), kv_indptr=torch.from_numpy(kv_indptr),
                    kv_indices=torch.from_numpy(kv_indices), kv_len_arr=torch.from_numpy(kv_len)),
                num_heads=H, head_dim_ckv=D, head_dim_kpe=0, page_size=1, causal=False, sm_scale=scale,
                q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
                query_layout="split", kv_cache_layout="split",
                # natural-log lse: FlashInfer's kernels keep the softmax in base 2 and, with
                # return_lse_base_on_e, multiply the final lse by ln 2 (mla_hopper.cuh:
                # "final_lse[...] = ... math::ptx_log2(d[j]) + float(m[j]); if
                # (return_lse_base_on_e) final_lse[...] *= math::loge2;"), which is our
                # reference's lse = log sum exp(s). The plan's lse_mode must match run().
                lse_mode="basee")
        backend.stream.synchronize()
        planned = getattr(self.wrapper, "_planned_backend_name", None) or BACKEND
        prebuilt = f", prebuilt modules from {_prebuilt_dir}" if _prebuilt_dir is not None else ", no prebuilt modules wired (JIT where FlashInfer has none)"
        self.note = (f"FlashInfer {flashinfer.__version__} BatchMLAPagedAttentionWrapper backend "
                     f"{planned}, page_size 1 (one page per selected "
                     f"row), head_dim_kpe 0, plan once per layout, run() timed{prebuilt}")

    def poison(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.out.view(self.torch.int16).fill_(-1)              # 0xFFFF: a BF16 NaN
            self.lse.fill_(float("nan"))

    def __call__(self) -> None:
        with self.torch.cuda.stream(self.ext):
            self.wrapper.run(query=(self.q, self.q_pe), kv_cache=(self.ckv, self.kpe), out=self.out,
                             lse=self.lse, return_lse=True, return_lse_base_on_e=True)

    def outputs(self) -> dict[str, np.ndarray]:
        torch = self.torch
        self.backend.stream.synchronize()
        with torch.cuda.stream(self.ext):
            # lse is already natural-log (return_lse_base_on_e=True above): no conversion here
            return {"out": self.out.double().cpu().numpy(), "lse": self.lse.double().cpu().numpy()}


FLASHINFER_VARIANTS = (
    Variant("flashinfer_mla", "cuda", lambda g, p, i, b: _FlashInferMla(g, p, i, b),
            why="FlashInfer's MLA paged decode (fa3, SM90) as engines run sparse MLA on Hopper: the "
                "selection as a 1-token page table over the arena, head_dim_kpe 0, planned once",
            supports=supports, peer=True, packages=("flashinfer-python",)),
)
