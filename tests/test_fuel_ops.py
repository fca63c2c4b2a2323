"""`attnbench fuel update / settle / import`: measured figures written from rows (keys derived from
the rows, comments and order kept, atomic, a dry run only diffs, `established` untouched), an open
fact settled only with a stated source, and geometry read from a checkpoint's config.json and
safetensors headers (never the weights), compared with the fuel fact by fact."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import struct

import pytest

from harness import cli, fuel_import, fuel_update, store
from harness.fuel import DEFAULT_FUEL, FuelError, load_fuel
from synthetic_store import POINT, row, sweep

ROWS = [row("bulk32k_early_pdl", 0.034, 0.035, 0.036), row("bulk32k_early", 0.038, 0.039, 0.040)]


@pytest.fixture
def fuel(tmp_path):
    """The repository's fuel without its measured section (the facts only), so every test starts
    from a fuel that no update has written into."""
    path = tmp_path / "attention.yaml"
    text = DEFAULT_FUEL.read_text()
    marker = text.find("\n# Measured figures, written by")
    path.write_text(text if marker < 0 else text[:marker + 1])
    return path


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def fuel_cli(capsys):
    """``attnbench fuel ARGS`` in this process (the subcommand's exit status and its output)."""
    def run(*args: str) -> Result:
        try:
            cli.main(["fuel", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run


# -- update ------------------------------------------------------------------------------------------
def test_update_writes_rows_keyed_by_device_component_variant_point(tmp_path, fuel):
    s = sweep(tmp_path / "store", ROWS, name="kda")
    before = fuel.read_text()
    res = fuel_update.update(fuel, s)
    text = fuel.read_text()
    assert res["written"] == len(ROWS) and res["changed"]
    # every line of the old file is still there, in order (comments, key order, quoting)
    assert text.startswith(before)
    assert "# GLM-5.3-Flash decode-time attention geometry: facts only." in text
    g = load_fuel(fuel)
    rows = store.load_sweep(s)
    point = ",".join(f"{k}={v}" for k, v in POINT.items()) + ",chain=34"  # timed as a chain of 34 layers
    for _, r in rows.iterrows():
        entry = g.measured[r["device_short"]][r["component"]][r["variant"]][point]
        assert entry["value"] == pytest.approx(r["ms_p50"] * 1000)
        assert entry["interval"] == pytest.approx([r["ms_p20"] * 1000, r["ms_p80"] * 1000])
        assert entry["run"] == s.name and entry["commit"] == str(r["commit"])[:12]
        assert entry["date"] == r["timestamp_utc"] and str(s) in entry["source"]
    # the facts, and every established flag, are as they were
    old = load_fuel(DEFAULT_FUEL)
    assert {k: (f.value, f.established) for k, f in g.facts.items()} == \
           {k: (f.value, f.established) for k, f in old.facts.items()}
    # a second update of the same rows changes nothing
    assert not fuel_update.update(fuel, s)["changed"] and fuel.read_text() == text


def test_update_leaves_out_noisy_and_failed_rows_and_keeps_a_later_measurement(tmp_path, fuel):
    noisy = {**row("bulk32k_early_pdl", 0.034, 0.035, 0.036), "noisy": True}
    failed = {**row("bulk32k_early", 0.038, 0.039, 0.040), "status": "failed"}
    s = sweep(tmp_path / "store", [noisy, failed], name="kda")
    res = fuel_update.update(fuel, s, dry_run=True)
    assert res["written"] == 0 and res["left_out"] == {"not ok": 1, "noisy": 1}
    late = sweep(tmp_path / "store", ROWS[:1], name="late", stamp="2026-12-02_10-00-00")
    early = sweep(tmp_path / "store", [row("bulk32k_early_pdl", 0.050, 0.051, 0.052)], name="early",
                  stamp="2026-11-30_10-00-00")
    fuel_update.update(fuel, late)
    res = fuel_update.update(fuel, early)
    assert res["kept_newer"] == 1 and res["written"] == 0
    entry = load_fuel(fuel).measured["h200"]["kda_decode"]["bulk32k_early_pdl"]
    assert entry[next(iter(entry))]["run"] == late.name


def test_dry_run_prints_the_diff_and_writes_nothing(fuel_cli, tmp_path, fuel):
    s = sweep(tmp_path / "store", ROWS, name="kda")
    before = fuel.read_bytes()
    out = fuel_cli("update", str(s), "--fuel", str(fuel), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert fuel.read_bytes() == before
    assert out.stdout.startswith("--- a/attention.yaml\n+++ b/attention.yaml\n")
    added = [ln for ln in out.stdout.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert "+measured:" in added and not any(ln.startswith("-") and not ln.startswith("---")
                                            for ln in out.stdout.splitlines())
    assert "would write 2 measured figure(s)" in out.stdout


def test_write_is_atomic_and_validated(tmp_path, fuel, monkeypatch):
    """A failed replace leaves the old file whole and no temporary file behind; a text that does
    not validate never replaces the fuel."""
    s = sweep(tmp_path / "store", ROWS, name="kda")
    before = fuel.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        fuel_update.update(fuel, s)
    monkeypatch.undo()
    assert fuel.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["attention.yaml", "store"]
    with pytest.raises(FuelError, match=r"^measured\.h200\.x\.y\.z\.value"):
        fuel_update.write_validated(fuel, fuel.read_text() + "measured:\n  h200:\n    x:\n      y:\n        z:\n"
                                    "          {value: -1, interval: [1, 2], run: r, commit: c, date: d, source: s}\n")
    assert fuel.read_bytes() == before


@pytest.mark.parametrize("body,key", [
    ("  h200:\n    kda_decode:\n      v:\n        M=32:\n          {value: 1.0, interval: [1, 2], run: r, commit: c, date: d}\n",
     "measured.h200.kda_decode.v.M=32.source"),
    ("  h200:\n    kda_decode:\n      v:\n        M=32:\n          {value: 1.0, interval: [1, 2], run: r, commit: c, date: d, source: s, colour: red}\n",
     "measured.h200.kda_decode.v.M=32.colour"),
    ("  h200:\n    kda_decode:\n      v:\n        M=32:\n          {value: 1.0, interval: [3, 2], run: r, commit: c, date: d, source: s}\n",
     "measured.h200.kda_decode.v.M=32.interval"),
    ("  h200: 3\n", "measured.h200"),
])
def test_measured_section_is_validated(tmp_path, fuel, body, key):
    fuel.write_text(fuel.read_text() + "measured:\n" + body)
    with pytest.raises(FuelError) as err:
        load_fuel(fuel)
    assert str(err.value).startswith(key + ":"), str(err.value)


def test_unknown_keys_elsewhere_are_still_refused(tmp_path, fuel):
    fuel.write_text(fuel.read_text() + "measurements:\n  h200: {}\n")
    with pytest.raises(FuelError, match=r"^measurements: unknown section"):
        load_fuel(fuel)


# -- settle ------------------------------------------------------------------------------------------
def test_settle_flips_one_open_fact_with_its_source_and_nothing_else(fuel):
    open_before = [f.key for f in load_fuel(fuel).open_facts()]
    key = open_before[-1]
    res = fuel_update.settle(fuel, key, "a stated source", dry_run=True)
    assert key in [f.key for f in load_fuel(fuel).open_facts()]  # dry run: still open
    assert "+    established: true" in res["diff"]
    fuel_update.settle(fuel, key, "a stated source")
    g = load_fuel(fuel)
    assert g.fact(key).established and g.fact(key).source == "a stated source"
    assert [f.key for f in g.open_facts()] == [k for k in open_before if k != key]


def test_settle_refusals_are_one_line_exit_2(fuel_cli, fuel):
    g = load_fuel(fuel)
    open_key = g.open_facts()[0].key
    established = next(k for k, f in g.facts.items() if f.established)
    for args, want in (([open_key, "--source", " "], "--source must name"),
                       ([established, "--source", "x"], "is already established"),
                       ([open_key, "--source", "x", "--value", "nonsense"], "is not one of its alternatives"),
                       (["indexer.colour", "--source", "x"], "unknown fact; allowed (the open facts)")):
        before = fuel.read_bytes()
        out = fuel_cli("settle", *args, "--fuel", str(fuel))
        assert out.returncode == 2 and want in out.stderr and out.stderr.count("\n") == 1, out.stderr
        assert fuel.read_bytes() == before
    out = fuel_cli("settle", open_key, "--fuel", str(fuel))  # --source is required
    assert out.returncode == 2 and "--source" in out.stderr


# -- import --------------------------------------------------------------------------------------------
PREFIX = "model.language_model.layers"
KDA_TENSORS = {"q_proj": [8192, 4096], "k_proj": [8192, 4096], "v_proj": [8192, 4096], "b_proj": [64, 4096],
               "f_b_proj": [8192, 128], "q_conv1d": [8192, 1, 4], "k_conv1d": [8192, 1, 4], "v_conv1d": [8192, 1, 4]}
MLA_TENSORS = {"q_a_proj": [1536, 4096], "q_b_proj": [16384, 1536], "kv_a_proj_with_mqa": [512, 4096],
               "kv_b_proj": [32768, 512], "indexer.wk": [128, 4096], "indexer.wq_b": [4096, 1536],
               "indexer.weights_proj": [32, 4096]}
CONFIG = {"architectures": ["Glm5NextForConditionalGeneration"], "text_config": {
    "hidden_size": 4096, "num_hidden_layers": 45, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_rope_head_dim": 0, "qk_nope_head_dim": 256, "v_head_dim": 256, "mla_use_nope": True,
    "index_topk": 2048, "index_kpool": 4, "index_kpool_compress": True, "index_kpool_always_select_tail": True,
    "index_n_heads": 32, "index_head_dim": 128, "max_position_embeddings": 1048576, "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1, "gate_lower_bound": -5.0,
    "linear_attn_config": {"kda_layers": [i for i in range(45) if i % 4 != 3],
                           "full_attn_layers": [i for i in range(45) if i % 4 == 3],
                           "head_dim": 128, "short_conv_kernel_size": 4}}}


def _header_only(path: pathlib.Path, shapes: dict[str, list[int]], dtype: str = "BF16") -> int:
    """A safetensors file of the header alone (data offsets as if the data followed; it does not)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return len(raw)


def _checkpoint(folder: pathlib.Path, config=CONFIG, mutate=None) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    kda = [i for i in range(45) if i % 4 != 3]
    shapes = [{}, {}]
    for i in range(46):  # layer 45 is the MTP layer: sparse-MLA shaped
        names = KDA_TENSORS if i in kda else MLA_TENSORS
        for name, shape in names.items():
            shapes[i % 2][f"{PREFIX}.{i}.self_attn.{name}.weight"] = list(shape)
    if mutate:
        mutate(shapes)
    for k, part in enumerate(shapes):
        _header_only(folder / f"model-0000{k + 1}-of-00002.safetensors", part)
    return folder


def test_import_reads_only_headers(tmp_path, monkeypatch):
    path = tmp_path / "a.safetensors"
    n = _header_only(path, {"x.weight": [1024, 1024]})
    read = []

    class Counting:
        def __init__(self, p):
            self.fh = open(p, "rb")

        def read(self, k=-1):
            assert k >= 0, "an unbounded read"
            data = self.fh.read(k)
            read.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(fuel_import, "_open", Counting)
    assert fuel_import.read_header(path)["x.weight"]["shape"] == [1024, 1024]
    assert sum(read) == 8 + n
    path.write_bytes(struct.pack("<Q", 10**6) + b"{}")  # a length past the end of the file
    with pytest.raises(ValueError, match="past the file's end"):
        fuel_import.read_header(path)


def test_import_matches_the_committed_fuel_fact_by_fact(fuel_cli, tmp_path):
    ckpt = _checkpoint(tmp_path / "ckpt")
    facts = fuel_import.facts_from(ckpt)
    g = load_fuel(DEFAULT_FUEL)
    rows = {r["key"]: r for r in fuel_import.compare(facts, DEFAULT_FUEL)}
    assert set(rows) == set(g.facts)
    for key, r in rows.items():
        if key in facts:
            assert r["state"] == "same", (key, r)
    # the facts the checkpoint states, each with a source naming its tensor or key
    on_disk = {"model_shape.hidden_size", "model_shape.q_lora_rank", "model_shape.num_hidden_layers",
               "layers.interleave", "layers.kda_layers", "layers.dsa_layers", "layers.mtp_layer", "layers.moe_layers",
               "kda.heads", "kda.head_k_dim", "kda.head_v_dim", "kda.conv_kernel", "kda.conv_tensors",
               "kda.gate_lower_bound", "mla.kv_lora_rank", "mla.qk_rope_head_dim", "mla.heads",
               "mla.qk_nope_head_dim", "mla.v_head_dim", "mla.softmax_scale", "indexer.heads", "indexer.head_dim",
               "indexer.head_weight_scale", "indexer.index_topk", "indexer.kpool", "indexer.kpool_compress",
               "indexer.kpool_always_select_tail", "serving.max_position_embeddings"}
    assert set(facts) == on_disk
    assert "kv_b_proj.weight [32768, 512]" in facts["mla.v_head_dim"][1]
    assert "b_proj.weight [64, 4096]" in facts["kda.heads"][1]
    assert facts["indexer.index_topk"][1] == "config.json text_config.index_topk"
    # what is not on disk is said so, never guessed
    assert rows["indexer.key_caching"]["state"] == "not on disk" and rows["indexer.key_caching"]["checkpoint"] is None
    out = fuel_cli("import", str(ckpt))
    assert out.returncode == 0, out.stderr
    assert f"{len(on_disk)} same, 0 mismatch" in out.stdout


def test_import_reports_each_mismatch_and_exits_1(fuel_cli, tmp_path, fuel):
    def fewer_heads(shapes):  # 48 KDA heads instead of 64, in every KDA layer
        for part in shapes:
            for name in part:
                if name.endswith(".b_proj.weight"):
                    part[name] = [48, 4096]
                elif name.endswith((".k_proj.weight", ".v_proj.weight")):
                    part[name] = [48 * 128, 4096]

    cfg = json.loads(json.dumps(CONFIG))
    cfg["text_config"]["index_topk"] = 1024
    ckpt = _checkpoint(tmp_path / "ckpt", cfg, fewer_heads)
    rows = {r["key"]: r for r in fuel_import.compare(fuel_import.facts_from(ckpt), fuel)}
    bad = {k for k, r in rows.items() if r["state"] == "MISMATCH"}
    assert bad == {"kda.heads", "indexer.index_topk"}
    assert (rows["kda.heads"]["checkpoint"], rows["kda.heads"]["fuel"]) == (48, 64)
    out = fuel_cli("import", str(ckpt), "--fuel", str(fuel))
    assert out.returncode == 1 and "2 fact(s) differ" in out.stderr
    assert "| `kda.heads` | MISMATCH | 48 | 64 |" in out.stdout


def test_import_refuses_a_checkpoint_that_contradicts_itself_or_lacks_files(fuel_cli, tmp_path):
    cfg = json.loads(json.dumps(CONFIG))
    cfg["text_config"]["index_head_dim"] = 64  # indexer.wk says 128
    out = fuel_cli("import", str(_checkpoint(tmp_path / "a", cfg)))
    assert out.returncode == 2 and "indexer.head_dim" in out.stderr and out.stderr.count("\n") == 1
    (tmp_path / "b").mkdir()
    out = fuel_cli("import", str(tmp_path / "b"))
    assert out.returncode == 2 and "no config.json" in out.stderr


def test_nvfp4_packed_weights_count_two_values_per_byte(tmp_path):
    """An NVFP4 checkpoint stores a quantized weight as U8 [rows, cols / 2] beside its
    weight_scale; its logical shape (what the geometry reads) doubles the last dimension."""
    name = f"{PREFIX}.0.self_attn.k_proj"
    header = {name + ".weight": {"dtype": "U8", "shape": [8192, 2048], "data_offsets": [0, 8192 * 2048]},
              name + ".weight_scale": {"dtype": "F8_E4M3", "shape": [8192, 256], "data_offsets": [0, 0]},
              f"{PREFIX}.0.self_attn.b_proj.weight": {"dtype": "U8", "shape": [64, 2048], "data_offsets": [0, 0]}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    t = fuel_import.tensors(tmp_path)
    assert t[name + ".weight"][1] == [8192, 4096]
    assert t[f"{PREFIX}.0.self_attn.b_proj.weight"][1] == [64, 2048]  # no scale beside it: not packed
