"""Reading per-CTA clock probes that a kernel family compiles into an instrumented build.

A family's probe header (for example ``kernels/dsa_indexer/topk_timeline.cuh``) writes, for CTA
b (``blockIdx.y * gridDim.x + blockIdx.x``), ``slots`` 64-bit words at ``b * slots`` of a
``__device__`` buffer: slot 0 the SM id + 1, slot 1 the cluster rank + 1 (1 without clusters),
then for mark n slot 2 + 2 n its %globaltimer (ns; comparable across SMs) and 3 + 2 n its clock64
(cycles; finer within one SM), then, after the marks, one word per counter (a value the kernel
accumulates, in cycles or a count, stored as value + 1 so that 0 means no thread wrote it). Unwritten
slots stay 0 (the tool zeroes the buffer before each
launch). A family declares its layout once (:class:`ProbeLayout`); nothing here knows a family.
Marks are ordered per CTA by clock64 and each phase is named by the mark that ends it. Pure NumPy /
pandas, so it is tested on the CPU.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ProbeLayout:
    """One family's probe buffer: ``marks`` in id order (the first and ``exit`` must be written by
    every CTA), ``counters`` after them, ``slots`` words a CTA, ``capacity`` words in all, the
    buffer's ``symbol`` and the ``option`` that turns the probes on. ``intervals``: named
    (from mark, to mark) spans worth a column of their own (a phase is only mark to next mark)."""

    marks: tuple[str, ...]
    slots: int
    capacity: int
    symbol: str
    option: str
    counters: tuple[str, ...] = ()
    intervals: tuple[tuple[str, str, str], ...] = field(default=())
    exit: str = "exit"

    def __post_init__(self):
        if 2 + 2 * len(self.marks) + len(self.counters) > self.slots:
            raise ValueError(f"{len(self.marks)} marks and {len(self.counters)} counters need "
                             f"{2 + 2 * len(self.marks) + len(self.counters)} slots; the layout has {self.slots}")
        unknown = {m for _, a, b in self.intervals for m in (a, b)} - set(self.marks)
        if unknown:
            raise ValueError(f"intervals name marks {sorted(unknown)} not among {self.marks}")

    @property
    def entry(self) -> str:
        return self.marks[0]

    def _slots(self, raw: np.ndarray, n_ctas: int) -> np.ndarray:
        words = np.asarray(raw, dtype=np.uint64)
        if words.size < n_ctas * self.slots:
            raise ValueError(f"timeline buffer holds {words.size} words; {n_ctas} CTAs need {n_ctas * self.slots}")
        return words[: n_ctas * self.slots].reshape(n_ctas, self.slots)

    def entry_ns(self, raw: np.ndarray, n_ctas: int) -> int:
        """The earliest entry mark's %globaltimer (ns) over the CTAs: :meth:`parse`'s time zero."""
        gt = self._slots(raw, n_ctas)[:, 2]
        written = gt[gt != 0]
        if not len(written):
            raise ValueError(f"no CTA wrote an entry probe: was the kernel built with {self.option}?")
        return int(written.min())

    def parse(self, raw: np.ndarray, n_ctas: int) -> pd.DataFrame:
        """One row per (CTA, mark written): ``cta, sm, rank, mark, t_us`` (globaltimer, µs from the
        earliest entry of any CTA) and ``clk`` (clock64, cycles). Raises ValueError when a CTA wrote
        no entry or exit mark (not a probed build, or the buffer was not zeroed)."""
        slots = self._slots(raw, n_ctas)
        n = len(self.marks)
        gt = slots[:, 2 : 2 + 2 * n : 2]
        clk = slots[:, 3 : 3 + 2 * n : 2]
        entry, exit_ = 0, self.marks.index(self.exit)
        bad = np.flatnonzero((gt[:, entry] == 0) | (gt[:, exit_] == 0) | (slots[:, 0] == 0))
        if len(bad):
            raise ValueError(f"CTA {int(bad[0])} wrote no entry/exit probe: was the kernel built with "
                             f"{self.option} and the buffer zeroed?")
        t0 = self.entry_ns(raw, n_ctas)
        cta, mark = np.nonzero(gt)
        df = pd.DataFrame({"cta": cta, "sm": (slots[cta, 0] - 1).astype(np.int64),
                           "rank": (slots[cta, 1] - 1).astype(np.int64), "mark": [self.marks[m] for m in mark],
                           "t_us": (gt[cta, mark].astype(np.int64) - t0) / 1e3,
                           "clk": clk[cta, mark].astype(np.int64)})
        return df.sort_values(["cta", "clk"], kind="stable").reset_index(drop=True)

    def counter_table(self, raw: np.ndarray, n_ctas: int) -> pd.DataFrame:
        """One row per CTA, one column per counter: the value the kernel counted (it stores value + 1);
        NaN where no thread of the CTA wrote the counter, so a form that does not count reads as
        missing, not as zero."""
        slots = self._slots(raw, n_ctas)
        at = 2 + 2 * len(self.marks)
        cols = {}
        for i, c in enumerate(self.counters):
            w = slots[:, at + i].astype(np.float64)
            cols[c] = np.where(w > 0, w - 1, np.nan)
        return pd.DataFrame(cols, index=pd.RangeIndex(n_ctas, name="cta"))

    def cycles_per_us(self, marks: pd.DataFrame) -> float:
        """The SM clock in cycles per µs, as the probes saw it: the median over CTAs of (exit -
        entry) in clock64 over the same span in globaltimer (so a coarse globaltimer still gives
        phase durations at the clock's resolution)."""
        ends = marks[marks.mark.isin([self.entry, self.exit])].pivot(index="cta", columns="mark")
        span_us = ends["t_us"][self.exit] - ends["t_us"][self.entry]
        span_clk = ends["clk"][self.exit] - ends["clk"][self.entry]
        ok = span_us > 0
        if not ok.any():
            raise ValueError("every CTA's entry and exit share one globaltimer tick: no clock rate")
        return float((span_clk[ok] / span_us[ok]).median())

    def phases(self, marks: pd.DataFrame) -> pd.DataFrame:
        """Per CTA and phase (named by the mark ending it, in the CTA's clock order): ``dur_us``,
        from clock64 at ``cycles_per_us``. The entry mark has no duration and is left out."""
        rate = self.cycles_per_us(marks)
        m = marks.copy()
        m["dur_us"] = m.groupby("cta").clk.diff() / rate
        m["order"] = m.groupby("cta").cumcount()
        return m[m.mark != self.entry][["cta", "sm", "rank", "order", "mark", "t_us", "dur_us"]].reset_index(drop=True)

    def phase_table(self, marks: pd.DataFrame) -> pd.DataFrame:
        """Per phase, in the order the CTAs pass them: median and max duration over CTAs (µs), the
        median and max time of its end from the first CTA's entry, and how many CTAs wrote it."""
        ph = self.phases(marks)
        order = ph.groupby("mark").order.median().sort_values()
        g = ph.groupby("mark")
        table = pd.DataFrame({"p50_us": g.dur_us.median(), "max_us": g.dur_us.max(), "end_p50_us": g.t_us.median(),
                              "end_max_us": g.t_us.max(), "ctas": g.cta.nunique()}).loc[order.index]
        table.index.name = "phase"
        return table.reset_index()

    def interval_table(self, marks: pd.DataFrame) -> pd.DataFrame:
        """Per declared interval (from mark -> to mark, clock64 within each CTA): median, max and
        min over the CTAs that wrote both marks, in µs."""
        rate = self.cycles_per_us(marks)
        clk = marks.pivot(index="cta", columns="mark", values="clk")
        rows = []
        for name, a, b in self.intervals:
            if a not in clk or b not in clk:
                continue
            d = ((clk[b] - clk[a]) / rate).dropna()
            if len(d):
                rows.append({"interval": name, "from": a, "to": b, "p50_us": float(d.median()),
                             "max_us": float(d.max()), "min_us": float(d.min()), "ctas": int(len(d))})
        return pd.DataFrame(rows, columns=["interval", "from", "to", "p50_us", "max_us", "min_us", "ctas"])

    def span(self, marks: pd.DataFrame) -> dict[str, float]:
        """The launch as the probes saw it, in µs: first entry to last exit, the spread of the CTAs'
        entries, and the median CTA's entry-to-exit."""
        ent = marks[marks.mark == self.entry].set_index("cta").t_us
        ex = marks[marks.mark == self.exit].set_index("cta").t_us
        return {"span_us": float(ex.max() - ent.min()), "entry_spread_us": float(ent.max() - ent.min()),
                "cta_p50_us": float((ex - ent).median()), "cta_max_us": float((ex - ent).max())}

    def plot(self, results: dict[str, pd.DataFrame], path: pathlib.Path, title: str = "") -> None:
        """Per run (variant, point, mode): one horizontal bar per CTA (by SM), coloured by phase,
        on one time axis (µs from the first CTA's entry)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = len(results)
        fig, axes = plt.subplots(n, 1, figsize=(10, 1.6 + 1.2 * n), squeeze=False, sharex=True)
        colours = dict(zip(self.marks, plt.cm.tab20(np.linspace(0, 1, len(self.marks)))))
        for ax, (name, marks) in zip(axes[:, 0], results.items()):
            ph = self.phases(marks)
            rows = {c: i for i, c in enumerate(marks.drop_duplicates("cta").sort_values(["sm", "cta"]).cta)}
            for mark, p in ph.groupby("mark"):
                ax.barh([rows[c] for c in p.cta], p.dur_us, left=p.t_us - p.dur_us, height=1.0,
                        color=colours[mark], label=mark, linewidth=0)
            ax.set_title(name, fontsize=9)
            ax.set_ylabel("CTA")
        axes[-1, 0].set_xlabel("µs from the first CTA's entry")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper right", fontsize=7, ncol=2)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


@dataclass(frozen=True)
class GridProbe:
    """A later kernel of the step (sparse MLA's combine) probed as one grid, not per CTA: each block
    folds its %globaltimer at mark n into the grid's first (word 2 n, an atomic min) and last (word
    2 n + 1, an atomic max) time, and the last word counts the blocks that exited. What it is for:
    the gap between one grid's last CTA and the next grid's first block, which neither grid's own
    marks hold. ``kernel`` names it in the columns, ``symbol`` is its buffer in the same module."""

    kernel: str
    marks: tuple[str, ...]
    symbol: str

    @property
    def words(self) -> int:
        return 2 * len(self.marks) + 1

    def fresh(self) -> np.ndarray:
        """The buffer before a launch: every first time all ones (an atomic min's identity), the
        last times and the block count 0."""
        w = np.zeros(self.words, dtype=np.uint64)
        w[0 : 2 * len(self.marks) : 2] = np.iinfo(np.uint64).max
        return w

    def read(self, raw: np.ndarray, t0_ns: int) -> dict[str, float]:
        """``<kernel>_<mark>_first_us`` / ``_last_us`` from ``t0_ns`` (the step's first CTA entry,
        :meth:`ProbeLayout.entry_ns`) and ``<kernel>_blocks``; {} where the buffer is as
        :meth:`fresh` left it (the step launched no such kernel: a design whose combine is in its
        split kernel). Raises ValueError when some marks were written and others not."""
        w = np.asarray(raw, dtype=np.uint64)
        if w.size != self.words:
            raise ValueError(f"{self.symbol} holds {w.size} words; {self.kernel}'s probe has {self.words}")
        if np.array_equal(w, self.fresh()):
            return {}
        unset = np.iinfo(np.uint64).max
        out: dict[str, float] = {}
        for n, mark in enumerate(self.marks):
            first, last = w[2 * n], w[2 * n + 1]
            if first == unset or last == 0:
                raise ValueError(f"{self.kernel}: no block wrote mark {mark!r} where others were written: "
                                 f"was {self.symbol} reset before the launch?")
            out[f"{self.kernel}_{mark}_first_us"] = (int(first) - t0_ns) / 1e3
            out[f"{self.kernel}_{mark}_last_us"] = (int(last) - t0_ns) / 1e3
        out[f"{self.kernel}_blocks"] = float(w[-1])
        return out


def save(out: pathlib.Path, name: str, marks: pd.DataFrame) -> None:
    marks.to_csv(pathlib.Path(out) / f"{name}_marks.csv", index=False)
