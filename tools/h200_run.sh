#!/usr/bin/env bash
# One full call on the lent H200: install the wheels it lacks (offline), run the GPU tests, run the
# committed sweeps, render their reports, and pack what this call produced under $OUT. The tool
# brings back at most 8 files of 16 MiB, so this call's sweeps (results/<sweep>/) and the reports
# rendered from them (results/reports/<name>/) travel as one tarball, $OUT/results.tgz; older
# sweeps and reports a warm machine still holds, and the committed reports/, stay behind.
#   usage (device tool): ATTNBENCH_COMMIT=<sha> ATTNBENCH_DIRTY=<0|n files> bash tools/h200_run.sh [experiment ...]
#   back home: tar xzf results.tgz (at the repository root), read results/reports/<name>/README.md,
#   then python3 -m harness publish results/reports/<name> to put it in reports/
#   (the device copy's .git, when it has one, can be stale: ATTNBENCH_COMMIT wins over it, and
#   without either the reports say commit unknown / dirty: unknown)
#   optional env: SKIP_TESTS=1, PYTEST_FILES="tests/a.py tests/b.py" (default: every GPU test file),
#   PYTEST_K=<expr> (GPU test filter), SWEEP_ARGS="M=32 variant=a,b"
#   (extra overrides for EVERY listed experiment, so name the one they fit, e.g. `kda_decode`),
#   SWEEP_ARGS_<experiment>="..." (overrides for that experiment only, after SWEEP_ARGS),
#   SWEEP_TIMEOUT=<seconds> (stop each sweep after that long: the jobs that finished are packed),
#   PYTEST_TIMEOUT=<seconds> (stop the GPU tests after that long, so a kernel that hangs on its first
#   run costs the call only that much; the process's exit frees the GPU for the sweeps),
#   PROFILE="<command>" (run last, e.g. ncu on tools/profile_variants.py; output in
#   $OUT/profile.txt). The GPU tests' full output is $OUT/pytest.txt.
#   ONLY_ON=<name part> (e.g. H200): the sweeps run only where the card's name holds it, since the
#   goals are that card's figures and a lent H100 has been given for an H200; the log says when they
#   are skipped. The GPU tests and the timelines below run on any card (correctness, and phases
#   compared within one call).
#   TIMELINES="<cta_timeline args>; <args> ..." (e.g. "dsa_topk radix_union_own --point M=32"): each
#   run by tools/cta_timeline.py after the sweeps, stopped after TIMELINE_TIMEOUT seconds (default
#   150), into timeline_<i>/ with its printed output as cta_timeline_output.txt, all packed without
#   the raw per-run marks as $OUT/timelines.tgz (tar xzf it into /tmp; copy what a report needs).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/attnbench-out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD"
experiments=("${@:-roofline kda_decode}")
commit_note="commit ${ATTNBENCH_COMMIT:-unknown}"; echo "$commit_note"
# What this call produced, one path a line (files, because the block below runs in a pipeline's
# subshell): the sweeps that were not under results/ before it, and the reports rendered from them.
state="$(mktemp -d)"
ls -1 results 2>/dev/null | sort > "$state/before"
: > "$state/reports"
new_sweeps() {
  ls -1 results 2>/dev/null | sort | comm -13 "$state/before" - | grep -vx reports | sed 's|^|results/|'
}
pack() {
  local paths
  mapfile -t paths < <(new_sweeps; sort -u "$state/reports")
  if [ ${#paths[@]} -gt 0 ]; then tar czf "$OUT/results.tgz" "${paths[@]}"; else echo "pack: this call stored no sweep"; fi
}
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
run_here=1
if [ -n "${ONLY_ON:-}" ] && [[ "$card" != *"$ONLY_ON"* ]]; then run_here=0; fi
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__, torch.cuda.get_device_name())"
  # the whole pytest output goes to $OUT/pytest.txt, a line a test (-v: a run stopped by PYTEST_TIMEOUT
  # still names the tests that ran, where -q's dots did not); the log keeps every FAILED/ERROR line and
  # the tally (a plain tail lost the names of failing tests when a traceback was long)
  if [ $run_here -eq 0 ]; then
    echo "ONLY_ON=$ONLY_ON: this card is '$card', so no sweeps here (GPU tests and timelines only)"
    experiments=()
  fi
  if [ -z "${SKIP_TESTS:-}" ]; then
    ${PYTEST_TIMEOUT:+timeout $PYTEST_TIMEOUT} python3 -m pytest -v -rsfE ${PYTEST_FILES:-tests/test_gpu_*.py tests/test_kda_cuda.py} ${PYTEST_K:+-k "$PYTEST_K"} > "$OUT/pytest.txt" 2>&1
    rc=$?
    if [ $rc -eq 124 ]; then
      echo "pytest: stopped after PYTEST_TIMEOUT=${PYTEST_TIMEOUT}s (a hung kernel, or more tests than the limit allows); the sweeps go on"
      echo "pytest: before the stop $(grep -c ' PASSED' "$OUT/pytest.txt") passed, $(grep -c ' SKIPPED' "$OUT/pytest.txt") skipped, $(grep -c ' FAILED' "$OUT/pytest.txt") failed (named in pytest.txt)"
    fi
    grep -E "^(FAILED|ERROR) " "$OUT/pytest.txt" | head -60
    tail -1 "$OUT/pytest.txt"
  fi
  for e in ${experiments[@]+${experiments[@]}}; do
    own="SWEEP_ARGS_${e}"
    # report only a sweep that ran (exit 0, or 1: it stored rows and some failed); after a refused
    # sweep (2) "latest" would be an older one
    ${SWEEP_TIMEOUT:+timeout $SWEEP_TIMEOUT} python3 -m harness -m "+experiment=$e" ${SWEEP_ARGS:-} ${!own:-} 2>&1
    rc=$?; echo "sweep $e: exit $rc"
    if [ $rc -eq 0 ] || [ $rc -eq 1 ] || [ $rc -eq 124 ]; then
      # `report` prints "report: results/reports/<name>/README.md": keep its folder
      rendered="$(python3 -m harness report latest)" && echo "$rendered" \
        && dirname "${rendered#report: }" >> "$state/reports"
    fi
    # pack after every sweep, so a call stopped at its time limit still brings back what finished
    pack
  done
} 2>&1 | tee "$OUT/log.txt"
if [ -n "${TIMELINES:-}" ]; then
  tl_root="$(mktemp -d)"; i=0
  IFS=';' read -ra tl_runs <<< "$TIMELINES"
  for args in "${tl_runs[@]}"; do
    [ -z "${args// /}" ] && continue
    dir="$tl_root/timeline_$i"; mkdir -p "$dir"
    # word splitting of the args is wanted here: they are the tool's command line
    timeout "${TIMELINE_TIMEOUT:-150}" python3 tools/cta_timeline.py $args --out "$dir" > "$dir/cta_timeline_output.txt" 2>&1
    echo "timeline_$i ($args): exit $?" | tee -a "$OUT/log.txt"
    tail -25 "$dir/cta_timeline_output.txt"
    i=$((i + 1))
  done
  tar czf "$OUT/timelines.tgz" -C "$tl_root" --exclude='*_marks.csv' . && rm -rf "$tl_root"
