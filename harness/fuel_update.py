"""Fuel edits: measured figures from stored rows (``fuel update``) and settling an open fact with a
stated source (``fuel settle``).

Both edit ``attention.yaml`` as a ruamel.yaml round trip, so comments, key order and quoting stay
as they are; the new text is validated by `load_fuel` before it replaces the file (atomically: a
temporary file beside it, then ``os.replace``), so a bad edit never lands. ``dry_run`` returns the
unified diff and writes nothing.

``measured`` section layout (every key derived from the rows, none typed by hand)::

    measured:
      <device_short>:            # the rows' device_short, e.g. h200
        <component>:             # the row's component
          <variant>:             # the row's variant
            "<axis>=<v>,...":    # the row's point axes with their values, in the row's order,
                                 # then chain=<n> when the row was timed as a chain of n layers
              value: µs per layer, the p50 (the row's ms_p50 x 1000)
              interval: [p20, p80] in µs
              run: the sweep's name
              commit: the commit the rows were measured at (with "+dirty" when they were)
              date: the row's timestamp_utc
              source: the folder the row was read from

Only ``ok`` rows that are not ``noisy`` are written. An entry measured later than the run being
written is kept. Nothing here touches a fact: ``update`` edits only ``measured``, and ``settle`` is
the one way to flip ``established``, always with a source.
"""

from __future__ import annotations

import difflib
import io
import os
import pathlib
import tempfile
from typing import Any

import pandas as pd
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from harness import store
from harness.fuel import MEASURED_FIELDS as ENTRY_FIELDS, SCHEMA, FuelError, load_fuel

MEASURED = "measured"


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096  # never re-wrap a long source line
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def _load(path: pathlib.Path) -> tuple[str, Any]:
    if not path.is_file():
        raise FuelError(f"fuel: no such file {path}")
    load_fuel(path)  # refuse to edit a fuel that does not validate as it is
    text = path.read_text()
    return text, _yaml().load(text)


def _dump(data: Any) -> str:
    buf = io.StringIO()
    _yaml().dump(data, buf)
    return buf.getvalue()


def diff(old: str, new: str, path: pathlib.Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        fromfile=f"a/{path.name}", tofile=f"b/{path.name}"))


