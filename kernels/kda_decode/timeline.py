"""Reading the ring kernels' timeline probes (``-DKDA_TIMELINE``, see kda_timeline.cuh).

The instrumented build writes, for CTA b of layer l (a launch of a chain; 0 for a single launch),
``TL_SLOTS`` 64-bit words at ``(l * grid + b) * TL_SLOTS``: slot 0 entry, 1 exit (%globaltimer, ns),
2 the SM id, 3 + 2n when the CTA's n-th tile is in shared memory and 4 + 2n when thread 0 has issued
that tile's stores. Unwritten slots stay 0 (the tool zeroes the buffer before the launch). Pure
NumPy/pandas, so it is tested on the CPU.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pandas as pd

TL_SLOTS = 256  # keep in step with TL_SLOTS, TL_CAPACITY, TL_MAX_LAYERS in kda_timeline.cuh (a test checks)
TL_CAPACITY = 1 << 20
TL_MAX_LAYERS = 64
MAX_TILES = (TL_SLOTS - 3) // 2


def parse(raw: np.ndarray, grid: int, layers: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ctas, tiles) from the raw probe buffer of ``layers`` launches of ``grid`` CTAs each; times
    in µs from the earliest CTA entry of any layer. Raises ValueError when a CTA left no
    entry/exit (not an instrumented ring kernel, or the buffer was not zeroed)."""
    words = np.asarray(raw, dtype=np.uint64)
    rows_needed = layers * grid
    if words.size < rows_needed * TL_SLOTS:
        raise ValueError(f"timeline buffer holds {words.size} words; {layers} x {grid} CTAs need "
                         f"{rows_needed * TL_SLOTS}")
    slots = words[: rows_needed * TL_SLOTS].reshape(rows_needed, TL_SLOTS)
    entry, exit_ = slots[:, 0], slots[:, 1]
    if (entry == 0).any() or (exit_ == 0).any():
        bad = int(np.flatnonzero((entry == 0) | (exit_ == 0))[0])
        where = f"CTA {bad % grid} of layer {bad // grid}" if layers > 1 else f"CTA {bad}"
        raise ValueError(f"{where} wrote no entry/exit probe: is the kernel a ring built with -DKDA_TIMELINE?")
    t0 = int(entry.min())
    us = lambda ns: (ns.astype(np.int64) - t0) / 1e3  # noqa: E731
    ready, stored = slots[:, 3::2][:, :MAX_TILES], slots[:, 4::2][:, :MAX_TILES]
    if (slots[:, 3 + 2 * MAX_TILES :] != 0).any():
        raise ValueError(f"a CTA processed more than {MAX_TILES} tiles: the probes cannot hold its timeline")
    count = (stored != 0).sum(axis=1)
    row = np.arange(rows_needed)
    ctas = pd.DataFrame({"layer": row // grid, "cta": row % grid, "sm": slots[:, 2].astype(np.int64),
                         "entry_us": us(entry), "exit_us": us(exit_), "tiles": count})
    rows = [(r // grid, r % grid, n, ready[r, n], stored[r, n]) for r in row for n in range(int(count[r]))]
    tiles = pd.DataFrame(rows, columns=["layer", "cta", "n", "ready_ns", "stored_ns"])
    tiles["ready_us"] = us(tiles.pop("ready_ns").to_numpy(np.uint64))
    tiles["stored_us"] = us(tiles.pop("stored_ns").to_numpy(np.uint64))
    return ctas, tiles


def summarize(ctas: pd.DataFrame, tiles: pd.DataFrame) -> dict[str, float]:
    """Where one launch's time goes, in µs from the first CTA's entry.

    busy: tile in shared memory -> its stores issued (thread 0's view).
    wait: previous tile's stores issued -> this tile in shared memory (data not there yet).
    drain: the last tile to arrive anywhere -> the last CTA's exit.
    """
    first = tiles[tiles.n == 0]
    keys = ["layer", "cta", "n"] if "layer" in tiles else ["cta", "n"]
    later = tiles[tiles.n > 0].merge(
        tiles.assign(n=tiles.n + 1)[keys + ["stored_us"]].rename(columns={"stored_us": "prev_us"}),
        on=keys)
    busy = tiles.stored_us - tiles.ready_us
    wait = later.ready_us - later.prev_us
    return {
        "span_us": float(ctas.exit_us.max()),
        "entry_spread_us": float(ctas.entry_us.max()),
        "first_ready_min_us": float(first.ready_us.min()),
        "first_ready_p50_us": float(first.ready_us.median()),
        "first_ready_max_us": float(first.ready_us.max()),
        "busy_p50_us": float(busy.median()),
        "wait_p50_us": float(wait.median()) if len(wait) else float("nan"),
        "exit_p10_us": float(ctas.exit_us.quantile(0.1)),
        "exit_p50_us": float(ctas.exit_us.median()),
        "last_ready_us": float(tiles.ready_us.max()),
        "drain_us": float(ctas.exit_us.max() - tiles.ready_us.max()),
        "tiles_min": int(ctas.tiles.min()),
        "tiles_max": int(ctas.tiles.max()),
    }


def chain_summary(ctas: pd.DataFrame, tiles: pd.DataFrame) -> pd.DataFrame:
    """Per layer of a chain, in µs from the first CTA's entry: when its first CTA entered, its first
    tile was in shared memory, its first stores were issued and its last CTA exited; and, against
    the layer before, ``period_us`` (last exit to last exit: the layer's cost in the chain) and
    ``idle_us`` (the layer before's last exit to this layer's first stores issued after it: time in
    which neither layer issued stores, what PDL has not hidden)."""
    out = []
    for layer, c in ctas.groupby("layer"):
        t = tiles[tiles.layer == layer]
        out.append({"layer": int(layer), "entry_first_us": float(c.entry_us.min()),
                    "ready_first_us": float(t.ready_us.min()), "stored_first_us": float(t.stored_us.min()),
                    "exit_p50_us": float(c.exit_us.median()), "exit_last_us": float(c.exit_us.max())})
    df = pd.DataFrame(out).sort_values("layer").reset_index(drop=True)
    df["period_us"] = df.exit_last_us.diff()
    idle = [float("nan")]
    for layer in df.layer.iloc[1:]:
        before = float(df.loc[df.layer == layer - 1, "exit_last_us"].iloc[0])
        stores = tiles[(tiles.layer == layer) & (tiles.stored_us > before)].stored_us
        idle.append(float(stores.min() - before) if len(stores) else float("nan"))
    df["idle_us"] = idle
    return df


def busy_profile(tiles: pd.DataFrame, ctas: pd.DataFrame, step_us: float = 0.25) -> pd.DataFrame:
    """Per time bin: CTAs alive, CTAs computing a tile (between ready and stored)."""
    end = float(ctas.exit_us.max())
    t = np.arange(0.0, end + step_us, step_us)
    alive = ((ctas.entry_us.to_numpy()[None, :] <= t[:, None])
             & (ctas.exit_us.to_numpy()[None, :] > t[:, None])).sum(axis=1)
    computing = ((tiles.ready_us.to_numpy()[None, :] <= t[:, None])
                 & (tiles.stored_us.to_numpy()[None, :] > t[:, None])).sum(axis=1)
    return pd.DataFrame({"t_us": t, "alive": alive, "computing": computing})


def save(out: pathlib.Path, name: str, ctas: pd.DataFrame, tiles: pd.DataFrame) -> None:
    ctas.to_csv(out / f"{name}_ctas.csv", index=False)
    tiles.to_csv(out / f"{name}_tiles.csv", index=False)


def load(folder: pathlib.Path) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """{variant: (ctas, tiles)} from a folder ``save`` wrote, in ``summary.csv`` order when present."""
    folder = pathlib.Path(folder)
    names = [p.name[: -len("_ctas.csv")] for p in sorted(folder.glob("*_ctas.csv"))]
    summary = folder / "summary.csv"
    if summary.is_file():
        order = [n for n in pd.read_csv(summary)["variant"] if n in names]
        names = order + [n for n in names if n not in order]
    if not names:
        raise FileNotFoundError(f"timeline: no <variant>_ctas.csv in {folder}")
    return {n: (pd.read_csv(folder / f"{n}_ctas.csv"), pd.read_csv(folder / f"{n}_tiles.csv")) for n in names}


def title_of(folder: pathlib.Path) -> str:
    """The point a saved timeline was recorded at (``summary.csv``'s ``point`` column), or ""."""
    summary = pathlib.Path(folder) / "summary.csv"
    if summary.is_file():
        df = pd.read_csv(summary)
        if "point" in df and len(df):
            return f"kda_decode {df['point'].iloc[0]}"
    return ""


def plot(results: dict[str, tuple[pd.DataFrame, pd.DataFrame]], path: pathlib.Path, title: str = "",
         per_row: int = 3) -> None:
    """Per variant: a Gantt of every tile (in shared memory -> stores issued; CTAs grouped by SM)
    above the count of CTAs alive and computing over time, on one time axis for all variants."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(per_row, n)
    rows = -(-n // cols)
    end = max(float(c.exit_us.max()) for c, _ in results.values())
    fig, axes = plt.subplots(2 * rows, cols, figsize=(5.5 * cols, 5.2 * rows), squeeze=False,
                             gridspec_kw={"height_ratios": [2, 1] * rows})
    for i, (name, (ctas, tiles)) in enumerate(results.items()):
        r, c = divmod(i, cols)
        gantt, prof = axes[2 * r][c], axes[2 * r + 1][c]
        # one row per CTA slot, ordered by SM; the layers of a chain share the rows and take
        # turns in colour, so their overlap in time shows
        first = ctas[ctas.layer == ctas.layer.min()] if "layer" in ctas else ctas
        order = first.sort_values(["sm", "cta"]).reset_index(drop=True)
        y = tiles.cta.map(dict(zip(order.cta, order.index)))
        parity = tiles.layer if "layer" in tiles and tiles.layer.nunique() > 1 else tiles.n
        gantt.hlines(y, tiles.ready_us, tiles.stored_us, linewidth=0.5,
                     colors=np.where(parity % 2 == 0, "tab:blue", "tab:orange"))
        gantt.set_title(f"{name}: span {float(ctas.exit_us.max()):.1f} µs", fontsize=10)
        gantt.set_ylabel("CTA (by SM)")
        gantt.set_xlim(0, end)
        busy = busy_profile(tiles, ctas)
        prof.plot(busy.t_us, busy.alive, label="CTAs alive")
        prof.plot(busy.t_us, busy.computing, label="CTAs computing a tile")
        prof.set_xlim(0, end)
        prof.set_xlabel("µs from the first CTA's entry")
        if i == 0:
            prof.legend(loc="lower center", fontsize=8)
    for j in range(n, rows * cols):
        r, c = divmod(j, cols)
        axes[2 * r][c].axis("off")
        axes[2 * r + 1][c].axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
