"""The fuel: the model's attention geometry as validated facts, and the `Geometry` built from it.

A fuel file holds facts only (``fuels/<model>/attention.yaml``). Each fact is a mapping with
``value``, ``source`` and ``established``; an open fact (``established: false``) also lists its
``alternatives`` and its ``value`` is one of them. `load_fuel` validates every fact against
`SCHEMA` and raises `FuelError` naming the first bad key; it never returns a half-checked fuel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pathlib
from typing import Any, Callable

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_FUEL = REPO_ROOT / "fuels" / "glm-5.3-flash" / "attention.yaml"


class FuelError(ValueError):
    """A fuel file that does not validate; the message names the key."""


def _posint(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v > 0 else "a positive integer"


def _nonnegint(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "an integer >= 0"


def _posnum(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)
    return None if ok else "a positive number"


def _negnum(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 and math.isfinite(v)
    return None if ok else "a negative number"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _one_of(*allowed: Any) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in allowed else "one of " + ", ".join(map(str, allowed))

    return check


def _layer_list(v: Any) -> str | None:
    ok = isinstance(v, list) and v and all(isinstance(i, int) and i >= 0 for i in v)
    return None if ok and sorted(set(v)) == v else "a sorted list of distinct layer indices"


def _interleave(v: Any) -> str | None:
    ok = isinstance(v, list) and v and all(x in ("KDA", "MLA") for x in v)
    return None if ok else "a list of KDA / MLA"


DTYPES = ("bf16", "fp32")

# Every fact the harness reads, with its check. A key missing from the file or present in the
# file but absent here is an error: a typo must not silently fall back to a default.
SCHEMA: dict[str, Callable[[Any], str | None]] = {
    "model_shape.hidden_size": _posint,
    "model_shape.q_lora_rank": _posint,
    "model_shape.num_hidden_layers": _posint,
    "layers.interleave": _interleave,
    "layers.kda_layers": _layer_list,
    "layers.dsa_layers": _layer_list,
    "layers.mtp_layer": _nonnegint,
    "layers.moe_layers": _posint,
    "kda.heads": _posint,
    "kda.head_k_dim": _posint,
    "kda.head_v_dim": _posint,
    "kda.conv_kernel": _posint,
    "kda.conv_tensors": _posint,
    "kda.gate_lower_bound": _negnum,
    "kda.l2norm_eps": _posnum,
    "kda.q_scale": _posnum,
    "kda.state_dtype": _one_of(*DTYPES),
    "kda.conv_state_dtype": _one_of(*DTYPES),
    "mla.kv_lora_rank": _posint,
    "mla.qk_rope_head_dim": _nonnegint,
    "mla.heads": _posint,
    "mla.qk_nope_head_dim": _posint,
    "mla.v_head_dim": _posint,
    "mla.softmax_scale": _posnum,
    "mla.kv_dtype": _one_of(*DTYPES),
    "indexer.heads": _posint,
    "indexer.head_dim": _posint,
    "indexer.head_weight_scale": _posnum,
    "indexer.index_topk": _posint,
    "indexer.index_topk_unit": _one_of("tokens", "pools"),
    "indexer.score_relu": _bool,
    "indexer.key_caching": _one_of("pooled", "per_token"),
    "indexer.kpool": _posint,
    "indexer.kpool_compress": _bool,
    "indexer.kpool_always_select_tail": _bool,
    "indexer.selection_pad": _posint,
    "indexer.key_dtype": _one_of(*DTYPES),
    "serving.context_cap": _posint,
    "serving.max_position_embeddings": _posint,
    "serving.pool_gib": _posnum,
    "serving.boosters": _posint,
    "serving.booster_gib": _posnum,
    "serving.weights_gib": _posnum,
}

# Top-level keys that are not fact sections.
_META_KEYS = {"schema", "model", "checkpoint", "measured"}


@dataclasses.dataclass(frozen=True)
class Fact:
    key: str
    value: Any
    source: str
    established: bool
    alternatives: tuple[Any, ...] = ()


class _Section:
    """Attribute access to one section's values: ``geometry.kda.heads``."""

    def __init__(self, name: str, values: dict[str, Any]):
        self._name = name
        self._values = values

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"fuel has no fact {self._name}.{key}") from None

    def __repr__(self) -> str:
        return f"<{self._name} {self._values}>"


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The validated fuel: ``geometry.kda.heads``, ``geometry.fact("kda.heads").source``."""

    model: str
    path: str
    sha256: str
    facts: dict[str, Fact]
    measured: dict[str, Any]

    def __getattr__(self, section: str) -> _Section:
        prefix = section + "."
        values = {k[len(prefix):]: f.value for k, f in self.facts.items() if k.startswith(prefix)}
        if not values:
            raise AttributeError(f"fuel has no section {section!r}")
        return _Section(section, values)

    def fact(self, key: str) -> Fact:
        return self.facts[key]

    def open_facts(self) -> list[Fact]:
        return [f for f in self.facts.values() if not f.established]

    # Derived quantities used everywhere; each is one line of arithmetic on facts.
    @property
    def n_kda_layers(self) -> int:
        return len(self.facts["layers.kda_layers"].value)

    @property
    def n_dsa_layers(self) -> int:
        return len(self.facts["layers.dsa_layers"].value)


def _check_fact(key: str, raw: Any, check: Callable[[Any], str | None]) -> Fact:
    if not isinstance(raw, dict):
        raise FuelError(f"{key}: expected a mapping with value, source, established")
    for field in ("value", "source", "established"):
        if field not in raw:
            raise FuelError(f"{key}.{field}: missing (every fact needs value, source, established)")
    extra = set(raw) - {"value", "source", "established", "alternatives"}
    if extra:
        raise FuelError(f"{key}.{sorted(extra)[0]}: unknown field; allowed: value, source, established, alternatives")
    if not isinstance(raw["source"], str) or not raw["source"].strip():
        raise FuelError(f"{key}.source: must be a non-empty string naming where the value comes from")
    if not isinstance(raw["established"], bool):
        raise FuelError(f"{key}.established: must be true or false")
    value = _plain(raw["value"])
    problem = check(value)
    if problem:
        raise FuelError(f"{key}.value: {value!r} is not {problem}")
    alternatives: tuple[Any, ...] = ()
    if not raw["established"]:
        alts = _plain(raw.get("alternatives"))
        if not isinstance(alts, list) or len(alts) < 2:
            raise FuelError(f"{key}.alternatives: an open fact (established: false) lists at least two alternatives")
        for alt in alts:
            if check(alt):
                raise FuelError(f"{key}.alternatives: {alt!r} is not {check(alt)}")
        if value not in alts:
            raise FuelError(f"{key}.value: {value!r} must be one of its alternatives {alts}")
        alternatives = tuple(alts)
    elif "alternatives" in raw:
        raise FuelError(f"{key}.alternatives: only open facts (established: false) list alternatives")
    return Fact(key, value, raw["source"], raw["established"], alternatives)


def _plain(v: Any) -> Any:
    """ruamel round-trip types to plain Python (CommentedSeq -> list, ScalarFloat -> float)."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    return v


