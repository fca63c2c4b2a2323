"""Every kernel source compiles for sm_90 with the machine's nvcc (CI has nvcc, no GPU) and through
NVRTC (what the CUDA backend compiles with: the nvidia-cuda-nvrtc wheel of the test extra), and the
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
# The files whose kernels issue wgmma (they include the common wgmma helpers), and the define that
# switches each one's wgmma body on (their variants' NVRTC options: kernels/wgmma.py).
WGMMA_SOURCES = sorted(p for p in SOURCES if (REPO_ROOT / "kernels/common/wgmma.cuh").resolve() in compiled_files(p))
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


def _nvrtc():
    """libnvrtc of the nvidia-cuda-nvrtc wheel (the test extra pins the device's NVRTC, 13.0), or
    None where it is not installed."""
    import ctypes

    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        folder = pathlib.Path(root) / "cu13" / "lib"
        if (folder / "libnvrtc.so.13").is_file():
            # NVRTC dlopens its builtins by name at compile time: loaded first, by path, it is found
            for builtins in sorted(folder.glob("libnvrtc-builtins.so.*")):
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(str(folder / "libnvrtc.so.13"))
    return None


def _nvrtc_compile(source: pathlib.Path, arch: str, *defines: str) -> tuple[int, str]:
    """``source`` through NVRTC to PTX with the options the CUDA backend gives it
    (harness/backends.py: C++17, fast math, the source's folder on the include path, and CuPy's own
    --device-as-default-execution-space): (NVRTC's result code, its log). PTX only: the front end is
    what differs from nvcc's (no host headers), and ptxas is already run by the tests above."""
    import ctypes

    lib = _nvrtc()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.read_text().encode(), source.name.encode(), 0,
                                  None, None) == 0
    opts = [f"-arch={arch}", "-std=c++17", "--use_fast_math", f"-I{source.parent}",
            "--device-as-default-execution-space", *defines]
    try:
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts)))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace")


@pytest.mark.parametrize("source", SOURCES, ids=[str(s.relative_to(REPO_ROOT)) for s in SOURCES])
def test_compiles_through_nvrtc(source):
    """What runs the kernels is NVRTC, not nvcc: nvcc's .cu compile includes host headers that NVRTC
    lacks (a kernel using <math.h>'s INFINITY compiled here and failed its first GPU call). The wgmma
    files as their sm_90a variants build them."""
    if _nvrtc() is None:
        if os.environ.get("CI"):
            pytest.fail("libnvrtc not found: the test extra installs nvidia-cuda-nvrtc")
        pytest.skip("nvidia-cuda-nvrtc not installed (pip install -e '.[test]')")
    rc, log = _nvrtc_compile(source, "compute_90")
    assert rc == 0, log[-4000:]
    if source in WGMMA_SOURCES:
        rc, log = _nvrtc_compile(source, "compute_90a", "-DSPARSE_MLA_WGMMA_SM90A", "-DSCAN_WGMMA_SM90A")
        assert rc == 0, log[-4000:]


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


def _compile_sm90a(source: pathlib.Path, tmp_path, *options: str) -> subprocess.CompletedProcess:
    """The sm_90a build with the wgmma bodies on (the one that runs on the H200); asserts it compiles."""
    cmd = [NVCC, "-arch=sm_90a", "-DSPARSE_MLA_WGMMA_SM90A", "-DSCAN_WGMMA_SM90A", "-cubin", "-std=c++17",
           "--use_fast_math", f"-I{source.parent}", "-Xptxas", "-v", *options, "-o", str(tmp_path / "k.cubin"),
           str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return res


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


def _cta_probed_sources() -> list[tuple[pathlib.Path, str]]:
    """(file, probe option) for every file tools/cta_timeline.py builds with probes on: each family's
    sources that carry its mark macro."""
    import importlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("cta_timeline_tool", REPO_ROOT / "tools/cta_timeline.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = []
    for module in tool.FAMILIES.values():
        fam = importlib.import_module(module)
        here = pathlib.Path(fam.__file__).parent
        out += [(p, fam.LAYOUT.option) for p in sorted(here.glob("*.cu")) if tool.carries_probes(p, fam)]
    return out


CTA_PROBED = _cta_probed_sources()


@pytest.mark.parametrize("source, option", CTA_PROBED, ids=[f"{p.name}{o}" for p, o in CTA_PROBED])
def test_cta_timeline_build_compiles(source, option, tmp_path):
    """tools/cta_timeline.py builds the probed files with their family's option; that build must
    compile too (the sm_90a body where the file issues wgmma: the body that runs)."""
    _compile(source, tmp_path, option)
    if source in WGMMA_SOURCES and NVCC is not None:
        res = _compile_sm90a(source, tmp_path, option)
        assert not [line for line in res.stderr.splitlines() if re.search(r"\bC751\d\b", line)]


def test_every_probed_file_is_a_source_of_its_familys_variants():
    """The tool picks the variants whose declared sources carry the mark macro: a probed file that no
    variant of the family's component names would be compiled here and timed by nobody."""
    named = {}
    for comp in registry.components().values():
        for v in comp.variants:
            for name in v.sources:
                named.setdefault((pathlib.Path(comp.folder) / name).resolve(), set()).add(comp.name)
    option_component = {"-DDSA_TOPK_TIMELINE": "dsa_topk", "-DSPARSE_MLA_TIMELINE": "sparse_mla"}
    assert {o for _, o in CTA_PROBED} == set(option_component)
    for source, option in CTA_PROBED:
        assert option_component[option] in named.get(source.resolve(), set()), f"{source.name}: no variant names it"


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
    res = _compile_sm90a(source, tmp_path)
    serialised = [line for line in res.stderr.splitlines() if re.search(r"\bC751\d\b", line)]
    assert not serialised, serialised