fi
if [ -n "${PROFILE:-}" ]; then bash -c "$PROFILE" > "$OUT/profile.txt" 2>&1; echo "profile rc $?" | tee -a "$OUT/log.txt"; fi
pack
new_sweeps > "$state/sweeps"
SWEEPS_FILE="$state/sweeps" python3 - <<'PY' | tee "$OUT/summary.txt"
import os, pathlib
import pandas as pd
from harness import store
sweeps = [pathlib.Path(p) for p in pathlib.Path(os.environ["SWEEPS_FILE"]).read_text().split()]
frames = [store.load_sweep(s) for s in sweeps if (s / "provenance.json").is_file()]
frames = [f for f in frames if len(f)]
if not frames:
    raise SystemExit("summary: this call stored no rows")
df = pd.concat(frames, ignore_index=True)
cols = ["component", "variant", "M", "state_dtype", "copy_mib", "context", "selection", "page_size", "latent_dtype",
        "pooling", "key_dtype", "key_layout", "topk", "score_rows", "ms_p50", "gbps", "roofline_fraction", "rel_err", "status"]
cols = [c for c in cols if c in df.columns]
df["ms_p50"] = df["ms_p50"] * 1e3
pd.set_option("display.width", 250, "display.max_rows", 500)
print(df[cols].rename(columns={"ms_p50": "us_p50"}).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
PY
rm -rf "$state"
