"""Seed 000's byte tables and seed 003 §9, reproduced from the fuel (nothing typed in the code)."""

from __future__ import annotations

import pytest

from harness import accounting as acc
from harness.fuel import load_fuel


def test_bytes_per_stream_table_byte_for_byte(geometry):
    got = [i.bytes for i in acc.bytes_per_stream_items(geometry)]
    assert got == [2097152, 147456, 76316672, 1024, 2952790016, 184549376, 738197504]
    assert round(acc.kda_bytes_all_layers(geometry) / acc.MIB, 2) == 72.78
    assert round(acc.mla_kv_bytes(geometry, 262144, 11) / acc.GIB, 2) == 2.75


def test_per_stream_accounting(geometry):
    rows = acc.per_stream_accounting(geometry)
    assert [round(r.gib, 3) for r in rows] == [2.993, 3.259, 3.887]
    assert [r.streams for r in rows] == [20, 18, 15]
    fp32 = rows[2]
    # The FP32 row keeps the conv state in BF16: only the recurrent state doubles.
    bf16_all = acc.per_stream_bytes(geometry, "bf16", "per_token", True)
    assert fp32.bytes - bf16_all == acc.kda_state_bytes_all_layers(geometry, "bf16")


def test_two_booster_split_and_budget(geometry):
    per_booster = acc.per_booster_bytes(geometry)
    assert round(per_booster / acc.GIB, 3) == 2.957
    lines = {(b.accounting.split()[0], b.budget_gib): b.streams for b in acc.budget_lines(geometry)}
    assert acc.booster_budget_gib(geometry) == pytest.approx(32.73)
    assert lines[("2-booster", 60)] == 20     # 20 streams in total, not 40
    assert lines[("single", 60)] == 20
    assert lines[("single", 32.73)] == 10     # seed 000's "10 streams" divides by 2.993 GiB
    assert lines[("2-booster", 32.73)] == 11  # the split per-booster 2.957 GiB gives 11


def test_seed003_section9(geometry):
    assert acc.flash_values_per_token(geometry, with_pooled_keys=False) == 5632
    assert acc.flash_values_per_token(geometry, with_pooled_keys=True) == 5984
    assert acc.kda_state_bytes_all_layers(geometry) == 68 * acc.MIB
    assert round(acc.growing_cache_bytes(geometry) / acc.GIB, 1) == 11.7


def test_accounting_follows_the_fuel(tmp_path, fuel_text):
    """Halve the KDA heads in a copy of the fuel: the derived numbers follow."""
    text = fuel_text.replace("  heads:\n    value: 64\n    source: \"k_proj", "  heads:\n    value: 32\n    source: \"k_proj", 1)
    p = tmp_path / "attention.yaml"
    p.write_text(text)
    g = load_fuel(p)
    items = acc.bytes_per_stream_items(g)
    assert items[0].bytes == 1048576 and items[1].bytes == 73728


def test_accounting_cli(cli):
    res = cli("accounting")
    assert res.returncode == 0, res.stderr
    for needle in ("2097152", "76316672", "2952790016", "2.993", "3.259", "3.887", "2.957", "5984"):
        assert needle in res.stdout
