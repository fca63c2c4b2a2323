"""Checks per output, declared by the component: every output compared with its float64 reference.

A component declares one *check* per output; ``compare`` applies it and returns a `Comparison`.
Public API::

    Exact()                                  byte-exact
    RelErr(tolerance)                        norm-wise and element-wise relative error
    IndexSet(scores, tie, masked=-1, masked_positions=True, candidates=None)
                                             index selections (top-k rows with ties and -1 slots)
    Check                                    Exact | RelErr | IndexSet
    Comparison                               one result, the same fields for every kind
    compare(name, out, ref_outputs, check, first=3) -> Comparison
    compare_all(out, ref_outputs, checks) -> list[Comparison]
    as_check(value) -> Check                 migration: a float tolerance (0.0 -> Exact) or a Check
    INDEX_POISON_BYTE                        0xAA, the byte index outputs are poisoned with

Every check kind is a small frozen dataclass with ``describe()``, one line stating its rule.

``Exact()``
    The raw bytes of ``out`` equal those of the reference: dtype and shape must match, NaN
    payloads and signed zeros count. (What ``tolerance == 0.0`` meant before checks.)

``RelErr(tolerance)``, ``0 < tolerance < inf``
    ``rel_err = ||out - ref|| / ||ref||`` (Frobenius, float64) ``<= tolerance``, AND no element
    off by more than ``tolerance * max|ref|``, AND no non-finite element where the reference is
    finite (``unwritten``: poisoned NaN that a kernel never overwrote). The element rule is there
    because the norm alone shrinks as sqrt(fraction wrong): a kernel that skipped one head of an
    in-place state (left at plausible initial values) could pass at large M.

``IndexSet(scores, tie, masked=-1, masked_positions=True, candidates=None)``
    ``out`` and the reference are signed-integer arrays ``[rows..., width]`` (any signed dtype;
    an ``out`` of another kind fails every row); each row is one selection. ``ref_outputs[scores]`` is a reference array ``[rows..., n_scores]`` holding every
    candidate's score (an auxiliary reference array, not an output: ``compare_all`` compares only
    the names it is given). The valid index range is ``[0, n)`` with ``n = candidates`` (default
    ``n_scores``; at most ``n_scores``). ``masked`` (negative; -1 by default) marks an empty slot.
    A row passes iff

    - every slot holds ``masked`` or an index in ``[0, n)``; any other value counts as
      *unwritten*. Index outputs are poisoned with ``INDEX_POISON_BYTE`` (0xAA) bytes, never with
      -1 (nor 0xFF bytes, which read as -1): -1 is a legal masked slot, so a slot a kernel never
      wrote must hold a value no kernel can legally write;
    - no index appears twice;
    - the masked slots are exactly where the reference has them (``masked_positions=True``) or
      as many as the reference has (``masked_positions=False``);
    - the members (the slots that are not ``masked``) agree under ``tie``:

      ``"lower_index"``: the same set of indices as the reference, which is built by a rule that
      depends on no kernel: rank by score, and among equal scores the lower index wins (what a
      stable sort of ``-scores`` keeps; the component's reference must follow it, compare cannot
      tell which candidates were eligible). A kernel that took another candidate of equal score
      at the k-th boundary fails.
      ``"equal_scores"``: the sorted vector of the members' scores (``ref_outputs[scores]`` at
      the members' indices, row by row) equals the reference members' sorted scores exactly. A
      kernel that took another candidate of the same score at the k-th boundary passes; any
      wrong member (a different score) fails.

    The order of members within a row does not matter (only the masked slots' positions may be
    fixed, above); use ``Exact`` for a fully ordered output. A reference that breaks these rules
    itself (a duplicate, an illegal value) or whose scores do not fit it raises ValueError: that
    is a bug in the component, not a kernel's failure.

`Comparison` fields, per kind:

==============  ===========================  ===========================  ======================
field           Exact                        RelErr                       IndexSet
==============  ===========================  ===========================  ======================
``max_err``     0.0 identical, inf if not    max |out - ref| (float64)    0.0 all rows pass, inf
``rel_err``     0.0 identical, inf if not    ||out - ref|| / ||ref||      NaN (no such measure)
``mismatches``  elements with any byte off   elements off by more than    rows that fail
                                             tolerance * max|ref|
``unwritten``   0 (a poisoned element is     non-finite where ref is      slots outside masked
                one that differs)            finite                       and [0, n)
``first_bad``   first 3 element indices      first 3 element indices      first 3 row indices
``detail``      dtype mismatch, if any       ''                           why the first bad row
                                                                          fails
==============  ===========================  ===========================  ======================

Exact's rel_err is 0/inf as the tolerance-0 path always reported it, so a byte-exact output's
``rel_err`` column reads as before. ``shape_ok`` is False when ``out``'s shape differs from the
reference's (then every element, or row, counts as a mismatch and ``detail`` gives both shapes).
``ok`` is the verdict; ``check`` is the check's ``describe()``; ``unit`` says what
``mismatches`` counts (``"elements"`` or ``"rows"``); ``describe()`` is one line with all of it.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
from typing import Literal, Mapping, Union

import numpy as np

INDEX_POISON_BYTE = 0xAA

_FIRST = 3


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One output's comparison with its reference (field meanings per check kind: module doc)."""

    name: str
    check: str                                 # the check's describe()
    ok: bool
    max_err: float
    rel_err: float
    mismatches: int
    unwritten: int
    first_bad: tuple[tuple[int, ...], ...]
    shape_ok: bool = True
    detail: str = ""
    unit: str = "elements"                     # what mismatches counts: "elements" or "rows"

    def describe(self) -> str:
        """One line: the verdict, every figure, the first bad indices, the reason and the rule."""
        verdict = "ok" if self.ok else "FAILED"
        if not self.shape_ok:
            return f"{self.name}: {verdict}: {self.detail} [{self.check}]"
        rows = self.unit == "rows"
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten} unwritten slots" if rows
                         else f"{self.unwritten} non-finite or unwritten elements")
        parts.append(f"{self.mismatches} {self.unit} {'wrong' if rows else 'differ'}")
        if not np.isnan(self.rel_err):
            parts.append(f"rel_err {self.rel_err:.3e}")
        parts.append(f"max_err {self.max_err:.3e}")
        line = f"{self.name}: {verdict}: " + ", ".join(parts)
        if self.first_bad:
            line += f" (first at {', '.join(str(i) for i in self.first_bad)})"
        if self.detail:
            line += f"; {self.detail}"
        return line + f" [{self.check}]"


