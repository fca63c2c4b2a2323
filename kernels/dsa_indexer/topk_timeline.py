"""Reading the top-k kernels' timeline probes (``-DDSA_TOPK_TIMELINE``, see topk_timeline.cuh).

The instrumented build writes, for CTA b (``blockIdx.y * gridDim.x + blockIdx.x``), ``TK_SLOTS``
64-bit words at ``b * TK_SLOTS``: slot 0 the SM id + 1, slot 1 the cluster rank + 1, then for mark
n slot 2 + 2 n its %globaltimer (ns) and 3 + 2 n its clock64 (cycles). Unwritten slots stay 0 (the
tool zeroes the buffer before each launch). A kernel writes the marks of its own phases only; they
are ordered per CTA by clock64 and each phase is named by the mark that ends it. Pure
NumPy / pandas, so it is tested on the CPU.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

TK_SLOTS = 44             # keep in step with topk_timeline.cuh (a test checks)
TK_CAPACITY = 1 << 16
# Mark ids of topk_timeline.cuh, in id order (TK_ENTRY = 0, ...): the phase a mark ends.
MARKS = ("entry", "issue", "read", "bound", "pass2", "sync0", "digit0", "sync1", "digit1", "sync2", "digit2",
         "counts", "write", "exit", "final", "fstart", "fread", "fpass2", "fdigits", "sample",
         "stream")


def parse(raw: np.ndarray, n_ctas: int) -> pd.DataFrame:
    """One row per (CTA, mark written): ``cta, sm, rank, mark, t_us`` (globaltimer, µs from the
    earliest entry of any CTA) and ``clk`` (clock64, cycles). Raises ValueError when a CTA wrote no
    entry or exit mark (not a probed build, or the buffer was not zeroed)."""
    words = np.asarray(raw, dtype=np.uint64)
    if words.size < n_ctas * TK_SLOTS:
        raise ValueError(f"timeline buffer holds {words.size} words; {n_ctas} CTAs need {n_ctas * TK_SLOTS}")
    slots = words[: n_ctas * TK_SLOTS].reshape(n_ctas, TK_SLOTS)
    gt = slots[:, 2::2][:, : len(MARKS)]
    clk = slots[:, 3::2][:, : len(MARKS)]
    entry, exit_ = MARKS.index("entry"), MARKS.index("exit")
    bad = np.flatnonzero((gt[:, entry] == 0) | (gt[:, exit_] == 0) | (slots[:, 0] == 0))
    if len(bad):
        raise ValueError(f"CTA {int(bad[0])} wrote no entry/exit probe: was the kernel built with "
                         "-DDSA_TOPK_TIMELINE and the buffer zeroed?")
    t0 = int(gt[:, entry].min())
    cta, mark = np.nonzero(gt)
    df = pd.DataFrame({"cta": cta, "sm": (slots[cta, 0] - 1).astype(np.int64),
                       "rank": (slots[cta, 1] - 1).astype(np.int64), "mark": [MARKS[m] for m in mark],
                       "t_us": (gt[cta, mark].astype(np.int64) - t0) / 1e3, "clk": clk[cta, mark].astype(np.int64)})
    return df.sort_values(["cta", "clk"], kind="stable").reset_index(drop=True)


def cycles_per_us(marks: pd.DataFrame) -> float:
    """The SM clock in cycles per µs, as the probes saw it: the median over CTAs of (exit - entry)
    in clock64 over the same span in globaltimer (so a coarse globaltimer still gives phase
    durations at the clock's resolution)."""
    ends = marks[marks.mark.isin(["entry", "exit"])].pivot(index="cta", columns="mark")
    span_us = ends["t_us"]["exit"] - ends["t_us"]["entry"]
    span_clk = ends["clk"]["exit"] - ends["clk"]["entry"]
    ok = span_us > 0
    if not ok.any():
        raise ValueError("every CTA's entry and exit share one globaltimer tick: no clock rate")
    return float((span_clk[ok] / span_us[ok]).median())


def phases(marks: pd.DataFrame) -> pd.DataFrame:
    """Per CTA and phase (named by the mark ending it, in the CTA's clock order): ``dur_us``, from
    clock64 at ``cycles_per_us``. The first phase, ``entry``, has no duration and is left out."""
    rate = cycles_per_us(marks)
    m = marks.copy()
    m["dur_us"] = m.groupby("cta").clk.diff() / rate
    m["order"] = m.groupby("cta").cumcount()
    return m[m.mark != "entry"][["cta", "sm", "rank", "order", "mark", "t_us", "dur_us"]].reset_index(drop=True)


def phase_table(marks: pd.DataFrame) -> pd.DataFrame:
    """Per phase, in the order the CTAs pass them: median and max duration over CTAs (µs), the
    median and max time of its end from the first CTA's entry, and how many CTAs wrote it."""
    ph = phases(marks)
    order = ph.groupby("mark").order.median().sort_values()
    g = ph.groupby("mark")
    table = pd.DataFrame({"p50_us": g.dur_us.median(), "max_us": g.dur_us.max(), "end_p50_us": g.t_us.median(),
                          "end_max_us": g.t_us.max(), "ctas": g.cta.nunique()}).loc[order.index]
    table.index.name = "phase"
    return table.reset_index()


def span(marks: pd.DataFrame) -> dict[str, float]:
    """The launch as the probes saw it, in µs: first entry to last exit, the spread of the CTAs'
    entries, and the median CTA's entry-to-exit."""
    ent = marks[marks.mark == "entry"].set_index("cta").t_us
    ex = marks[marks.mark == "exit"].set_index("cta").t_us
    return {"span_us": float(ex.max() - ent.min()), "entry_spread_us": float(ent.max() - ent.min()),
            "cta_p50_us": float((ex - ent).median()), "cta_max_us": float((ex - ent).max())}


def save(out: pathlib.Path, name: str, marks: pd.DataFrame) -> None:
    marks.to_csv(pathlib.Path(out) / f"{name}_marks.csv", index=False)


def plot(results: dict[str, pd.DataFrame], path: pathlib.Path, title: str = "") -> None:
    """Per run (variant, point, mode): one horizontal bar per CTA (by SM), coloured by phase, on
    one time axis (µs from the first CTA's entry)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.6 + 1.2 * n), squeeze=False, sharex=True)
    colours = dict(zip(MARKS, plt.cm.tab20(np.linspace(0, 1, len(MARKS)))))
    for ax, (name, marks) in zip(axes[:, 0], results.items()):
        ph = phases(marks)
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
