"""Provenance: git state (untracked files count as dirty), env fallback, and the sweep capture."""

from __future__ import annotations

import subprocess

from harness import backends, provenance


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_git_dirty_counts_untracked(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("ATTNBENCH_COMMIT", raising=False)
    clean = provenance.git_info()
    assert clean["dirty"] is False and clean["branch"] == "main" and len(clean["commit"]) == 40
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


def test_capture_on_cpu(geometry):
    prov = provenance.capture(backends.CpuBackend(), geometry)
    assert prov["backend"] == "cpu" and "CPU reference backend" in prov["device"]
    assert prov["fuel_sha256"] == geometry.sha256
    assert any(k.endswith(".cu") for k in prov["kernel_sources"])
    assert set(prov["peer_versions"]) == {"fla-core", "triton"}


def test_peer_versions_come_from_package_metadata(monkeypatch):
    """A peer row needs the versions of the code that ran it; an absent package says None."""
    from importlib import metadata

    def version(dist):
        if dist == "triton":
            raise metadata.PackageNotFoundError(dist)
        return {"fla-core": "0.6.0"}[dist]

    monkeypatch.setattr(metadata, "version", version)
    assert provenance.peer_versions() == {"fla-core": "0.6.0", "triton": None}


def test_clocks_without_nvml_says_why():
    c = provenance.clocks(0)
    assert set(c) >= {"sm_clock_mhz", "mem_clock_mhz", "throttle_reasons"}
    if c["sm_clock_mhz"] is None:
        assert c["nvml_error"]