# -- the check kinds --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Exact:
    """Byte-exact: same dtype, same shape, same bytes (NaN payloads and signed zeros count)."""

    def describe(self) -> str:
        return "byte-exact: same dtype and every byte equal"

    def _compare(self, name: str, out: np.ndarray, ref_outputs: Mapping, first: int) -> Comparison:
        out, ref = np.asarray(out), np.asarray(ref_outputs[name])
        if out.shape != ref.shape:
            return _shape_failure(name, self, out, ref)
        detail = ""
        if out.dtype == ref.dtype:
            n = out.dtype.itemsize
            a = np.ascontiguousarray(out).view(np.uint8).reshape(out.shape + (n,))
            b = np.ascontiguousarray(ref).view(np.uint8).reshape(ref.shape + (n,))
            bad = np.any(a != b, axis=-1)
        else:
            bad = np.ones(out.shape, bool)
            detail = f"dtype {out.dtype} where the reference is {ref.dtype}"
        n_bad = int(bad.sum())
        err = 0.0 if n_bad == 0 else float("inf")
        return Comparison(name, self.describe(), n_bad == 0, err, err, n_bad, 0,
                          _first_true(bad, first) if n_bad else (), detail=detail)


@dataclasses.dataclass(frozen=True)
class RelErr:
    """||out - ref|| / ||ref|| <= tolerance, every element within tolerance x max|ref|, and no
    non-finite element where the reference is finite; where the reference is +-inf the output
    must be the same infinity (the norms run over the finite elements). A NaN in the reference
    matches nothing."""

    tolerance: float

    def __post_init__(self) -> None:
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < float(tol) < float("inf"):
            raise ValueError(f"RelErr: tolerance must be a finite number > 0, not {tol!r} (byte-exact is Exact())")
        object.__setattr__(self, "tolerance", float(tol))

    def describe(self) -> str:
        t = self.tolerance
        return (f"rel_err <= {t:.1e}, every |out - ref| <= {t:.1e} x max|ref|, "
                f"finite wherever the reference is")

    def _compare(self, name: str, out: np.ndarray, ref_outputs: Mapping, first: int) -> Comparison:
        out, ref = np.asarray(out), np.asarray(ref_outputs[name])
        if out.shape != ref.shape:
            return _shape_failure(name, self, out, ref)
        # torch, not NumPy: the same float64 arithmetic, but its elementwise passes and reductions
        # run on every host core. A KDA state at M = 64 is 67M elements, compared four times per
        # variant in a chained sweep (the plain launch and three layers of the timed replay):
        # single-threaded that was most of a job's time on the H200 host.
        import torch

        o = torch.as_tensor(np.asarray(out, dtype=np.float64))  # shares the array when already float64
        r = torch.as_tensor(np.asarray(ref, dtype=np.float64))
        finite = torch.isfinite(r)
        unwritten_mask = ~torch.isfinite(o) & finite
        n_unwritten = int(unwritten_mask.sum())
        # Where the reference is +-inf (the -inf log-sum-exp of a row with nothing to attend to),
        # the output must be that same infinity; the norms run over the finite elements.
        wrong_inf = ~finite & ~(o == r)
        diff = o - r
        diff.masked_fill_(unwritten_mask | ~finite, 0.0)
        r = torch.where(finite, r, torch.zeros_like(r))
        denom = float(torch.linalg.vector_norm(r))
        norm = float(torch.linalg.vector_norm(diff))
        rel = norm / denom if denom > 0 else norm
        absd = diff.abs_()
        max_abs = float(absd.max()) if absd.numel() else 0.0
        scale = float(r.abs().max()) if r.numel() else 0.0
        off = (absd > self.tolerance * max(scale, np.finfo(np.float64).tiny)) | wrong_inf
        n_off = int(off.sum())
        idx = _first_true(off | unwritten_mask, first) if n_off or n_unwritten else ()
        ok = not n_unwritten and n_off == 0 and rel <= self.tolerance
        return Comparison(name, self.describe(), ok, max_abs, rel, n_off, n_unwritten, idx)