def write_validated(path: pathlib.Path, text: str) -> None:
    """Validate ``text`` as a fuel, then replace ``path`` with it atomically."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check.yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        load_fuel(tmp)  # raises FuelError naming the key; the fuel stays as it was
    finally:
        pathlib.Path(tmp).unlink(missing_ok=True)
    store.atomic_write_bytes(path, text.encode())


# -- rows -> measured entries ---------------------------------------------------------------------
def load_rows(folder: str | pathlib.Path) -> tuple[pd.DataFrame, str]:
    """The rows of a stored sweep folder or of a published report folder (its ``rows.csv``)."""
    folder = pathlib.Path(folder)
    if (folder / "rows.csv").is_file():
        return store.read_rows_table(folder / "rows.csv"), str(folder)
    if (folder / store.PROVENANCE).is_file():
        return store.load_sweep(folder), str(folder)
    raise FileNotFoundError(f"fuel update: {folder} is neither a sweep folder (provenance.json) "
                            f"nor a report folder (rows.csv)")


def _scalar(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def point_key(row: pd.Series) -> str:
    """``M=32,state_dtype=bf16`` (the row's point axes in order), ``,chain=34`` when chained."""
    axes = [a for a in str(row.get("point_axes") or "").split(",") if a]
    parts = [f"{a}={_scalar(row[a])}" for a in axes if a in row.index and not pd.isna(row[a])]
    chain = row.get("chain")
    if chain is not None and not pd.isna(chain) and int(chain) > 1:
        parts.append(f"chain={int(chain)}")
    return ",".join(parts) or "default"


def entries(rows: pd.DataFrame, source: str) -> tuple[list[tuple[str, str, str, str, dict]], int]:
    """(device, component, variant, point, entry) for each ok, steady row; and how many rows were
    left out as {"not ok": n, "noisy": n}."""
    out, left_out = [], {"not ok": 0, "noisy": 0}
    for _, r in rows.iterrows():
        if r.get("status") != "ok" or pd.isna(r.get("ms_p50")):
            left_out["not ok"] += 1
            continue
        if str(r.get("noisy")) == "True":  # bool in a stored sweep, the text True in a rows.csv
            left_out["noisy"] += 1
            continue
        device = r.get("device_short")
        if device is None or pd.isna(device):
            device = str(r.get("backend") or "unknown")
        dirty = r.get("dirty") in (True, "True")
        commit = str(r.get("commit") or "unknown")[:12] + ("+dirty" if dirty else "")
        run = pathlib.Path(str(r.get("sweep_dir") or r.get("sweep") or source)).name
        us = lambda ms: round(float(ms) * 1000.0, 4)  # noqa: E731
        p20, p80 = r.get("ms_p20"), r.get("ms_p80")
        entry = {"value": us(r["ms_p50"]),
                 "interval": [us(p20), us(p80)] if not (pd.isna(p20) or pd.isna(p80)) else None,
                 "run": run, "commit": commit, "date": str(r.get("timestamp_utc") or "unknown"),
                 "source": f"{source} (job {_scalar(r.get('job'))})"}
        if entry["interval"] is None:
            entry["interval"] = [entry["value"], entry["value"]]
        out.append((str(device), str(r["component"]), str(r["variant"]), point_key(r), entry))
    return out, left_out


def _flow(values: list) -> Any:
    from ruamel.yaml.comments import CommentedSeq

    seq = CommentedSeq(values)
    seq.fa.set_flow_style()
    return seq


def update(path: str | pathlib.Path, folder: str | pathlib.Path, dry_run: bool = False) -> dict[str, Any]:
    """Write ``folder``'s rows into the fuel's ``measured`` section. Returns counts and the diff."""
    path = pathlib.Path(path)
    rows, source = load_rows(folder)
    if rows.empty:
        raise FileNotFoundError(f"fuel update: {folder} has no stored rows")
    old, data = _load(path)
    new_entries, left_out = entries(rows, source)
    if MEASURED not in data or data[MEASURED] is None:
        data[MEASURED] = CommentedMap()
        data.yaml_set_comment_before_after_key(
            MEASURED, before="\nMeasured figures, written by `attnbench fuel update` (harness/fuel_update.py), never by hand:\n"
                             "device -> component -> variant -> point (the rows' point axes) -> µs per layer (p50),\n"
                             "[p20, p80], the run, its commit and date, the folder it was read from.")
    measured = data[MEASURED]
    written = kept = 0
    for device, comp, variant, point, entry in new_entries:
        node = measured
        for key in (device, comp, variant):
            if key not in node or node[key] is None:
                node[key] = CommentedMap()
            node = node[key]
        have = node.get(point)
        if have is not None and str(have.get("date", "")) > entry["date"]:
            kept += 1  # a later measurement stays
            continue
        item = CommentedMap()
        for f in ENTRY_FIELDS:
            item[f] = _flow(entry[f]) if f == "interval" else entry[f]
        node[point] = item
        written += 1
    new = _dump(data)
    result = {"written": written, "kept_newer": kept, "left_out": left_out, "diff": diff(old, new, path),
              "changed": new != old}
    if not dry_run and new != old:
        write_validated(path, new)
    return result


# -- settle an open fact --------------------------------------------------------------------------
def settle(path: str | pathlib.Path, key: str, source: str, value: Any = None, dry_run: bool = False) -> dict[str, Any]:
    """Mark the open fact ``key`` established with ``source`` as its source (``value``, given as
    text, must be one of its alternatives; default: its current value)."""
    path = pathlib.Path(path)
    open_keys = [f.key for f in load_fuel(path).open_facts()]
    if key not in SCHEMA:
        raise FuelError(f"fuel settle: {key}: unknown fact; allowed (the open facts): {', '.join(open_keys)}")
    if not isinstance(source, str) or not source.strip():
        raise FuelError(f"fuel settle: {key}: --source must name where the value is settled (non-empty)")
    old, data = _load(path)
    section, name = key.split(".", 1)
    raw = data[section][name]
    if raw["established"]:
        raise FuelError(f"fuel settle: {key} is already established (source: {raw['source']})")
    alternatives = list(raw["alternatives"])
    chosen = raw["value"]
    if value is not None:
        matches = [a for a in alternatives if str(a).lower() == str(value).lower()]
        if not matches:
            raise FuelError(f"fuel settle: {key}: {value!r} is not one of its alternatives "
                            f"{', '.join(map(str, alternatives))}")
        chosen = matches[0]
    raw["value"] = chosen
    raw["source"] = source.strip()
    raw["established"] = True
    del raw["alternatives"]
    new = _dump(data)
    if not dry_run:
        write_validated(path, new)
    return {"key": key, "value": chosen, "diff": diff(old, new, path)}

