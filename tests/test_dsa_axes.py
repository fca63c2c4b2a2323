"""The DSA axes' cross-field rules live with the DSA families (kernels/dsa_axes.py), not in the
harness: a context is a whole number of pools, a top-k in tokens over pooled keys is a whole number
of pools, and a top-k never asks for more candidates than the context has."""

from __future__ import annotations

import pytest

from kernels import dsa_axes


@pytest.mark.parametrize("point,message", [
    ({"context": 1001}, "context: 1001 is not a multiple of the pool size indexer.kpool=4; allowed: multiples of 4"),
    ({"context": 4096, "pooling": "pooled", "topk": 8192}, "allowed: topk <= 4096"),
    ({"context": 4096, "pooling": "per_token", "topk": 8192}, "allowed: topk <= 4096"),
    ({"context": 4096, "pooling": "pooled", "topk": 2050}, "topk: 2050 is not a whole number of pools"),
])
def test_a_broken_rule_is_one_line_naming_the_key(geometry, point, message):
    assert message in dsa_axes.check_point(geometry, point)


@pytest.mark.parametrize("point", [
    {"context": 262144, "pooling": "pooled", "topk": 2048},
    {"context": 8192, "pooling": "per_token", "topk": 8192},
    {"context": 2048, "pooling": "pooled", "topk": 2048},   # 512 pools of 512: every pool selected
    {"M": 32, "copy_mib": 3},                               # no DSA axis: nothing to say
])
def test_valid_points_pass(geometry, point):
    assert dsa_axes.check_point(geometry, point) is None


def test_counts_follow_the_fuels_unit(geometry):
    # seed 003 §8.5: 262144 tokens pooled 4:1 are 65536 candidates; index_topk counts tokens, so
    # 2048 selects 512 pools (the fuel's unit is an open fact carried both ways).
    assert dsa_axes.candidates(geometry, 262144, "pooled") == 65536
    assert dsa_axes.candidates(geometry, 262144, "per_token") == 262144
    unit = geometry.indexer.index_topk_unit
    assert dsa_axes.selected_candidates(geometry, 2048, "pooled") == (512 if unit == "tokens" else 2048)
    assert dsa_axes.selected_candidates(geometry, 2048, "per_token") == 2048
