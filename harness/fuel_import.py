"""``fuel import``: the geometry facts a checkpoint folder states, from ``config.json`` and the
safetensors headers alone (never the weights), each with its source, checked against the fuel.

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON
(``{name: {dtype, shape, data_offsets}}``, plus ``__metadata__``); `read_header` reads exactly
those 8 + N bytes and nothing after them, so a header-only file (data truncated) reads the same as
a full one. The tensor names are the ones seed 000's shape dump lists
(``model.language_model.layers.<i>.self_attn.<name>``); any prefix before ``layers.<i>.`` is
accepted. Which tensor or key gives which fact follows the fuel's ``source`` strings:

- KDA layers are the layers with ``k_conv1d``; DSA layers those with ``kv_a_proj_with_mqa``
  below ``num_hidden_layers``; the one at ``num_hidden_layers`` is the MTP layer;
- ``k_proj [heads x head_k_dim, hidden]``, ``b_proj [heads, hidden]``, ``k_conv1d [., 1, kernel]``;
- ``kv_a_proj_with_mqa [kv_lora_rank + rope, hidden]``, ``kv_b_proj [heads x (nope + v), kv_lora_rank]``,
  ``q_b_proj [heads x (nope + rope), q_lora_rank]``;
- ``indexer.wk [head_dim, hidden]``, ``indexer.wq_b [heads x head_dim, q_lora_rank]``,
  ``indexer.weights_proj [heads, hidden]``.

A fact the files do not state (the key-caching strategy, dtypes the engine chooses, constants of
the code) is listed as not on disk, never guessed. NVFP4-packed weights (``U8`` with a
``weight_scale`` beside them) hold two values per byte: their logical last dimension is doubled.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import struct
from typing import Any

from harness.fuel import FuelError, load_fuel

MAX_HEADER = 100 * 2**20  # a larger header length is a corrupt or foreign file, not a checkpoint
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.(.+)\.weight$")


def _open(path: pathlib.Path):  # one place files are opened (the tests count what is read)
    return open(path, "rb")


def read_header(path: str | pathlib.Path) -> dict[str, Any]:
    """A safetensors file's JSON header, reading only its 8 + N bytes."""
    path = pathlib.Path(path)
    size = path.stat().st_size
    with _open(path) as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise ValueError(f"fuel import: {path.name}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or n > size - 8:
            raise ValueError(f"fuel import: {path.name}: header length {n} is past the file's end or over "
                             f"{MAX_HEADER} bytes; not a safetensors file")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"fuel import: {path.name}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"fuel import: {path.name}: header is not a mapping")
    return header


def tensors(folder: pathlib.Path) -> dict[str, tuple[str, list[int], str]]:
    """name -> (dtype, logical shape, file) over every ``*.safetensors`` of the folder."""
    out: dict[str, tuple[str, list[int], str]] = {}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"fuel import: no *.safetensors in {folder}")
    for f in files:
        for name, meta in read_header(f).items():
            if name != "__metadata__":
                out[name] = (str(meta["dtype"]), [int(x) for x in meta["shape"]], f.name)
    for name, (dtype, shape, fname) in list(out.items()):
        if dtype == "U8" and name.endswith(".weight") and name[:-len("weight")] + "weight_scale" in out and shape:
            out[name] = (dtype, shape[:-1] + [shape[-1] * 2], fname)
    return out


class _Config:
    """config.json keys, looked up at the top, in ``text_config`` and in ``linear_attn_config``."""

    def __init__(self, data: dict[str, Any]):
        self.scopes: list[tuple[str, dict]] = []
        for prefix, node in (("", data), ("text_config.", data.get("text_config"))):
            if isinstance(node, dict):
                self.scopes.append((prefix, node))
                lin = node.get("linear_attn_config")
                if isinstance(lin, dict):
                    self.scopes.append((prefix + "linear_attn_config.", lin))

    def get(self, key: str, scope: str = "") -> tuple[Any, str] | None:
        for prefix, node in self.scopes:
            if prefix.endswith(scope) and key in node:
                return node[key], f"config.json {prefix}{key}"
        return None


def _shape(t: dict, layer: int | None, name: str) -> tuple[list[int], str] | None:
    if layer is None:
        return None
    hit = t.get((layer, name))
    return (hit[1], f"layers.{layer}.self_attn.{name}.weight {hit[1]}") if hit else None


def _period(kinds: list[str]) -> list[str]:
    for p in range(1, len(kinds) + 1):
        full = len(kinds) - len(kinds) % p
        if full and all(kinds[i] == kinds[i % p] for i in range(full)):
            return kinds[:p]
    return kinds