Tie = Literal["equal_scores", "lower_index"]


@dataclasses.dataclass(frozen=True)
class IndexSet:
    """Rows of selected indices ``[rows..., width]``, judged as sets under a tie rule (module doc).

    scores:           name of the reference array ``[rows..., n_scores]`` of candidate scores.
    tie:              ``"lower_index"`` (the reference's set exactly; among equal scores the lower
                      index wins) or ``"equal_scores"`` (the members' sorted scores match).
    masked:           the empty-slot value, negative (-1).
    masked_positions: True: masked slots where the reference has them; False: as many per row.
    candidates:       n, the valid indices are [0, n); None: n_scores.
    """

    scores: str
    tie: Tie
    masked: int = -1
    masked_positions: bool = True
    candidates: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scores, str) or not self.scores:
            raise ValueError(f"IndexSet: scores names a reference array, not {self.scores!r}")
        if self.tie not in ("equal_scores", "lower_index"):
            raise ValueError(f"IndexSet: tie must be 'equal_scores' or 'lower_index', not {self.tie!r}")
        if isinstance(self.masked, bool) or not isinstance(self.masked, numbers.Integral) or self.masked >= 0:
            raise ValueError(f"IndexSet: masked must be a negative integer (no index can take it), not {self.masked!r}")
        if not isinstance(self.masked_positions, bool):
            raise ValueError(f"IndexSet: masked_positions must be True or False, not {self.masked_positions!r}")
        c = self.candidates
        if c is not None and (isinstance(c, bool) or not isinstance(c, numbers.Integral) or c <= 0):
            raise ValueError(f"IndexSet: candidates must be a positive integer or None, not {c!r}")

    def describe(self) -> str:
        n = f"[0, {self.candidates})" if self.candidates is not None else f"[0, n) with n = {self.scores}'s last dim"
        slots = "where the reference has them" if self.masked_positions else "as many per row as the reference"
        rule = ("the reference's set (equal scores: lower index wins)" if self.tie == "lower_index"
                else f"the reference members' sorted {self.scores} exactly")
        return (f"index set per row: members in {n}, no duplicates, {self.masked} slots {slots}, "
                f"members match {rule}")

    # The verdict comes from the row masks below, in one place; _row_reason only names the
    # specifics (slot, value, score) of the first bad row's first failing rule.
    def _compare(self, name: str, out: np.ndarray, ref_outputs: Mapping, first: int) -> Comparison:
        out, ref = np.asarray(out), np.asarray(ref_outputs[name])
        if self.scores not in ref_outputs:
            raise KeyError(f"{name}: IndexSet reads the reference array {self.scores!r}, which the reference "
                           f"does not have (it has {sorted(ref_outputs)})")
        scores = np.asarray(ref_outputs[self.scores])
        if ref.ndim < 1 or ref.dtype.kind != "i":
            raise ValueError(f"{name}: an IndexSet reference must be a signed-integer array [rows..., width], "
                             f"not {ref.dtype} {ref.shape}")
        if scores.shape[:-1] != ref.shape[:-1] or scores.ndim != ref.ndim:
            raise ValueError(f"{name}: scores {self.scores!r} {scores.shape} must be [rows..., n] over the "
                             f"reference's rows {ref.shape[:-1]}")
        n = scores.shape[-1] if self.candidates is None else int(self.candidates)
        if n > scores.shape[-1]:
            raise ValueError(f"{name}: candidates {n} > the {scores.shape[-1]} scores per row in {self.scores!r}")
        rows_shape = ref.shape[:-1]
        n_rows = int(np.prod(rows_shape, dtype=np.int64))
        if out.shape != ref.shape:
            return _shape_failure(name, self, out, ref, unit="rows", count=n_rows)
        if out.dtype.kind != "i":
            detail = f"dtype {out.dtype} is not a signed-integer index type"
            return Comparison(name, self.describe(), False, float("inf"), float("nan"), n_rows, 0,
                              _first_rows(np.ones(n_rows, bool), rows_shape, first), detail=detail, unit="rows")
        width = ref.shape[-1]
        r = ref.reshape(n_rows, width).astype(np.int64)
        o = out.reshape(n_rows, width).astype(np.int64)
        s = scores.reshape(n_rows, scores.shape[-1]).astype(np.float64)
        masks, counts = self._row_masks(o, r, s, n)
        ref_masks, _ = self._row_masks(r, r, s, n)
        for why, mask in (("holds a value outside the masked value and [0, n)", ref_masks["unwritten"]),
                          ("repeats an index", ref_masks["duplicate"])):
            if mask.any():
                row = int(np.flatnonzero(mask)[0])
                raise ValueError(f"{name}: the reference's row {_row_index(row, rows_shape)} {why}: "
                                 f"a reference must be a valid selection")
        bad = np.zeros(n_rows, bool)
        for mask in masks.values():
            bad |= mask
        n_bad = int(bad.sum())
        detail = ""
        if n_bad:
            row = int(np.flatnonzero(bad)[0])
            kind = next(k for k, m in masks.items() if m[row])
            detail = (f"row {_row_index(row, rows_shape)}: "
                      + self._row_reason(kind, o[row], r[row], s[row], n, out.dtype))
        return Comparison(name, self.describe(), n_bad == 0, 0.0 if n_bad == 0 else float("inf"), float("nan"),
                          n_bad, counts["unwritten"], _first_rows(bad, rows_shape, first), detail=detail,
                          unit="rows")

    def _row_masks(self, o: np.ndarray, r: np.ndarray, s: np.ndarray, n: int):
        """Per row (o, r: [rows, width] int64; s: [rows, n_scores]): which rule it breaks, in the
        order a reason names them; and the unwritten slot count."""
        masked = self.masked
        legal = (o == masked) | ((o >= 0) & (o < n))
        member = legal & (o != masked)
        width = o.shape[1]
        # duplicates among members (>= 0): every non-member slot gets its own negative placeholder
        placeholders = -1 - np.arange(width, dtype=np.int64)
        keyed = np.sort(np.where(member, o, placeholders), axis=1)
        duplicate = np.any(keyed[:, 1:] == keyed[:, :-1], axis=1) if width > 1 else np.zeros(len(o), bool)
        if self.masked_positions:
            slots = np.any((o == masked) != (r == masked), axis=1)
        else:
            slots = (o == masked).sum(axis=1) != (r == masked).sum(axis=1)
        ref_member = r != masked
        if self.tie == "lower_index":
            big = np.int64(np.iinfo(np.int64).max)
            members = np.any(np.sort(np.where(member, o, big), axis=1)
                             != np.sort(np.where(ref_member, r, big), axis=1), axis=1)
        else:
            # +inf for non-members: with equal member counts (else the slot rule fails) the sorted
            # vectors are equal iff the members' score multisets are
            a = np.sort(np.where(member, np.take_along_axis(s, np.where(member, o, 0), axis=1), np.inf), axis=1)
            b = np.sort(np.where(ref_member, np.take_along_axis(s, np.where(ref_member, r, 0), axis=1), np.inf),
                        axis=1)
            members = np.any((a != b) & ~(np.isnan(a) & np.isnan(b)), axis=1)
        masks = {"unwritten": ~legal.all(axis=1), "duplicate": duplicate, "slots": slots, "members": members}
        return masks, {"unwritten": int((~legal).sum())}

    def _row_reason(self, kind: str, o: np.ndarray, r: np.ndarray, s: np.ndarray, n: int, dtype) -> str:
        """Why one row fails ``kind`` (the first rule it breaks), naming slot, value and score."""
        masked = self.masked
        if kind == "unwritten":
            poison = int(np.full(dtype.itemsize, INDEX_POISON_BYTE, np.uint8).view(dtype)[0])
            j = next(j for j, v in enumerate(o) if v != masked and not 0 <= v < n)
            v = int(o[j])
            if v == poison:
                return f"slot {j} holds {v} (0x{INDEX_POISON_BYTE:X} poison bytes): unwritten"
            return f"slot {j} holds {v}, outside {masked} and [0, {n}): out of range (unwritten)"
        if kind == "duplicate":
            seen: dict[int, int] = {}
            for j, v in enumerate(int(x) for x in o):
                if v != masked and v in seen:
                    return f"duplicate member {v} (slots {seen[v]} and {j})"
                seen[v] = j
            return "duplicate member"
        if kind == "slots":
            if self.masked_positions:
                j = int(np.flatnonzero((o == masked) != (r == masked))[0])
                if o[j] == masked:
                    return (f"{masked} slot mismatch: slot {j} is {masked} where the reference has member "
                            f"{int(r[j])} (score {float(s[r[j]])!r})")
                return f"{masked} slot mismatch: slot {j} holds member {int(o[j])} where the reference has {masked}"
            return (f"{masked} slot mismatch: {int((o == masked).sum())} {masked} slots where the reference "
                    f"has {int((r == masked).sum())}")
        mine = [int(v) for v in o if v != masked]
        theirs = [int(v) for v in r if v != masked]
        if self.tie == "lower_index":
            mine_set, theirs_set = set(mine), set(theirs)
            wrong = [v for v in mine if v not in theirs_set]
            missing = [v for v in theirs if v not in mine_set]
        else:
            wrong = _unmatched(mine, theirs, s)
            missing = _unmatched(theirs, mine, s)
        parts = []
        if wrong:
            parts.append(f"wrong member {wrong[0]} with score {float(s[wrong[0]])!r}"
                         + (f" (+{len(wrong) - 1} more)" if len(wrong) > 1 else ""))
        if missing:
            parts.append(f"missing member {missing[0]} with score {float(s[missing[0]])!r}"
                         + (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))
        reason = ", ".join(parts) or "members differ"
        if self.tie == "lower_index" and sorted(s[mine].tolist()) == sorted(s[theirs].tolist()):
            reason += " (equal scores: lower_index keeps the lower index)"
        return reason