def _cross_checks(facts: dict[str, Fact]) -> None:
    v = {k: f.value for k, f in facts.items()}
    kda, dsa = set(v["layers.kda_layers"]), set(v["layers.dsa_layers"])
    n = v["model_shape.num_hidden_layers"]
    if kda & dsa:
        raise FuelError(f"layers.dsa_layers: layers {sorted(kda & dsa)} are also in layers.kda_layers")
    if kda | dsa != set(range(n)):
        raise FuelError(f"layers.kda_layers: KDA and DSA layers must cover 0..{n - 1} exactly")
    pattern = v["layers.interleave"]
    for i in range(n - n % len(pattern)):
        want = pattern[i % len(pattern)]
        if (want == "KDA") != (i in kda):
            raise FuelError(f"layers.interleave: layer {i} is not {want} as the pattern {pattern} says")
    if v["layers.mtp_layer"] != n:
        raise FuelError(f"layers.mtp_layer: the MTP layer follows the stack, expected {n}")
    want_scale = 1.0 / math.sqrt(v["kda.head_k_dim"])
    if abs(v["kda.q_scale"] - want_scale) > 1e-12:
        raise FuelError(f"kda.q_scale: {v['kda.q_scale']} != 1/sqrt(kda.head_k_dim) = {want_scale}")
    if v["indexer.index_topk"] % v["indexer.kpool"]:
        raise FuelError("indexer.index_topk: must be a multiple of indexer.kpool")


MEASURED_FIELDS = ("value", "interval", "run", "commit", "date", "source")


