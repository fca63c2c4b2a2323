"""The fuel: every fact validated, open facts carried both ways, bad files named by key."""

from __future__ import annotations

import re

import pytest

from harness.fuel import SCHEMA, FuelError, load_fuel


def test_every_fact_has_value_source_and_flag(geometry):
    assert set(geometry.facts) == set(SCHEMA)
    for fact in geometry.facts.values():
        assert fact.source.strip(), fact.key
        assert isinstance(fact.established, bool)


def test_seed000_open_questions_are_open_with_both_alternatives(geometry):
    open_keys = {f.key: f for f in geometry.open_facts()}
    for key, alts in {
        "indexer.index_topk_unit": {"tokens", "pools"},
        "indexer.score_relu": {True, False},
        "indexer.key_caching": {"pooled", "per_token"},
    }.items():
        assert key in open_keys, key
        assert set(open_keys[key].alternatives) == alts
        assert open_keys[key].value in alts


def test_geometry_values(geometry):
    g = geometry
    assert g.n_kda_layers == 34 and g.n_dsa_layers == 11
    assert g.layers.dsa_layers == list(range(3, 45, 4))
    assert g.layers.mtp_layer == 45 and g.layers.moe_layers == 42
    assert (g.kda.heads, g.kda.head_k_dim, g.kda.head_v_dim, g.kda.conv_kernel) == (64, 128, 128, 4)
    assert g.kda.gate_lower_bound == -5.0
    assert (g.mla.kv_lora_rank, g.mla.qk_rope_head_dim, g.mla.heads) == (512, 0, 64)
    assert (g.mla.qk_nope_head_dim, g.mla.v_head_dim, g.mla.softmax_scale) == (256, 256, 1 / 16)
    assert (g.indexer.heads, g.indexer.head_dim, g.indexer.index_topk, g.indexer.kpool) == (32, 128, 2048, 4)
    assert g.indexer.head_weight_scale == 1 / 64 and g.indexer.selection_pad == 64
    assert g.model_shape.hidden_size == 4096 and g.model_shape.q_lora_rank == 1536


def _write(tmp_path, text):
    p = tmp_path / "attention.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("old,new,key", [
    ("  heads:\n    value: 64\n    source: \"k_proj", "  heads:\n    value: -64\n    source: \"k_proj", "kda.heads.value"),
    ("  kpool:\n    value: 4\n", "  kpool:\n    value: four\n", "indexer.kpool.value"),
    ("  conv_kernel:\n    value: 4\n", "  conv_kernel:\n    value: 4\n    colour: red\n", "kda.conv_kernel.colour"),
    ("  key_caching:\n    value: pooled\n", "  key_caching:\n    value: paged\n", "indexer.key_caching.value"),
    ("    alternatives: [pooled, per_token]\n", "", "indexer.key_caching.alternatives"),
    ("  selection_pad:\n", "  selection_padding:\n", "indexer.selection_padding"),
    ("    value: [3, 7, 11,", "    value: [2, 7, 11,", "layers.dsa_layers"),
])
def test_bad_fuel_names_the_key(tmp_path, fuel_text, old, new, key):
    assert old in fuel_text, old
    with pytest.raises(FuelError) as err:
        load_fuel(_write(tmp_path, fuel_text.replace(old, new, 1)))
    msg = str(err.value)
    assert msg.startswith(key), msg
    assert "\n" not in msg


def test_missing_source_is_an_error(tmp_path, fuel_text):
    text = re.sub(r'(  q_lora_rank:\n    value: 1536\n)    source: [^\n]*\n', r"\1", fuel_text)
    with pytest.raises(FuelError, match=r"^model_shape\.q_lora_rank\.source"):
        load_fuel(_write(tmp_path, text))


def test_missing_fact_is_an_error(tmp_path, fuel_text):
    text = re.sub(r"  head_weight_scale:\n(    [^\n]*\n)+", "", fuel_text)
    with pytest.raises(FuelError, match=r"^indexer\.head_weight_scale: missing"):
        load_fuel(_write(tmp_path, text))


def test_hash_changes_with_content(tmp_path, fuel_text, geometry):
    other = load_fuel(_write(tmp_path, fuel_text + "\n# a comment\n"))
    assert other.sha256 != geometry.sha256
