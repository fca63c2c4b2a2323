"""Axes: the keys that define a point, declared by the kernel families that read them.

A family declares each axis once (name, type, allowed values or range, default, one line of what
it is) next to its Component; the harness only knows that axes exist. The job schema that Hydra
checks overrides against is built from every declared axis (``harness.config.register_schema``),
so ``attnbench M=32 context=262144`` stays as short as a field of a fixed schema, while a new
family adds its axes without touching ``harness/``.

An axis shared by several families (the streams M, say) is one ``Axis`` object that each of them
lists; two different declarations under one name are refused when the second registers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable


class ConfigError(ValueError):
    """A bad job configuration; the message is one line naming the key and what is allowed."""


@dataclasses.dataclass(frozen=True)
class Axis:
    """One key of a point.

    name:     the config key and the row column (``M``).
    kind:     ``int`` or ``str``.
    default:  the value a job gets when nothing overrides it; None only with ``resolve``.
    doc:      one line: what the axis is, for ``attnbench list`` and the docs.
    choices:  the allowed values (``str`` axes, or a fixed set of ints).
    low/high: the inclusive range of an ``int`` axis; ``high`` may be ``high(geometry) -> int``
              when the fuel bounds it (the context by the model's position limit).
    resolve:  ``resolve(geometry) -> value`` for a None default (``topk``: the fuel's index_topk).
    """

    name: str
    kind: type
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    low: int | None = None
    high: int | Callable[[Any], int] | None = None
    resolve: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in (int, str):
            raise TypeError(f"axis {self.name}: kind must be int or str, got {self.kind!r}")
        if self.default is None and self.resolve is None:
            raise TypeError(f"axis {self.name}: a None default needs resolve(geometry)")

    def upper(self, geometry) -> int | None:
        return self.high(geometry) if callable(self.high) else self.high

    def allowed(self, geometry=None) -> str:
        """What the one-line error says is allowed."""
        if self.choices is not None:
            return ", ".join(str(c) for c in self.choices)
        hi = self.upper(geometry) if geometry is not None or not callable(self.high) else None
        lo = self.low if self.low is not None else "-inf"
        kind = "integers" if self.kind is int else "values"
        return f"{kind} {lo}..{hi}" if hi is not None else f"{kind} >= {lo}"

    def check(self, value: Any, geometry) -> Any:
        """The value as the point holds it (None resolved from the fuel); ConfigError otherwise."""
        if value is None:
            if self.resolve is None:
                raise ConfigError(f"{self.name}: no value; allowed: {self.allowed(geometry)}")
            value = self.resolve(geometry)
        if self.choices is not None:
            if value not in self.choices:
                raise ConfigError(f"{self.name}: unknown value {value!r}; allowed: {self.allowed(geometry)}")
            return value
        if self.kind is int:
            hi = self.upper(geometry)
            # NaN and bools are not integers here; compare only once the value is a real int.
            bad = (isinstance(value, bool) or not isinstance(value, int) or
                   (self.low is not None and value < self.low) or (hi is not None and value > hi))
            if bad:
                raise ConfigError(f"{self.name}: {value} is out of range; allowed: {self.allowed(geometry)}")
        return value

    def parse(self, text: str) -> Any:
        """A value from a command-line string (``--point M=32``)."""
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise ConfigError(f"{self.name}: {text!r} is not an integer; allowed: {self.allowed()}") from None
        return text


def in_range(key: str, value: Any, lo: float, hi: float | None, kind: str = "integers") -> None:
    """A one-line error unless ``lo <= value <= hi`` (for harness keys, which are not axes)."""
    # NaN compares false with everything, so test for finiteness first (a NaN max_noise would
    # silently switch the stop rule off).
    if value is None or not math.isfinite(value) or value < lo or (hi is not None and value > hi):
        allowed = f"{kind} {lo}..{hi}" if hi is not None else f"{kind} >= {lo}"
        raise ConfigError(f"{key}: {value} is out of range; allowed: {allowed}")


def one_of(key: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: unknown value {value!r}; allowed: {', '.join(allowed)}")


def same_declaration(a: Axis, b: Axis) -> bool:
    """Two declarations are one axis when everything but the callables' identity agrees (a family
    that re-imports a shared axis passes the same object)."""
    return a is b or (a.name, a.kind, a.default, a.choices, a.low, a.high, a.resolve) == \
        (b.name, b.kind, b.default, b.choices, b.low, b.high, b.resolve)