def facts_from(folder: str | pathlib.Path) -> dict[str, tuple[Any, str]]:
    """fact key -> (value, source) for every fact the checkpoint states."""
    folder = pathlib.Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"fuel import: no config.json in {folder}")
    try:
        cfg = _Config(json.loads(cfg_path.read_text()))
    except json.JSONDecodeError as exc:
        raise ValueError(f"fuel import: {cfg_path}: not JSON ({exc})") from None
    all_t = tensors(folder)
    t: dict[tuple[int, str], tuple[str, list[int], str]] = {}
    for name, v in all_t.items():
        m = _LAYER.search(name)
        if m:
            t[(int(m.group(1)), m.group(2))] = v
    out: dict[str, tuple[Any, str]] = {}

    def put(key: str, value: Any, source: str) -> None:
        out[key] = (value, source)

    def put_cfg(key: str, cfg_key: str) -> None:
        hit = cfg.get(cfg_key)
        if hit is not None:
            put(key, hit[0], hit[1])

    put_cfg("model_shape.num_hidden_layers", "num_hidden_layers")
    n = out.get("model_shape.num_hidden_layers", (None,))[0]
    layers = sorted({i for i, _ in t})
    kda = [i for i in layers if (i, "k_conv1d") in t]
    mla_all = [i for i in layers if (i, "kv_a_proj_with_mqa") in t]
    dsa = [i for i in mla_all if n is None or i < n]
    kda0 = kda[0] if kda else None
    dsa0 = dsa[0] if dsa else None

    # model_shape
    hit = _shape(t, kda0, "k_proj")
    if hit:
        put("model_shape.hidden_size", hit[0][1], f"{hit[1]}: second dim")
    else:
        put_cfg("model_shape.hidden_size", "hidden_size")
    hit = _shape(t, dsa0, "q_b_proj")
    if hit:
        put("model_shape.q_lora_rank", hit[0][1], f"{hit[1]}: second dim")
    else:
        put_cfg("model_shape.q_lora_rank", "q_lora_rank")

    # layers
    if kda:
        put("layers.kda_layers", kda, f"layers with self_attn.k_conv1d.weight ({len(kda)})")
    if dsa:
        put("layers.dsa_layers", dsa, f"layers with self_attn.kv_a_proj_with_mqa.weight below num_hidden_layers ({len(dsa)})")
    if kda and dsa and n:
        kinds = ["KDA" if i in kda else "MLA" for i in range(n)]
        put("layers.interleave", _period(kinds), "shortest repeating pattern of the KDA / DSA layers above")
    if n is not None and n in mla_all:
        put("layers.mtp_layer", n, f"layers.{n}.self_attn.kv_a_proj_with_mqa.weight present (after the stack)")
    hit = cfg.get("mlp_layer_types")
    if isinstance(hit and hit[0], list):
        put("layers.moe_layers", sum(1 for x in hit[0] if x != "dense"), f"{hit[1]}: entries not dense")
    elif (fk := cfg.get("first_k_dense_replace")) is not None and n is not None:
        put("layers.moe_layers", n - fk[0], f"num_hidden_layers - {fk[1]}")

    # kda
    heads = _shape(t, kda0, "b_proj")
    if heads:
        put("kda.heads", heads[0][0], f"{heads[1]}: first dim")
        for key, name in (("kda.head_k_dim", "k_proj"), ("kda.head_v_dim", "v_proj")):
            hit = _shape(t, kda0, name)
            if hit and hit[0][0] % heads[0][0] == 0:
                put(key, hit[0][0] // heads[0][0], f"{hit[1]} / kda.heads")
    hit = _shape(t, kda0, "k_conv1d")
    if hit:
        put("kda.conv_kernel", hit[0][-1], f"{hit[1]}: last dim")
        convs = [c for c in ("q_conv1d", "k_conv1d", "v_conv1d") if (kda0, c) in t]
        put("kda.conv_tensors", len(convs), f"layers.{kda0}.self_attn.{{{', '.join(convs)}}}.weight present")
    put_cfg("kda.gate_lower_bound", "gate_lower_bound")

    # mla
    rope = cfg.get("qk_rope_head_dim")
    if rope is not None:
        put("mla.qk_rope_head_dim", rope[0], rope[1])
    nope, v_dim = cfg.get("qk_nope_head_dim"), cfg.get("v_head_dim")
    hit = _shape(t, dsa0, "kv_a_proj_with_mqa")
    if hit and rope is not None:
        put("mla.kv_lora_rank", hit[0][0] - rope[0], f"{hit[1]}: first dim - {rope[1]}")
    elif cfg.get("kv_lora_rank") is not None:
        put_cfg("mla.kv_lora_rank", "kv_lora_rank")
    q_b = _shape(t, dsa0, "q_b_proj")
    kv_b = _shape(t, dsa0, "kv_b_proj")
    if nope is not None and rope is not None and q_b and q_b[0][0] % (nope[0] + rope[0]) == 0:
        mheads = q_b[0][0] // (nope[0] + rope[0])
        put("mla.heads", mheads, f"{q_b[1]} / ({nope[1]} + {rope[1]})")
        put("mla.qk_nope_head_dim", nope[0], nope[1])
        put("mla.softmax_scale", (nope[0] + rope[0]) ** -0.5, f"({nope[1]} + {rope[1]}) ** -0.5")
        if kv_b and kv_b[0][0] % mheads == 0:
            put("mla.v_head_dim", kv_b[0][0] // mheads - nope[0], f"{kv_b[1]} / mla.heads - {nope[1]}")
    elif v_dim is not None:
        put("mla.v_head_dim", v_dim[0], v_dim[1])

    # indexer
    wk = _shape(t, dsa0, "indexer.wk")
    if wk:
        put("indexer.head_dim", wk[0][0], f"{wk[1]}: first dim")
    hit = _shape(t, dsa0, "indexer.weights_proj")
    if hit:
        put("indexer.heads", hit[0][0], f"{hit[1]}: first dim")
    else:
        put_cfg("indexer.heads", "index_n_heads")
    if "indexer.heads" in out and "indexer.head_dim" in out:
        h, d = out["indexer.heads"][0], out["indexer.head_dim"][0]
        put("indexer.head_weight_scale", h ** -0.5 * d ** -0.5, "indexer.heads^-1/2 x indexer.head_dim^-1/2 (derived)")
    for key, cfg_key in (("indexer.index_topk", "index_topk"), ("indexer.kpool", "index_kpool"),
                         ("indexer.kpool_compress", "index_kpool_compress"),
                         ("indexer.kpool_always_select_tail", "index_kpool_always_select_tail"),
                         ("serving.max_position_embeddings", "max_position_embeddings")):
        put_cfg(key, cfg_key)

    # config keys that must agree with the shapes: a disagreement is reported as its own fact
    for key, cfg_key in (("model_shape.hidden_size", "hidden_size"), ("model_shape.q_lora_rank", "q_lora_rank"),
                         ("mla.kv_lora_rank", "kv_lora_rank"), ("indexer.heads", "index_n_heads"),
                         ("indexer.head_dim", "index_head_dim"), ("kda.head_k_dim", "linear_attn_config.head_dim"),
                         ("kda.head_v_dim", "linear_attn_config.head_dim"),
                         ("kda.conv_kernel", "short_conv_kernel_size"), ("mla.v_head_dim", "v_head_dim")):
        scope, _, cfg_key = cfg_key.rpartition(".")
        hit = cfg.get(cfg_key, scope + "." if scope else "")
        if hit is not None and key in out and hit[0] != out[key][0]:
            raise ValueError(f"fuel import: {key}: the shapes say {out[key][0]!r} ({out[key][1]}) but "
                             f"{hit[1]} says {hit[0]!r}; the checkpoint contradicts itself")
        if hit is not None and key in out:
            value, source = out[key]
            out[key] = (value, f"{source}; {hit[1]} {hit[0]!r}")
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    return a == b


def compare(imported: dict[str, tuple[Any, str]], fuel_path: str | pathlib.Path) -> list[dict[str, Any]]:
    """One row per fuel fact: the checkpoint's value and source beside the fuel's, and the state
    (``same``, ``MISMATCH``, ``not on disk``)."""
    g = load_fuel(fuel_path)
    rows = []
    for key, fact in g.facts.items():
        if key in imported:
            value, source = imported[key]
            state = "same" if _same(value, fact.value) else "MISMATCH"
        else:
            value, source, state = None, "not in config.json or the tensor shapes", "not on disk"
        rows.append({"key": key, "state": state, "checkpoint": value, "fuel": fact.value, "source": source,
                     "established": fact.established})
    return rows


def _fmt(v: Any) -> str:
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(map(str, v[:4]))}, ..., {v[-1]}] ({len(v)})"
    return "–" if v is None else str(v)


def run(checkpoint: str | pathlib.Path, fuel_path: str | pathlib.Path) -> tuple[str, int]:
    """(the markdown report, the number of mismatching facts)."""
    try:
        rows = compare(facts_from(checkpoint), fuel_path)
    except KeyError as exc:
        raise FuelError(f"fuel import: a safetensors header entry lacks {exc}") from None
    lines = ["| fact | state | checkpoint | fuel | source (checkpoint) |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['key']}` | {r['state']} | {_fmt(r['checkpoint'])} | {_fmt(r['fuel'])}"
                     f"{'' if r['established'] else ' (open)'} | {r['source']} |")
    counts = {s: sum(r["state"] == s for r in rows) for s in ("same", "MISMATCH", "not on disk")}
    head = (f"fuel import: {checkpoint} against {fuel_path}: {counts['same']} same, {counts['MISMATCH']} "
            f"mismatch, {counts['not on disk']} not on disk (headers only; no weights read)\n\n")
    return head + "\n".join(lines) + "\n", counts["MISMATCH"]
