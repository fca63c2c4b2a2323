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

FlashInfer is not a dependency of attnbench: its site is prepared by
`kernels.flashinfer_site.prepare_flashinfer` (shared with the DSA top-k peer).

Nothing here imports torch, cupy or flashinfer at import time.
"""

from __future__ import annotations

import numpy as np

from harness.registry import Launch, Variant
from kernels.flashinfer_site import prebuilt_dir, prepare_flashinfer

from . import spec

MLA_MODULES = ("flashinfer.mla",)     # what the peer imports beyond flashinfer itself

BACKEND = "fa3"
WORKSPACE_BYTES = 128 << 20           # FlashInfer's usual float workspace (split-KV partials)

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
        return prepare_flashinfer(*MLA_MODULES)
    except Exception as exc:
        return f"flashinfer_mla support check failed: {type(exc).__name__}: {exc}"[:500]


class _FlashInferMla(Launch):
    """``BatchMLAPagedAttentionWrapper`` (backend fa3) over the selection as 1-token pages;
    planned once here, ``run()`` on our stream."""

    captures_itself = False

    def __init__(self, geometry, point, inputs, backend):
        reason = prepare_flashinfer(*MLA_MODULES)
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
        prebuilt = f", prebuilt modules from {prebuilt_dir()}" if prebuilt_dir() is not None else ", no prebuilt modules wired (JIT where FlashInfer has none)"
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
