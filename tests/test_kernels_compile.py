"""Every kernel source compiles for sm_90 with the machine's nvcc (CI has nvcc, no GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from harness.fuel import REPO_ROOT

SOURCES = sorted((REPO_ROOT / "kernels").rglob("*.cu")) + sorted((REPO_ROOT / "harness").rglob("*.cu"))
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def test_there_are_kernels():
    assert SOURCES


def _compile(source, tmp_path, *options):
    if NVCC is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc not found: CI must compile every kernel for sm_90")
        pytest.skip("nvcc not installed on this machine")
    # The same flags NVRTC gets at run time (harness/backends.py), so what CI compiles is what runs.
    cmd = [NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "--use_fast_math", "-Xptxas", "-v", *options,
           "-o", str(tmp_path / "k.cubin"), str(source)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "error" not in res.stderr.lower()


@pytest.mark.parametrize("source", SOURCES, ids=[str(s.relative_to(REPO_ROOT)) for s in SOURCES])
def test_compiles_for_sm90(source, tmp_path):
    _compile(source, tmp_path)


def test_kda_timeline_build_compiles(tmp_path):
    """tools/kda_timeline.py builds kda_decode.cu with its probes on; that build must compile too."""
    _compile(REPO_ROOT / "kernels" / "kda_decode" / "kda_decode.cu", tmp_path, "-DKDA_TIMELINE")
