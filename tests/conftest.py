"""Shared fixtures: the repository's fuel, a scratch copy of it, and a CLI runner."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from harness.fuel import DEFAULT_FUEL, REPO_ROOT, load_fuel


@pytest.fixture(scope="session")
def geometry():
    return load_fuel(DEFAULT_FUEL)


@pytest.fixture()
def fuel_text() -> str:
    return DEFAULT_FUEL.read_text()


def run_cli(*args: str, cwd: pathlib.Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python3 -m harness ARGS`` as a user would; returns the completed process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd or REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture()
def cli():
    return run_cli
