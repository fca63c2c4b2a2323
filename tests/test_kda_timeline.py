"""The timeline probe reader (kernels/kda_decode/timeline.py) on a synthetic probe buffer."""

from __future__ import annotations

from statistics import median

import numpy as np
import pytest

from kernels.kda_decode import timeline

T0 = 1_000_000_000_000  # a %globaltimer-sized origin, in ns


def _buffer(plan: dict[int, tuple[int, int, int, list[tuple[int, int]]]], grid: int) -> np.ndarray:
    """plan[cta] = (sm, entry ns, exit ns, [(ready ns, stored ns) per tile]), offsets from T0."""
    raw = np.zeros(grid * timeline.TL_SLOTS, dtype=np.uint64)
    for b, (sm, entry, exit_, tiles) in plan.items():
        base = b * timeline.TL_SLOTS
        raw[base], raw[base + 1], raw[base + 2] = T0 + entry, T0 + exit_, sm
        for n, (ready, stored) in enumerate(tiles):
            raw[base + 3 + 2 * n], raw[base + 4 + 2 * n] = T0 + ready, T0 + stored
    return raw


def test_parse_and_summarize_a_two_cta_launch():
    plan = {
        0: (5, 0, 9000, [(2000, 3000), (3500, 4500), (7000, 8000)]),
        1: (7, 400, 6000, [(2500, 3000), (4000, 5500)]),
    }
    ctas, tiles = timeline.parse(_buffer(plan, 2), 2)
    assert ctas.sm.tolist() == [5, 7] and ctas.tiles.tolist() == [3, 2]
    assert ctas.entry_us.tolist() == [0.0, 0.4] and ctas.exit_us.tolist() == [9.0, 6.0]
    assert tiles.ready_us.tolist() == [2.0, 3.5, 7.0, 2.5, 4.0]
    s = timeline.summarize(ctas, tiles)
    assert s["span_us"] == 9.0 and s["entry_spread_us"] == pytest.approx(0.4)
    assert (s["first_ready_min_us"], s["first_ready_max_us"]) == (2.0, 2.5)
    # busy: 1.0, 1.0, 1.0, 0.5, 1.5 -> median 1.0; wait: 3.5-3.0, 7.0-4.5, 4.0-3.0 -> median 1.0
    assert s["busy_p50_us"] == 1.0 and s["wait_p50_us"] == 1.0
    assert s["last_ready_us"] == 7.0 and s["drain_us"] == 2.0
    assert (s["tiles_min"], s["tiles_max"]) == (2, 3)
    prof = timeline.busy_profile(tiles, ctas, step_us=0.5)
    at = dict(zip(prof.t_us, prof.computing))
    assert at[2.5] == 2 and at[5.0] == 1 and at[6.0] == 0 and at[7.5] == 1


def test_parse_refuses_a_cta_without_probes():
    plan = {0: (0, 0, 1000, [(100, 200)])}
    with pytest.raises(ValueError, match="CTA 1 wrote no entry/exit probe"):
        timeline.parse(_buffer(plan, 2), 2)
    with pytest.raises(ValueError, match="need"):
        timeline.parse(np.zeros(10, dtype=np.uint64), 2)


def test_save_load_and_plot_round_trip(tmp_path):
    plan = {0: (1, 0, 5000, [(1000, 2000), (2500, 4000)]), 1: (2, 100, 4500, [(1200, 3000)])}
    ctas, tiles = timeline.parse(_buffer(plan, 2), 2)
    timeline.save(tmp_path, "b_variant", ctas, tiles)
    timeline.save(tmp_path, "a_variant", ctas.assign(exit_us=ctas.exit_us * 2), tiles)
    (tmp_path / "summary.csv").write_text("variant,span_us\nb_variant,5\na_variant,10\n")
    loaded = timeline.load(tmp_path)
    assert list(loaded) == ["b_variant", "a_variant"]  # summary.csv order, not file order
    assert loaded["b_variant"][1].equals(tiles) and loaded["a_variant"][0].exit_us.max() == 10.0
    timeline.plot(loaded, tmp_path / "timeline.png", title="synthetic")
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    with pytest.raises(FileNotFoundError, match="no <variant>_ctas.csv"):
        timeline.load(tmp_path / "empty_dir_that_is_not_there")


def test_reader_constants_match_the_cuda_source():
    import re

    from kernels.kda_decode.variants import HERE

    src = (HERE / "kda_timeline.cuh").read_text()
    assert int(re.search(r"^#define TL_SLOTS (\d+)$", src, re.M).group(1)) == timeline.TL_SLOTS
    assert re.search(r"^#define TL_CAPACITY \(1 << (\d+)\)$", src, re.M).group(1) == "20"
    assert timeline.TL_CAPACITY == 1 << 20
    assert int(re.search(r"^#define TL_MAX_LAYERS (\d+)$", src, re.M).group(1)) == timeline.TL_MAX_LAYERS


def test_parse_refuses_a_cta_with_more_tiles_than_the_probes_hold():
    full = [(1000 + 10 * n, 1005 + 10 * n) for n in range(timeline.MAX_TILES)]
    ctas, tiles = timeline.parse(_buffer({0: (0, 0, 99_000, full)}, 1), 1)
    assert int(ctas.tiles.iloc[0]) == timeline.MAX_TILES == len(tiles)
    raw = _buffer({0: (0, 0, 99_000, full)}, 1)
    raw[3 + 2 * timeline.MAX_TILES] = T0 + 98_000  # the ready probe of one tile too many
    with pytest.raises(ValueError, match=f"more than {timeline.MAX_TILES} tiles"):
        timeline.parse(raw, 1)


def test_a_chain_of_two_layers_is_split_by_layer_and_its_boundary_measured():
    """Rows l * grid + b belong to CTA b of layer l. Layer 1 enters while layer 0 drains (PDL), its
    first tile lands before layer 0's last exit, and it issues its first stores 0.5 µs after that
    exit: the boundary's idle time."""
    grid = 2
    plan = {
        0: (3, 0, 9000, [(2000, 3000), (6000, 8000)]),
        1: (4, 100, 6000, [(2500, 3500), (4000, 5500)]),
        2: (4, 6100, 14000, [(7000, 9500), (11000, 13000)]),   # layer 1, CTA 0 (SM 4, freed at 6.0)
        3: (3, 9050, 15000, [(9600, 10500), (12000, 14500)]),  # layer 1, CTA 1
    }
    ctas, tiles = timeline.parse(_buffer(plan, 4), grid, layers=2)
    assert ctas.layer.tolist() == [0, 0, 1, 1] and ctas.cta.tolist() == [0, 1, 0, 1]
    assert tiles.groupby("layer").size().tolist() == [4, 4]
    chain = timeline.chain_summary(ctas, tiles)
    assert chain.exit_last_us.tolist() == [9.0, 15.0] and chain.entry_first_us.tolist() == [0.0, 6.1]
    assert chain.ready_first_us.tolist() == [2.0, 7.0] and chain.stored_first_us.tolist() == [3.0, 9.5]
    assert chain.period_us.iloc[1] == 6.0 and chain.idle_us.iloc[1] == pytest.approx(0.5)
    s = timeline.summarize(ctas, tiles)  # tiles of one CTA slot in two layers are not chained
    assert s["wait_p50_us"] == pytest.approx(median([3.0, 0.5, 1.5, 1.5]))
    with pytest.raises(ValueError, match="CTA 1 of layer 1 wrote no entry/exit probe"):
        timeline.parse(_buffer({k: v for k, v in plan.items() if k != 3}, 4), grid, layers=2)