Check = Union[Exact, RelErr, IndexSet]
_KINDS = (Exact, RelErr, IndexSet)


def as_check(value) -> Check:
    """A Check from what a component declares: a Check as it is; a float tolerance as before
    checks existed: 0.0 -> Exact(), anything else -> RelErr(value) (which must be > 0)."""
    if isinstance(value, _KINDS):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"as_check: expected a Check or a float tolerance, not {value!r}")
    return Exact() if float(value) == 0.0 else RelErr(float(value))


def compare(name: str, out: np.ndarray, ref_outputs: Mapping[str, np.ndarray], check: Check,
            first: int = _FIRST) -> Comparison:
    """``out`` (the output ``name``) against ``ref_outputs[name]`` under ``check``; ``ref_outputs``
    is the whole reference, so a check can read auxiliary arrays (IndexSet's scores).
    ``first``: how many bad indices (elements, or rows) the result names."""
    if not isinstance(check, _KINDS):
        raise TypeError(f"{name}: check must be Exact, RelErr or IndexSet, not {check!r} "
                        f"(as_check turns a float tolerance into one)")
    if name not in ref_outputs:
        raise KeyError(f"{name}: the reference has no such output (it has {sorted(ref_outputs)})")
    return check._compare(name, out, ref_outputs, first)


