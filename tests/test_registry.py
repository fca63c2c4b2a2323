"""registry.parse_point: the KEY=VALUE points of the command-line tools."""

from __future__ import annotations

import pytest

from harness import registry


def test_parse_point_reads_every_axis_and_types_integers():
    comp = registry.get("kda_decode")
    point = registry.parse_point(comp, ["M=32", "state_dtype=bf16"])
    assert point == {"M": 32, "state_dtype": "bf16"} and isinstance(point["M"], int)


@pytest.mark.parametrize("items, message", [
    (["M=32"], "missing ['state_dtype']"),
    (["M=32", "state_dtype=bf16", "heads=8"], "'heads=8' must be KEY=VALUE with KEY one of ['M', 'state_dtype']"),
    (["M32", "state_dtype=bf16"], "'M32' must be KEY=VALUE"),
    (["M=32", "M=64", "state_dtype=bf16"], "M given twice"),
])
def test_parse_point_refuses_with_one_line(items, message):
    with pytest.raises(ValueError) as err:
        registry.parse_point(registry.get("kda_decode"), items)
    assert message in str(err.value) and "\n" not in str(err.value)
