"""Every kernel source compiles for sm_90 with the machine's nvcc (CI has nvcc, no GPU), and the
variants' declared sources and the CUDA files on disk are the same set."""

from __future__ import annotations

import os
import re
import pathlib
import shutil
import subprocess

import pytest

from harness import registry
from harness.fuel import REPO_ROOT
from harness.sources import compiled_files

SOURCES = sorted((REPO_ROOT / "kernels").rglob("*.cu")) + sorted((REPO_ROOT / "harness").rglob("*.cu"))
HEADERS = sorted((REPO_ROOT / "kernels").rglob("*.cuh"))
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _declared() -> dict[pathlib.Path, list[str]]:
    """Every file a registered variant names in ``sources``, resolved in its component's folder,
    with the variants that name it."""
    out: dict[pathlib.Path, list[str]] = {}
    for comp in registry.components().values():
        for v in comp.variants:
            for name in v.sources:
                out.setdefault((pathlib.Path(comp.folder) / name).resolve(), []).append(f"{comp.name}/{v.name}")
    return out


def test_every_declared_source_exists():
    missing = {str(p): who for p, who in _declared().items() if not p.is_file()}
    assert not missing, f"variants name sources that are not there: {missing}"


def test_every_kernel_file_is_a_variants_source():
    """A .cu under kernels/ that no variant names would be compiled by nobody and hashed into no
    row: an orphan design file."""
    declared = set(_declared())
    orphans = [str(p.relative_to(REPO_ROOT)) for p in SOURCES
               if p.is_relative_to(REPO_ROOT / "kernels") and p.resolve() not in declared]
    assert not orphans, f"no variant's sources name {orphans}"


def test_every_header_is_included():
    included = {f for src in SOURCES for f in compiled_files(src)}
    unused = [str(h.relative_to(REPO_ROOT)) for h in HEADERS if h.resolve() not in included]
    assert not unused, f"no .cu includes {unused}"


# Macros of the host's <math.h> / <float.h>: nvcc's .cu compile includes those headers, NVRTC (what
# runs the kernels) does not, so a kernel using them compiles here and fails on the GPU
# (kernels/common/device.cuh's neg_inf() is the -inf the kernels use).
HOST_MACROS = re.compile(r"\b(INFINITY|NAN|HUGE_VALF?|FLT_MAX|FLT_MIN|DBL_MAX|M_PI|M_E)\b")


def test_no_kernel_uses_a_host_header_macro():
    found = []
    for src in SOURCES + HEADERS:
        code = re.sub(r"/\*.*?\*/", "", src.read_text(), flags=re.S)
        code = re.sub(r"//[^\n]*", "", code)
        found += [f"{src.relative_to(REPO_ROOT)}: {m}" for m in sorted(set(HOST_MACROS.findall(code)))]
    assert not found, f"NVRTC has no <math.h> / <float.h>: {found}"


def _compile(source, tmp_path, *options):
    if NVCC is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found: CI must compile every kernel for sm_90")
        pytest.skip("nvcc not installed on this machine")
    # The same flags NVRTC gets at run time (harness/backends.py: the source's folder on the include
    # path), so what CI compiles is what runs.
    cmd = [NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "--use_fast_math", f"-I{source.parent}",
           "-Xptxas", "-v", *options, "-o", str(tmp_path / "k.cubin"), str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "error" not in res.stderr.lower()


@pytest.mark.parametrize("source", SOURCES, ids=[str(s.relative_to(REPO_ROOT)) for s in SOURCES])
def test_compiles_for_sm90(source, tmp_path):
    _compile(source, tmp_path)


# The files tools/kda_timeline.py builds with its probes on: every design of a probed variant.
def _probed_sources() -> list[pathlib.Path]:
    from kernels.kda_decode import conv_variants, variants

    return sorted({variants.design_source(name) for name in (*variants.RING_CONFIGS, *conv_variants.PROBED)})


@pytest.mark.parametrize("source", _probed_sources(), ids=lambda p: p.name)
def test_kda_timeline_build_compiles(source, tmp_path):
    """tools/kda_timeline.py builds the probed variants' files with -DKDA_TIMELINE; that build must
    compile too."""
    _compile(source, tmp_path, "-DKDA_TIMELINE")


def _topk_probed_sources() -> list[pathlib.Path]:
    """The files tools/topk_timeline.py builds with its probes on (every dsa_topk source with TK_MARK)."""
    return sorted(p for p in (REPO_ROOT / "kernels/dsa_indexer").glob("topk_*.cu") if "TK_MARK(" in p.read_text())


@pytest.mark.parametrize("source", _topk_probed_sources(), ids=lambda p: p.name)
def test_topk_timeline_build_compiles(source, tmp_path):
    """tools/topk_timeline.py builds the probed top-k files with -DDSA_TOPK_TIMELINE; that build must
    compile too."""
    _compile(source, tmp_path, "-DDSA_TOPK_TIMELINE")


# The files whose kernels issue wgmma (they include the common wgmma helpers), and the define that
# switches each one's wgmma body on (their variants' NVRTC options: kernels/wgmma.py).
WGMMA_SOURCES = sorted(p for p in SOURCES if (REPO_ROOT / "kernels/common/wgmma.cuh").resolve() in compiled_files(p))


@pytest.mark.parametrize("source", WGMMA_SOURCES, ids=lambda p: p.name)
def test_wgmma_builds_keep_their_wgmmas_asynchronous(source, tmp_path):
    """The sm_90a build that runs (not the sm_90 trap body the test above compiles): ptxas must not
    serialise the wgmmas (C751x, e.g. C7513: a non-wgmma instruction defines a wgmma input while one
    is in flight; C7512: too few registers, met when an inlined trap entered split_wgmma_ws's consumer
    region; either way every wgmma waits for the previous one). It costs no correctness, only the
    overlap the designs exist for, and it appears or goes with small code changes (split_wgmma_seesaw.cu's
    fold), so it is checked on every build."""
    if NVCC is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found: CI must compile every kernel")
        pytest.skip("nvcc not installed on this machine")
    cmd = [NVCC, "-arch=sm_90a", "-DSPARSE_MLA_WGMMA_SM90A", "-DSCAN_WGMMA_SM90A", "-cubin", "-std=c++17",
           "--use_fast_math", f"-I{source.parent}", "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    serialised = [line for line in res.stderr.splitlines() if re.search(r"\bC751\d\b", line)]
    assert not serialised, serialised
