"""``attnbench compare A B``: every shared row labelled same / faster / slower / ambiguous from the
p20-p80 intervals, with the ratio; ``--fail-on-slower`` makes it a regression gate."""

from __future__ import annotations

import pytest

from harness import report, store
from synthetic_store import row, sweep

# A's rows; B's for each label (times in ms). B / A bounds: b_p20 / a_p80 .. b_p80 / a_p20.
A = {"same": (0.0380, 0.0385, 0.0390), "faster": (0.0380, 0.0385, 0.0390), "slower": (0.0380, 0.0385, 0.0390),
     "partial": (0.0380, 0.0385, 0.0390), "noisy": (0.0380, 0.0385, 0.0390), "failed": (0.0380, 0.0385, 0.0390)}
B = {"same": (0.0382, 0.0386, 0.0391),      # each p50 inside the other's interval
     "faster": (0.0340, 0.0345, 0.0350),    # 0.034 / 0.039 .. 0.035 / 0.038: all below 1
     "slower": (0.0392, 0.0395, 0.0400),    # 0.0392 / 0.039 = 1.005: all above 1
     "partial": (0.0388, 0.0395, 0.0402),   # overlaps, but B's p50 lies above A's p80
     "noisy": (0.0340, 0.0345, 0.0350), "failed": (0.0340, 0.0345, 0.0350)}
WANT = {"same": "same", "faster": "faster", "slower": "slower", "partial": "ambiguous", "noisy": "ambiguous",
        "failed": "ambiguous"}


def _stores(tmp_path, with_slower=True):
    # each case is its own variant name, so one point holds them all (variants from the registry
    # are not needed to compare: compare reads rows, not the registry)
    names = [n for n in A if with_slower or n != "slower"]
    a = [row(f"v_{n}", *A[n]) for n in names] + [row("only_a", 0.01, 0.011, 0.012)]
    b = [row(f"v_{n}", *B[n], **({"noisy": True} if n == "noisy" else {}),
             **({"status": "failed", "reason": "out: rel_err 1e-1"} if n == "failed" else {})) for n in names]
    root = tmp_path / "store"
    sweep(root, a, name="base", stamp="2026-12-01_09-00-00")
    sweep(root, b, name="head", stamp="2026-12-01_10-00-00")
    return root


def test_every_shared_row_is_labelled_from_the_intervals(tmp_path):
    root = _stores(tmp_path)
    a, b = (store.load_sweep(store.find_sweep(root, n)) for n in ("base", "head"))
    both, only_a, only_b = report.compare_rows(a, b)
    labels = dict(zip(both["variant"], both["label"]))
    assert labels == {f"v_{n}": WANT[n] for n in A}
    assert (only_a, only_b) == (1, 0)
    r = both.set_index("variant").loc["v_faster"]
    assert r["lo"] == pytest.approx(0.034 / 0.039) and r["hi"] == pytest.approx(0.035 / 0.038)
    assert r["ratio"] == pytest.approx(0.0345 / 0.0385)
    why = dict(zip(both["variant"], both["why"]))
    assert why["v_noisy"] == "noisy in B" and why["v_failed"] == "failed in B"
    text = report.compare_sweeps(a, b)
    assert "1 same, 1 faster, 1 slower, 3 ambiguous" in text and "1 only in A, 0 only in B" in text
    assert f"| 38.50 | 39.50 | {0.0395 / 0.0385:.3f} | {0.0392 / 0.039:.3f}–{0.04 / 0.038:.3f} | **slower** |" in text


def test_a_tolerance_turns_small_disjoint_shifts_into_same(tmp_path):
    root = _stores(tmp_path)
    a, b = (store.load_sweep(store.find_sweep(root, n)) for n in ("base", "head"))
    labels = dict(zip(*(report.compare_rows(a, b, tolerance=0.06)[0][c] for c in ("variant", "label"))))
    # slower's B / A lies in 1.005..1.053, within 1 +- 0.06; faster's 0.872..0.921 is not
    assert labels["v_slower"] == "same" and labels["v_faster"] == "faster"


def _compare(capsys, *args):
    """``attnbench compare ARGS`` in this process: (exit status, stdout, stderr)."""
    from harness import cli

    try:
        cli.main(["compare", *args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_fail_on_slower_is_a_regression_gate(capsys, tmp_path):
    root = _stores(tmp_path)
    code, out, err = _compare(capsys, "base", "head", "--root", str(root), "--fail-on-slower")
    assert code == 1 and "**slower**" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "compare: 1 row(s) slower in B, first kda_decode/v_slower B / A 1.026" in lines[0]
    assert _compare(capsys, "base", "head", "--root", str(root))[0] == 0  # no gate asked for
    clean = _stores(tmp_path / "clean", with_slower=False)
    code, out, err = _compare(capsys, "base", "head", "--root", str(clean), "--fail-on-slower")
    assert code == 0 and "0 slower" in out, err
    code, _, err = _compare(capsys, "base", "head", "--root", str(root), "--tolerance", "1.5")
    assert code == 2 and "--tolerance: 1.5 is out of range" in err
