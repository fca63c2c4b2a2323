"""tools/launch_floor.py on the CPU: a target's spelling (component, CUDA variant, every axis) is
checked before any GPU work, with one-line errors naming the wrong part and the allowed values."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "launch_floor.py"


def _tool():
    spec = importlib.util.spec_from_file_location("launch_floor", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


POINT = "M=32,context=262144,pooling=per_token,topk=2048,score_rows=random"


def test_a_target_names_a_component_a_cuda_variant_and_a_point():
    comp, variant, point = _tool().parse_target(f"dsa_topk:radix_sample:{POINT}")
    assert (comp.name, variant.name, variant.backend) == ("dsa_topk", "radix_sample", "cuda")
    assert point == {"M": 32, "context": 262144, "pooling": "per_token", "topk": 2048, "score_rows": "random"}


@pytest.mark.parametrize("spec,match", [
    ("dsa_topk:radix_sample", "expected COMPONENT:VARIANT"),
    (f"nope:radix_sample:{POINT}", "component: unknown value 'nope'; allowed: .*'dsa_topk'"),
    (f"dsa_topk:ref_topk:{POINT}", "variant: unknown value 'ref_topk'; allowed: .*'radix_sample'"),   # a CPU variant
    ("dsa_topk:radix_sample:M=32", "context"),                                                         # an axis missing
])
def test_a_wrong_target_is_one_line_naming_the_part(spec, match):
    with pytest.raises(ValueError, match=match) as err:
        _tool().parse_target(spec)
    assert "\n" not in str(err.value)


def test_the_command_refuses_a_wrong_target_before_the_gpu(monkeypatch, capsys):
    tool = _tool()
    monkeypatch.setattr(sys, "argv", ["launch_floor.py", f"dsa_topk:nope:{POINT}"])
    monkeypatch.setattr(tool, "CudaBackend", lambda: pytest.fail("the GPU was touched before the targets were checked"))
    with pytest.raises(SystemExit, match="variant: unknown value 'nope'"):
        tool.main()


def test_the_split_table_gives_each_kernel_its_medians_and_the_sums():
    tool = _tool()
    table = tool.split_table(["scan", "topk"], [[10.0, 12.0, 11.0], [3.0, 5.0, 4.0]], [[9.0, 9.0, 9.0], [2.0, 2.5, 2.0]],
                             [15.0, 16.0, 14.0])
    lines = table.splitlines()
    assert lines[2] == "| scan | 11.00 | 9.00 | +2.00 |" and lines[3] == "| topk | 4.00 | 2.00 | +2.00 |"
    assert lines[4] == "| sum of the kernels | 15.00 | 11.00 | +4.00 |"
    assert lines[5].startswith("| the whole step (first event to last) | 15.00 |")


def test_kernel_names_fall_back_to_the_launch_shape():
    from types import SimpleNamespace

    tool = _tool()
    step = SimpleNamespace(kernels=[SimpleNamespace(fn=SimpleNamespace(symbol="scan_mma_bf16"), grid=264, threads=128,
                                                    smem=0),
                                    SimpleNamespace(fn=object(), grid=(4, 32), threads=1024, smem=163840)])
    assert tool.kernel_names(step) == ["scan_mma_bf16", "kernel 1: grid (4, 32), 1024 threads, 163840 B dynamic"]
