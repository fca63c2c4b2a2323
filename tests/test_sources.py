"""A design's source hash covers the headers it includes and nothing it does not compile."""

from __future__ import annotations

import pytest

from harness.sources import compiled_files, sources_sha


def _tree(tmp_path):
    (tmp_path / "common.cuh").write_text("#pragma once\nint common;\n")
    (tmp_path / "ring.cuh").write_text('#pragma once\n#include "common.cuh"\nint ring;\n')
    (tmp_path / "a.cu").write_text('#include "ring.cuh"\nint a;\n')
    (tmp_path / "b.cu").write_text('#include "common.cuh"\nint b;\n')
    return tmp_path


def test_compiled_files_follow_local_includes_transitively(tmp_path):
    t = _tree(tmp_path)
    assert [p.name for p in compiled_files(t / "a.cu")] == ["a.cu", "ring.cuh", "common.cuh"]
    assert [p.name for p in compiled_files(t / "b.cu")] == ["b.cu", "common.cuh"]


def test_a_design_hash_moves_with_what_it_compiles_only(tmp_path):
    t = _tree(tmp_path)
    a0, b0 = sources_sha([t / "a.cu"]), sources_sha([t / "b.cu"])
    (t / "ring.cuh").write_text('#pragma once\n#include "common.cuh"\nint ring2;\n')
    a1, b1 = sources_sha([t / "a.cu"]), sources_sha([t / "b.cu"])
    assert a1 != a0 and b1 == b0
    (t / "common.cuh").write_text("#pragma once\nint common2;\n")
    assert sources_sha([t / "a.cu"]) != a1 and sources_sha([t / "b.cu"]) != b1
    assert sources_sha([]) == ""


def test_a_missing_header_names_it(tmp_path):
    (tmp_path / "c.cu").write_text('#include "nowhere.cuh"\n')
    with pytest.raises(FileNotFoundError, match="nowhere.cuh"):
        compiled_files(tmp_path / "c.cu")
