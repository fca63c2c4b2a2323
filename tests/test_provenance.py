"""Provenance: git state (untracked files count as dirty), env fallback, and the sweep capture,
each value checked against what git and the files themselves say."""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
import sys

import numpy as np
import pytest

from harness import backends, provenance
from harness.fuel import DEFAULT_FUEL, REPO_ROOT


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _git_out(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def test_git_dirty_counts_untracked(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("ATTNBENCH_COMMIT", raising=False)
    clean = provenance.git_info()
    head = _git_out(tmp_path, "rev-parse", "HEAD").stdout.strip()
    assert clean["dirty"] is False and clean["branch"] == "main" and clean["commit"] == head
    (tmp_path / "untracked.txt").write_text("b")
    dirty = provenance.git_info()
    assert dirty["dirty"] is True and dirty["dirty_files"] == 1


def test_env_fallback_without_git(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTNBENCH_COMMIT", "f" * 40)
    monkeypatch.setenv("ATTNBENCH_DIRTY", "0")
    info = provenance.git_info()
    assert info["commit"] == "f" * 40 and info["dirty"] is False and info["commit_source"].startswith("env")


def test_env_commit_wins_over_a_stale_git(tmp_path, monkeypatch):
    """A copied tree can carry an old .git (seen on the lent GPU host); the launcher's commit wins
    and git's view is kept beside it."""
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    (tmp_path / "a.txt").write_text("changed since")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTNBENCH_COMMIT", "e" * 40)
    monkeypatch.setenv("ATTNBENCH_DIRTY", "0")
    monkeypatch.setenv("ATTNBENCH_BRANCH", "main")
    info = provenance.git_info()
    assert info["commit"] == "e" * 40 and info["dirty"] is False and info["commit_source"] == "env ATTNBENCH_COMMIT"
    assert "(dirty files: 1)" in info["git_in_checkout"] and not info["git_in_checkout"].startswith("e" * 40)


def test_env_commit_matching_git_keeps_gits_dirty_state(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (tmp_path / "b.txt").write_text("untracked")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTNBENCH_COMMIT", head[:7])
    monkeypatch.delenv("ATTNBENCH_DIRTY", raising=False)
    info = provenance.git_info()
    assert info["commit"] == head and info["dirty"] is True and info["dirty_files"] == 1
    assert "git_in_checkout" not in info and info["commit_source"].startswith("git")


def _capture(geometry, monkeypatch) -> tuple[dict, dt.datetime, dt.datetime]:
    for var in ("ATTNBENCH_COMMIT", "ATTNBENCH_DIRTY", "ATTNBENCH_BRANCH"):
        monkeypatch.delenv(var, raising=False)
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)  # the record keeps whole seconds
    prov = provenance.capture(backends.CpuBackend(), geometry)
    return prov, before, dt.datetime.now(dt.timezone.utc)


def test_capture_on_cpu_records_the_files_it_ran_from(geometry, monkeypatch):
    """The fuel's hash is sha256 of the file's bytes (what ``sha256sum`` prints), each kernel
    source's is the first 16 hex digits of its bytes' sha256, the timestamp is now and UTC."""
    import torch

    prov, before, after = _capture(geometry, monkeypatch)
    assert prov["backend"] == "cpu" and "CPU reference backend" in prov["device"]
    assert prov["fuel_path"] == "fuels/glm-5.3-flash/attention.yaml"
    assert prov["fuel_sha256"] == hashlib.sha256(DEFAULT_FUEL.read_bytes()).hexdigest()
    sources = prov["kernel_sources"]
    assert {"kernels/roofline/copy.cu", "kernels/kda_decode/ring.cuh", "harness/verify.py",
            "harness/l2_flush.cu"} <= set(sources)
    for rel, digest in sources.items():
        assert digest == hashlib.sha256((REPO_ROOT / rel).read_bytes()).hexdigest()[:16], rel
    stamp = dt.datetime.fromisoformat(prov["timestamp_utc"])
    assert stamp.utcoffset() == dt.timedelta(0) and before <= stamp <= after
    assert prov["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert prov["numpy"] == np.__version__ and prov["torch"] == torch.__version__ and prov["cupy"] is None
    # the peers' libraries: fla's kernels (fla-core, Triton) and FlashInfer's sparse MLA
    assert set(prov["peer_versions"]) == {"fla-core", "triton", "flashinfer-python"}


def test_capture_records_gits_head(geometry, monkeypatch):
    """Commit, branch and dirty flag are the checkout's, read here by other git commands than the
    ones provenance runs; every tracked kernel, harness and experiment source is hashed."""
    head = _git_out(REPO_ROOT, "rev-parse", "HEAD")
    if head.returncode != 0:
        pytest.skip("the checkout has no .git (a copied tree): nothing to check the commit against")
    prov, _, _ = _capture(geometry, monkeypatch)
    assert prov["commit"] == head.stdout.strip() and prov["commit_source"] == "git"
    branch = _git_out(REPO_ROOT, "symbolic-ref", "--quiet", "--short", "HEAD")
    assert prov["branch"] == (branch.stdout.strip() if branch.returncode == 0 else "HEAD")  # detached: HEAD
    changed = _git_out(REPO_ROOT, "diff", "--quiet", "HEAD").returncode != 0
    untracked = _git_out(REPO_ROOT, "ls-files", "--others", "--exclude-standard").stdout.split()
    assert prov["dirty"] is (changed or bool(untracked))
    tracked = _git_out(REPO_ROOT, "ls-files", "kernels", "harness", "experiments").stdout.split()
    tracked = {p for p in tracked if p.endswith((".cu", ".cuh", ".py", ".yaml"))}
    assert tracked and tracked <= set(prov["kernel_sources"])


def test_peer_versions_come_from_package_metadata(monkeypatch):
    """A peer row needs the versions of the code that ran it; an absent package says None."""
    from importlib import metadata

    def version(dist):
        if dist in ("triton", "flashinfer-python"):
            raise metadata.PackageNotFoundError(dist)
        return {"fla-core": "0.6.0"}[dist]

    monkeypatch.setattr(metadata, "version", version)
    assert provenance.peer_versions() == {"fla-core": "0.6.0", "triton": None, "flashinfer-python": None}


def test_clocks_are_all_read_or_all_missing_with_the_reason():
    c = provenance.clocks(0)
    read = ("sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "temperature_c")
    if c["sm_clock_mhz"] is None:  # no NVML here (a CPU machine): nothing half-read, and why
        assert all(c[k] is None for k in read) and c["nvml_error"].strip()
    else:
        assert c["sm_clock_mhz"] > 0 and c["mem_clock_mhz"] > 0 and "nvml_error" not in c
        assert int(c["throttle_reasons"], 16) >= 0 and isinstance(c["temperature_c"], int)


def test_slowdown_reasons_are_named_and_benign_ones_ignored():
    from harness.provenance import slowdowns

    assert slowdowns("0x0", None) == []
    assert slowdowns("0x1", "0x2") == []                       # idle, application clocks
    assert slowdowns("0x0", "0x24") == ["sw_power_cap", "sw_thermal"]
    assert slowdowns("0x8", "0x40") == ["hw_slowdown", "hw_thermal"]
