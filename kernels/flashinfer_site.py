"""FlashInfer's site on the GPU host, prepared once a process for every FlashInfer peer (the sparse
MLA decode, the DSA top-k).

FlashInfer is not a dependency of attnbench: on the GPU host it comes from ``<repo>/.fi/`` (the
pruned site tarball and the prebuilt sm_90a modules of /work/shared/wheelhouse/flashinfer, copied
there and carried; ``.fi/`` is git-ignored), unpacked under /tmp by `prepare_flashinfer`.

Nothing here imports torch or flashinfer at import time.
"""

from __future__ import annotations

import functools
import importlib
import lzma
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile

from harness.fuel import REPO_ROOT

FI_DIR = REPO_ROOT / ".fi"
FI_TARBALL = "flashinfer-0.7.2.post1-pruned-site.tar.xz"
FI_PREBUILT = "prebuilt-sm90a"
FI_VERSION = "0.7.2.post1"            # the version the prebuilt modules were compiled for
UNPACK_ROOT = pathlib.Path("/tmp/fi")      # the tarball holds site/
WORKSPACE = pathlib.Path("/tmp/fi_ws")

_prebuilt_dir: pathlib.Path | None = None   # where prepare_flashinfer wired the AOT modules, if it did


def prebuilt_dir() -> pathlib.Path | None:
    """Where `prepare_flashinfer` pointed FlashInfer's ahead-of-time modules (None: not wired)."""
    return _prebuilt_dir


def _import_flashinfer(submodules: tuple[str, ...]):
    import flashinfer

    for name in submodules:
        importlib.import_module(name)
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
def prepare_flashinfer(*submodules: str) -> str | None:
    """Make ``import flashinfer`` (and of ``submodules``, ``"flashinfer.mla"`` say) work and wire in
    the prebuilt sm_90a modules, as the wheelhouse README says; None, or the reason it could not.
    Cached: the work is done once a process (per set of submodules).

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
            flashinfer = _import_flashinfer(submodules)
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
                flashinfer = _import_flashinfer(submodules)
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
