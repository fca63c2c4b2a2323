"""The fuel: its values are the seeds' figures, open facts are carried both ways, bad files are
named by key, its hash is the file's. Seed 000 is shared/seeds/000_323ff3e00a4ff5de.txt (its
Geometry section), seed 003 is shared/seeds/003_4b6a36e90d4bf060.txt."""

from __future__ import annotations

import hashlib
import re

import pytest

from harness.fuel import DEFAULT_FUEL, FuelError, load_fuel


def test_seed000_open_questions_settled_by_seed003_or_open_with_both_alternatives(geometry):
    """Seed 000: "Three things are not on disk and are not guessed": the top-k unit, the ReLU in
    the score, which indexer keys are cached. Seed 003 §8.5 quotes the open training code for the
    first two (settled with `attnbench fuel settle`, the quote as the source); key caching stays
    open, carried both ways."""
    open_keys = {f.key: f for f in geometry.open_facts()}
    assert set(open_keys["indexer.key_caching"].alternatives) == {"pooled", "per_token"}
    for key, value, quote in (("indexer.index_topk_unit", "tokens", "min(index_topk // kpool, num_pools) = 512 pools"),
                              ("indexer.score_relu", True, "using the same ReLU scorer as GLM-5.3")):
        fact = geometry.fact(key)
        assert key not in open_keys and fact.established and fact.value == value
        assert fact.source.startswith("seed 003 §8.5") and quote in fact.source


def test_geometry_values(geometry):
    """Each value as the seeds state it (typed here on purpose: these are the sources' numbers)."""
    g = geometry
    # seed 000 Geometry: 34 KDA + 11 MLA layers, KDA, KDA, KDA, MLA repeating, layer 44 KDA, MTP layer 45
    assert g.n_kda_layers == 34 and g.n_dsa_layers == 11 and g.model_shape.num_hidden_layers == 45
    assert g.layers.dsa_layers == list(range(3, 45, 4)) and 44 in g.layers.kda_layers
    assert g.layers.mtp_layer == 45
    assert g.layers.moe_layers == 42  # seed 003 §8.1: 3 dense + 42 sparse MLP layers
    # seed 000: KDA heads x dim 64 x 128, K and V full width (state 64 x 128 x 128); conv kernel 4, 3 tensors
    assert (g.kda.heads, g.kda.head_k_dim, g.kda.head_v_dim, g.kda.conv_kernel, g.kda.conv_tensors) \
        == (64, 128, 128, 4, 3)
    assert g.kda.gate_lower_bound == -5.0  # seed 003 §8.2.3
    # seed 000: MLA cached width 512, no rope tail; 64 heads x (256 nope + 256 v); seed 003 §8.4: scale 1/16
    assert (g.mla.kv_lora_rank, g.mla.qk_rope_head_dim, g.mla.heads) == (512, 0, 64)
    assert (g.mla.qk_nope_head_dim, g.mla.v_head_dim, g.mla.softmax_scale) == (256, 256, 1 / 16)
    # seed 000: indexer 32 heads x 128, top-k 2048, kpool 4; seed 003 §8.5: weights x 1/64, pad to 64
    assert (g.indexer.heads, g.indexer.head_dim, g.indexer.index_topk, g.indexer.kpool) == (32, 128, 2048, 4)
    assert g.indexer.head_weight_scale == 1 / 64 and g.indexer.selection_pad == 64
    # seed 000's shapes: k_proj [8192, 4096], q_b_proj [16384, 1536]
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


def test_hash_is_sha256_of_the_files_bytes(tmp_path, fuel_text, geometry):
    """What ``sha256sum`` prints for the file, so a row's fuel can be checked without the loader;
    a comment changes it (the file is hashed, not the facts parsed from it)."""
    assert geometry.sha256 == hashlib.sha256(DEFAULT_FUEL.read_bytes()).hexdigest()
    path = _write(tmp_path, fuel_text + "\n# a comment\n")
    other = load_fuel(path)
    assert other.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() != geometry.sha256


def test_a_loaded_fuel_is_reused_until_its_text_changes(tmp_path, fuel_text):
    """load_fuel's cache: the same file's same text is parsed once; an edit is read again."""
    path = tmp_path / "attention.yaml"
    path.write_text(fuel_text)
    first = load_fuel(path)
    assert load_fuel(path) is first
    path.write_text(fuel_text.replace("model: ", "model: edited-", 1))
    second = load_fuel(path)
    assert second is not first and second.model.startswith("edited-") and not first.model.startswith("edited-")
    assert second.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