def _check_measured(measured: Any) -> None:
    """``measured: {device: {component: {variant: {point: entry}}}}``, written by ``fuel update``
    (harness/fuel_update.py); each entry has exactly `MEASURED_FIELDS`."""
    levels = ("device", "component", "variant", "point")

    def walk(node: Any, where: str, depth: int) -> None:
        if depth == len(levels):
            _check_measured_entry(where, node)
            return
        if not isinstance(node, dict) or not node:
            raise FuelError(f"{where}: expected a non-empty mapping of {levels[depth]} -> "
                            f"{' -> '.join(levels[depth + 1:]) or 'entry'}")
        for k, v in node.items():
            walk(v, f"{where}.{k}", depth + 1)

    if measured == {}:
        return
    walk(measured, "measured", 0)


def _check_measured_entry(where: str, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise FuelError(f"{where}: expected a mapping with {', '.join(MEASURED_FIELDS)}")
    for f in MEASURED_FIELDS:
        if f not in entry:
            raise FuelError(f"{where}.{f}: missing (every measured entry has {', '.join(MEASURED_FIELDS)})")
    extra = sorted(set(entry) - set(MEASURED_FIELDS))
    if extra:
        raise FuelError(f"{where}.{extra[0]}: unknown field; allowed: {', '.join(MEASURED_FIELDS)}")
    if _posnum(entry["value"]):
        raise FuelError(f"{where}.value: {entry['value']!r} is not a positive number (µs per layer)")
    iv = entry["interval"]
    if not (isinstance(iv, list) and len(iv) == 2 and not any(_posnum(x) for x in iv) and iv[0] <= iv[1]):
        raise FuelError(f"{where}.interval: {iv!r} is not [p20, p80] in µs with p20 <= p80")
    for f in ("run", "commit", "date", "source"):
        if not isinstance(entry[f], str) or not entry[f].strip():
            raise FuelError(f"{where}.{f}: must be a non-empty string")


# Parsed fuels by (the path as given, the text's sha256): the round-trip YAML parse is the slow part
# (~1 s for the fuel with its measured section on a CI core) and a sweep, the budget and the tests
# load the same file many times. A changed file is a new key; a Geometry is frozen and its callers
# only read it.
_LOADED: dict[tuple[str, str], "Geometry"] = {}


def load_fuel(path: str | pathlib.Path = DEFAULT_FUEL) -> Geometry:
    """Load and validate a fuel file. Raises `FuelError` naming the first bad key."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FuelError(f"fuel: no such file {path}")
    text = path.read_text()
    key = (str(path), hashlib.sha256(text.encode()).hexdigest())
    if key in _LOADED:
        return _LOADED[key]
    _LOADED[key] = geometry = _parse_fuel(path, text, key[1])
    return geometry


def _parse_fuel(path: pathlib.Path, text: str, sha256: str) -> Geometry:
    try:
        data = YAML(typ="rt").load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
        raise FuelError(f"fuel: {path}{where}: invalid YAML ({what}); fix the file") from None
    if not isinstance(data, dict):
        raise FuelError(f"fuel: {path} is not a mapping")
    if data.get("schema") != 1:
        raise FuelError("schema: expected 1")
    if not isinstance(data.get("model"), str):
        raise FuelError("model: expected the model's name as a string")
    facts: dict[str, Fact] = {}
    for section, body in data.items():
        if section in _META_KEYS:
            continue
        if not isinstance(body, dict):
            raise FuelError(f"{section}: expected a mapping of facts")
        for name, raw in body.items():
            key = f"{section}.{name}"
            if key not in SCHEMA:
                known = sorted({k.split('.')[0] for k in SCHEMA})
                if section not in known:
                    raise FuelError(f"{section}: unknown section; allowed: {', '.join(known)}")
                allowed = [k.split(".", 1)[1] for k in SCHEMA if k.startswith(section + ".")]
                raise FuelError(f"{key}: unknown fact; allowed in {section}: {', '.join(allowed)}")
            facts[key] = _check_fact(key, raw, SCHEMA[key])
    missing = [k for k in SCHEMA if k not in facts]
    if missing:
        raise FuelError(f"{missing[0]}: missing from the fuel")
    _cross_checks(facts)
    measured = _plain(data.get("measured") or {})
    _check_measured(measured)
    return Geometry(
        model=str(data["model"]),
        path=str(path),
        sha256=sha256,
        facts=facts,
        measured=measured,
    )
