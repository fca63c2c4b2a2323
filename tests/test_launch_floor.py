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