def compare_all(out: Mapping[str, np.ndarray], ref_outputs: Mapping[str, np.ndarray],
                checks: Mapping[str, Check]) -> list[Comparison]:
    """``compare`` for exactly the outputs named in ``checks``, in its order. Reference arrays
    not named there (IndexSet scores) are not compared; a name missing from ``out`` or from
    ``ref_outputs`` raises KeyError naming it."""
    missing = [name for name in checks if name not in out]
    if missing:
        raise KeyError(f"no output {missing} among the outputs returned {sorted(out)}")
    return [compare(name, out[name], ref_outputs, check) for name, check in checks.items()]


# -- helpers ----------------------------------------------------------------------------------------


def _shape_failure(name: str, check, out: np.ndarray, ref: np.ndarray, unit: str = "elements",
                   count: int | None = None) -> Comparison:
    return Comparison(name, check.describe(), False, float("inf"), float("inf") if unit == "elements" else float("nan"),
                      out.size if count is None else count, 0, (), shape_ok=False,
                      detail=f"shape {out.shape} differs from the reference's {ref.shape}", unit=unit)


def _unmatched(mine: list[int], theirs: list[int], s: np.ndarray) -> list[int]:
    """Members of ``mine`` whose scores are left over once ``theirs``' scores are matched off."""
    pool = collections.Counter(float(s[v]) for v in theirs)
    left = []
    for v in mine:
        key = float(s[v])
        if pool[key]:
            pool[key] -= 1
        else:
            left.append(v)
    return left


def _row_index(row: int, rows_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(x) for x in np.unravel_index(row, rows_shape)) if rows_shape else ()


def _first_rows(bad: np.ndarray, rows_shape: tuple[int, ...], first: int) -> tuple[tuple[int, ...], ...]:
    return tuple(_row_index(int(i), rows_shape) for i in np.flatnonzero(bad)[:first])


def _first_true(mask, first: int) -> tuple[tuple[int, ...], ...]:
    """Indices of the first ``first`` true elements of a torch or NumPy mask, scanning in chunks:
    a mask that is true everywhere (an output never written) must not materialise every index."""
    flat = mask.reshape(-1)
    size = flat.size if isinstance(flat, np.ndarray) else flat.numel()
    found: list[int] = []
    chunk = 1 << 22
    for start in range(0, size, chunk):
        part = flat[start:start + chunk]
        hits = np.flatnonzero(part) if isinstance(part, np.ndarray) else part.nonzero().reshape(-1)
        found.extend(start + int(h) for h in hits[:first - len(found)])
        if len(found) >= first:
            break
    return tuple(tuple(int(x) for x in np.unravel_index(i, tuple(mask.shape))) for i in found)

