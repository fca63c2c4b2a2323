"""The ``attnbench`` command.

``attnbench [hydra overrides]`` runs one job; ``attnbench -m ...`` runs a Hydra multirun (a
sweep). Before Hydra starts, every job of the sweep is composed and validated ("preflight"): a bad
override exits with status 2 and one line naming the key and the allowed values, and nothing is
written. Subcommands: ``report``, ``publish``, ``compare``, ``reopen-check``, ``accounting``, ``fuel``,
``list``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import pathlib
import shutil
import signal
import sys
from typing import Any

from harness import backends, placement, registry, sweep
from harness.config import ConfigError, register_schema, validate
from harness.fuel import REPO_ROOT, FuelError, load_fuel

EXPERIMENTS_DIR = REPO_ROOT / "experiments"
GROUPS = ("component", "backend", "timing", "store", "experiment")
# Hydra flags that take a value (so the value is not an override).
_VALUE_FLAGS = {"-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir",
                "-p", "--package", "--experimental-rerun"}
# Flags that inspect instead of run: no preflight.
_INSPECT_FLAGS = {"-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "--resolve",
                  "-sc", "--shell-completion", "--version"}
MAX_SWEEP_JOBS = 10000

_last_job_dirs: list[pathlib.Path] = []


def fail(message: str, code: int = 2) -> None:
    print(f"attnbench: {message}", file=sys.stderr)
    sys.exit(code)


# -- preflight ----------------------------------------------------------------------------------
def _split_args(argv: list[str]) -> tuple[list[str], bool, bool]:
    overrides, multirun, inspect = [], False, False
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("-m", "--multirun"):
            multirun = True
        elif a in _INSPECT_FLAGS:
            inspect = True
        elif a in _VALUE_FLAGS:
            skip = True
        elif a.startswith("-"):
            continue
        else:
            overrides.append(a)
    return overrides, multirun, inspect


def _group_options(group: str) -> list[str]:
    if group == "component":  # one option per registered component (harness.config.register_schema)
        return sorted(registry.components())
    folder = EXPERIMENTS_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml") if p.stem != "schema")


def _check_group_choices(parsed) -> None:
    for o in parsed:
        key = o.key_or_group
        if key not in GROUPS or o.is_delete():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
        allowed = _group_options(key)
        for v in values:
            if str(v) not in allowed:
                fail(f"{key}: unknown value {v!r}; allowed: {', '.join(allowed)}")


def _one_line(exc: BaseException) -> str:
    """The first useful line of a Hydra / OmegaConf error, prefixed by the key it names."""
    from omegaconf.errors import OmegaConfBaseException

    seen = exc
    while seen is not None:
        if isinstance(seen, OmegaConfBaseException) and getattr(seen, "full_key", None):
            msg = str(seen).strip().splitlines()[0]
            return f"{seen.full_key}: {msg}"
        seen = seen.__cause__ or seen.__context__
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _expand(parsed) -> tuple[list[str], list[tuple[str, list[str]]]]:
    fixed, sweeps = [], []
    for o in parsed:
        if o.is_sweep_override():
            sweeps.append((o.get_key_element(), [str(v) for v in o.sweep_string_iterator()]))
        else:
            fixed.append(o.input_line)
    return fixed, sweeps


@dataclasses.dataclass
class Preflight:
    """What the up-front check found: the plan (every job's overrides and key), whether it is a
    multirun, the store root, and a ``hydra.sweep.dir`` the command line names."""

    plan: sweep.Plan
    multirun: bool
    root: pathlib.Path
    explicit_dir: pathlib.Path | None
    backend: str = "cpu"


def register_resolvers() -> None:
    """Interpolations the experiment tree may use: ``${attnbench_workers:<backend>}``, the
    parallel launcher's worker count (harness/placement.py)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("attnbench_workers"):
        OmegaConf.register_new_resolver("attnbench_workers", lambda backend="auto": placement.workers(str(backend)))


def preflight(argv: list[str]) -> Preflight | None:
    """Compose and validate every job the command would run (None for an inspecting flag such as
    --help, which runs nothing)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides, multirun, inspect = _split_args(argv)
    if inspect:
        return None
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except Exception as exc:
        fail(_one_line(exc))
    for o in parsed:  # the experiment group is not in the defaults list: it is added with +
        if o.key_or_group == "experiment" and o.package is None and not (o.is_add() or o.is_force_add() or o.is_delete()):
            fail(f"experiment: write +experiment={o.value()} (the experiment group is added, not overridden); "
                 f"allowed: {', '.join(_group_options('experiment'))}")
    _check_group_choices(parsed)
    register_resolvers()
    fixed, sweeps = _expand(parsed)
    if sweeps and not multirun:
        key, values = sweeps[0]
        fail(f"{key.lstrip('+~')}: {','.join(values)} is a sweep; add -m (--multirun) to run one job per value")
    register_schema()
    with initialize_config_dir(config_dir=str(EXPERIMENTS_DIR), version_base="1.3"):
        if multirun:
            # The experiment's own hydra.sweeper.params sweep too, unless the command line names the key.
            base = fixed + [f"{k}={v[0]}" for k, v in sweeps]
            try:
                hcfg = compose("config", overrides=base, return_hydra_config=True)
            except Exception as exc:
                fail(_one_line(exc))
            params = hcfg.hydra.sweeper.get("params") or {}
            named = {k.lstrip("+~") for k, _ in sweeps} | {o.split("=")[0].lstrip("+~") for o in fixed}
            extra = [f"{k}={v}" for k, v in params.items() if k not in named]
            if extra:
                more = parser.parse_overrides(extra)
                _check_group_choices(more)
                f2, s2 = _expand(more)
                fixed += f2
                sweeps += s2
            # Hydra's basic sweeper numbers the jobs over its keys in this order: the experiment's
            # sweeper params first (in the file's order; a key the command line also names keeps
            # that place), then the command line's other keys. The plan must number them alike, or
            # job N's folder would hold another job's key.
            order = list(params)
            sweeps = sorted(sweeps, key=lambda kv: (0, order.index(kv[0].lstrip("+~"))) if kv[0].lstrip("+~") in order
                            else (1, 0))
        combos = list(itertools.product(*[[f"{k}={v}" for v in vals] for k, vals in sweeps])) or [()]
        if len(combos) > MAX_SWEEP_JOBS:
            fail(f"sweep: {len(combos)} jobs; allowed: at most {MAX_SWEEP_JOBS}")
        fuels: dict[str, Any] = {}
        per_sweep: dict[str, set] = {"backend": set(), "backend.device": set(), "fuel": set(), "store.root": set()}
        unread: dict[str, set] = {}
        swept = {k.lstrip("+~") for k, _ in sweeps}
        jobs: list[tuple[list[str], str]] = []
        names: set[str] = set()
        for i, combo in enumerate(combos):
            job_overrides = fixed + list(combo)
            if i and i % 50 == 0:
                print(f"attnbench: checking jobs: {i} of {len(combos)}", file=sys.stderr)
            try:
                cfg = compose("config", overrides=job_overrides)
            except Exception as exc:
                fail(_one_line(exc))
            try:
                fuel_path = cfg.fuel if pathlib.Path(cfg.fuel).is_absolute() else str(REPO_ROOT / cfg.fuel)
                if fuel_path not in fuels:
                    fuels[fuel_path] = load_fuel(fuel_path)
                validate(cfg, fuels[fuel_path])
            except (ConfigError, FuelError) as exc:
                fail(str(exc))
            except Exception as exc:
                fail(_one_line(exc))
            per_sweep["backend"].add(backends.resolve(cfg.backend.name))
            per_sweep["backend.device"].add(cfg.backend.device)
            per_sweep["fuel"].add(fuel_path)
            per_sweep["store.root"].add(str(cfg.store.root))
            comp = registry.get(cfg.component.name)
            for key in swept & set(registry.axes()) - set(comp.axis_names):
                unread.setdefault(key, set()).add(comp.name)
            jobs.append(([o for o in job_overrides if not o.startswith("hydra.")], sweep.job_key(cfg)))
            names.add(str(cfg.sweep))
    # One sweep = one backend, device, fuel and store: its provenance and roofline are captured
    # once and would be wrong for jobs on another (CUDA rows divided by a CPU roofline, say).
    for key, values in per_sweep.items():
        if len(values) > 1:
            fail(f"{key}: one sweep runs on one {key}, got {', '.join(sorted(map(str, values)))}; "
                 f"allowed: a single value per sweep (run one sweep for each)")
    if "cuda" in per_sweep["backend"] and not backends.gpu_visible():
        fail("backend: 'cuda' requested but no GPU is visible; allowed: auto, cpu")
    root = pathlib.Path(next(iter(per_sweep["store.root"])))
    if not _creatable(root):
        fail(f"store.root: {root} cannot be created or written; allowed: a writable directory path")
    for key, comps in sorted(unread.items()):
        print(f"attnbench: note: {', '.join(sorted(comps))} {'does' if len(comps) == 1 else 'do'} not read {key}; "
              f"those jobs repeat one point and run once",
              file=sys.stderr)
    explicit = next((o.split("=", 1)[1] for o in fixed if o.split("=", 1)[0] == "hydra.sweep.dir"), None)
    return Preflight(sweep.Plan(sorted(names)[0], jobs), multirun, root,
                     pathlib.Path(explicit) if explicit else None, next(iter(per_sweep["backend"])))


def _creatable(path: pathlib.Path) -> bool:
    """True when ``path`` is (or can be made) a writable directory; leaves nothing behind. Tried,
    not inferred from permission bits: root may "write" /proc by its mode and still not mkdir."""
    import tempfile

    path = path.absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                return False
            try:
                os.rmdir(tempfile.mkdtemp(prefix=".attnbench-probe-", dir=candidate))
            except OSError:
                return False
            return True
    return False


# -- the Hydra job --------------------------------------------------------------------------------
def _hydra_job() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.runner import JobContext, run_job

    register_schema()
    register_resolvers()

    @hydra.main(version_base="1.3", config_path=str(EXPERIMENTS_DIR), config_name="config")
    def job(cfg) -> None:
        # a launcher's worker claims its GPU before anything below can initialise CUDA
        try:
            placement.bind_worker()
        except RuntimeError as exc:
            fail(str(exc))
        hc = HydraConfig.get()
        out = pathlib.Path(hc.runtime.output_dir)
        if hc.mode == RunMode.MULTIRUN:
            sweep_dir, job_name = pathlib.Path(hc.sweep.dir), str(hc.job.num)
        else:
            sweep_dir, job_name = out.parent, out.name
        ctx = JobContext(sweep_dir=sweep_dir, job_dir=out, job=job_name, overrides=list(hc.overrides.task))
        try:
            run_job(cfg, ctx)
        except (ConfigError, FuelError) as exc:
            fail(str(exc))
        _last_job_dirs.append(out)

    job()


# -- subcommands -----------------------------------------------------------------------------------
def _cmd_report(args: list[str]) -> None:
    from harness import report, store

    ap = argparse.ArgumentParser(prog="attnbench report", description="Render a sweep as a dated markdown report.")
    ap.add_argument("sweep", help="sweep folder, its name, or 'latest'")
    ap.add_argument("--root", default="results", help="results store root (default: results)")
    ap.add_argument("--out", help="where reports go (default: <store root>/reports, beside the sweep)")
    ap.add_argument("--also", action="append", default=[], metavar="SWEEP",
                    help="another sweep whose rows the claims draw on (repeatable; a roofline_step, say)")
    ap.add_argument("--rules-now", action="store_true",
                    help="decide the experiment file's claims as they are now, not those stored with the jobs "
                         "(new questions of old rows; the write-up says so)")
    ns = ap.parse_args(args)
    try:
        sweep_dir = store.find_sweep(ns.root, ns.sweep)
        also = [store.find_sweep(ns.root, name) for name in ns.also]
        out_root = pathlib.Path(ns.out) if ns.out else sweep_dir.parent / "reports"
        path = report.render_sweep(sweep_dir, out_root, also=also, rules_now=ns.rules_now)
    except PermissionError as exc:
        fail(f"report: cannot write under {exc.filename or out_root} ({exc.strerror}); allowed: a writable --out folder")
    except KeyError as exc:  # a column the rows lack: an older or hand-edited store
        fail(f"report: the rows of {sweep_dir} lack column {exc}; nothing was written")
    except (FileNotFoundError, ValueError, OSError) as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    except Exception as exc:  # the render is staged: whatever broke it, nothing half-written remains
        fail(f"report: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}; "
             f"nothing was written")
    print(f"report: {path}")


def _cmd_publish(args: list[str]) -> None:
    from harness import publish

    ap = argparse.ArgumentParser(prog="attnbench publish",
                                 description="Copy a rendered report's reader files into reports/ and regenerate its index.")
    ap.add_argument("report_dir", nargs="?", help="a rendered report folder (attnbench report prints it)")
    ap.add_argument("--force", action="store_true", help="replace a different report of the same name")
    ap.add_argument("--index-only", action="store_true", help="only regenerate reports/README.md")
    ap.add_argument("--reports", default=str(publish.REPORTS), help="the published reports folder (default: reports/)")
    ns = ap.parse_args(args)
    if bool(ns.report_dir) == ns.index_only:
        fail("publish: name a rendered report folder, or pass --index-only (not both)")
    try:
        if ns.report_dir:  # publishing regenerates the index too
            print(f"published: {publish.publish(ns.report_dir, ns.reports, force=ns.force)}")
        else:
            publish.write_index(ns.reports)
        print(f"index: {pathlib.Path(ns.reports) / publish.INDEX}")
    except (publish.PublishError, FileNotFoundError, ValueError, KeyError) as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def _cmd_compare(args: list[str]) -> None:
    from harness import report, store

    ap = argparse.ArgumentParser(prog="attnbench compare",
                                 description="The rows two sweeps share, side by side (markdown on stdout).")
    ap.add_argument("a", help="sweep A: folder, name, or 'latest'")
    ap.add_argument("b", help="sweep B: folder, name, or 'latest'")
    ap.add_argument("--root", default="results", help="results store root (default: results)")
    ap.add_argument("--tolerance", type=float, default=0.0,
                    help="a ratio within 1 ± this is never faster or slower (default 0: the intervals alone decide)")
    ap.add_argument("--fail-on-slower", action="store_true",
                    help="exit with status 1 when any shared row is slower in B (a regression gate)")
    ns = ap.parse_args(args)
    if not 0 <= ns.tolerance < 1:
        fail(f"--tolerance: {ns.tolerance} is out of range; allowed: numbers 0 <= t < 1")
    try:
        a, b = (store.load_sweep(store.find_sweep(ns.root, name)) for name in (ns.a, ns.b))
        if a.empty or b.empty:
            raise FileNotFoundError(f"sweep: {ns.a if a.empty else ns.b} has no stored rows")
    except (FileNotFoundError, ValueError, KeyError) as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    print(report.compare_sweeps(a, b, ns.tolerance), end="")
    if ns.fail_on_slower:
        both, _, _ = report.compare_rows(a, b, ns.tolerance)
        slower = both[both["label"] == "slower"]
        if len(slower):
            first = slower.iloc[0]
            fail(f"compare: {len(slower)} row(s) slower in B, first {first['component']}/{first['variant']} "
                 f"B / A {first['ratio']:.3f} ({first['why']})", code=1)


def _cmd_reopen_check(args: list[str]) -> None:
    from harness import publish, reopen, report, store

    ap = argparse.ArgumentParser(prog="attnbench reopen-check",
                                 description="Which published write-ups the current fuel or a newer run reopens, and why.")
    ap.add_argument("--store", action="append", default=[], metavar="ROOT",
                    help="a results store whose newer sweeps to hold the conditions against (repeatable)")
    ap.add_argument("--reports", default=str(publish.REPORTS), help="the published reports folder (default: reports/)")
    ap.add_argument("--fuel", default=str(REPO_ROOT / "fuels/glm-5.3-flash/attention.yaml"))
    ap.add_argument("--all", action="store_true", help="list the write-ups nothing reopens too")
    ns = ap.parse_args(args)
    try:
        geometry = load_fuel(ns.fuel)
    except FuelError as exc:
        fail(str(exc))
    sweeps = [s for root in ns.store for s in store.sweep_dirs(root)]
    folders = publish.published(ns.reports)
    rows, reopened = [], 0
    for folder in folders:
        state = reopen.check(folder, geometry, sweeps)
        reopened += bool(state["reasons"])
        if state["reasons"] or ns.all:
            rows.append([f"`{folder.name}`", "**reopened**" if state["reasons"] else "holds",
                         "; ".join(state["reasons"]) or "–",
                         "; ".join(state["manual"]) or "–", "own" if state["recorded"] else "derived"])
    print(f"{reopened} of {len(folders)} published write-up(s) reopened (fuel {geometry.sha256[:12]}, "
          f"{len(sweeps)} sweep(s) from {', '.join(ns.store) or 'no store'})\n")
    if rows:
        print(report.md_table(["write-up", "state", "why (checked)", "reopen if (manual)", "conditions"], rows))


def _cmd_accounting(args: list[str]) -> None:
    from harness import report

    ap = argparse.ArgumentParser(prog="attnbench accounting", description="Byte accounting derived from the fuel.")
    ap.add_argument("--fuel", default=str(REPO_ROOT / "fuels/glm-5.3-flash/attention.yaml"))
    ns = ap.parse_args(args)
    try:
        geometry = load_fuel(ns.fuel)
    except FuelError as exc:
        fail(str(exc))
    print(report.accounting_markdown(geometry))


def _cmd_fuel(args: list[str]) -> None:
    default = str(REPO_ROOT / "fuels/glm-5.3-flash/attention.yaml")
    ap = argparse.ArgumentParser(prog="attnbench fuel", description="Validate, update, settle or import the fuel.")
    verbs = ap.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = verbs.add_parser("check", help="validate a fuel file and list its open facts")
    check.add_argument("path", nargs="?", default=default)
    upd = verbs.add_parser("update", help="write a sweep's (or a report's) measured figures into the fuel's measured section")
    upd.add_argument("folder", help="a stored sweep folder (results/...) or a published report folder (reports/...)")
    upd.add_argument("--dry-run", action="store_true", help="print the unified diff and write nothing")
    upd.add_argument("--fuel", default=default)
    st = verbs.add_parser("settle", help="mark an open fact established, with the source that settles it")
    st.add_argument("key", help="an open fact, e.g. indexer.index_topk_unit")
    st.add_argument("--source", required=True, help="where the value is settled (quoted into the fuel's source)")
    st.add_argument("--value", help="the alternative that holds (default: the fact's current value)")
    st.add_argument("--dry-run", action="store_true", help="print the unified diff and write nothing")
    st.add_argument("--fuel", default=default)
    imp = verbs.add_parser("import", help="geometry facts from a checkpoint's config.json and safetensors headers, "
                                         "checked fact by fact against the fuel (exit 1 on a mismatch)")
    imp.add_argument("checkpoint", help="a checkpoint folder with config.json and *.safetensors (only headers are read)")
    imp.add_argument("--fuel", default=default)
    ns = ap.parse_args(args)
    try:
        if ns.action == "check":
            g = load_fuel(ns.path)
            print(f"{ns.path}: {len(g.facts)} facts valid, sha256 {g.sha256[:16]}")
            for f in g.open_facts():
                print(f"  open: {f.key} = {f.value!r} (alternatives: {', '.join(map(str, f.alternatives))})")
        elif ns.action == "update":
            from harness import fuel_update

            res = fuel_update.update(ns.fuel, ns.folder, dry_run=ns.dry_run)
            print(res["diff"], end="")
            verb = "would write" if ns.dry_run else "wrote"
            print(f"fuel update: {verb} {res['written']} measured figure(s) from {ns.folder}"
                  f"{'' if res['changed'] else ' (no change)'}; kept {res['kept_newer']} measured later; "
                  f"left out {res['left_out']['not ok']} row(s) not ok and {res['left_out']['noisy']} noisy")
        elif ns.action == "settle":
            from harness import fuel_update

            res = fuel_update.settle(ns.fuel, ns.key, ns.source, ns.value, dry_run=ns.dry_run)
            print(res["diff"], end="")
            print(f"fuel settle: {ns.key} = {res['value']!r} {'would be' if ns.dry_run else 'is now'} established")
        else:
            from harness import fuel_import

            text, mismatches = fuel_import.run(ns.checkpoint, ns.fuel)
            print(text, end="")
            if mismatches:
                fail(f"fuel import: {mismatches} fact(s) differ from {ns.fuel}", code=1)
    except FuelError as exc:
        fail(str(exc))
    except (FileNotFoundError, ValueError, OSError) as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def _cmd_list(args: list[str]) -> None:
    from harness import registry

    for name, comp in sorted(registry.components().items()):
        print(f"{name}: {comp.summary} (axes: {', '.join(comp.axis_names)})")
        for v in comp.variants:
            print(f"  {v.backend:4s} {v.name:22s} {'[peer] ' if v.peer else ''}{v.why}")
    print("axes:")
    for axis in registry.axes().values():
        default = "from the fuel" if axis.default is None else repr(axis.default)
        print(f"  {axis.name:12s} {axis.allowed():28s} default {default}: {axis.doc}")


def _cmd_budget(args: list[str]) -> None:
    from harness import budget

    ap = argparse.ArgumentParser(prog="attnbench budget",
                                 description="Where a decode step goes: a budget file's terms priced from measured rows.")
    ap.add_argument("name", nargs="?", default="decode_step", help="a budget of experiments/budget/ or a file (default: decode_step)")
    ap.add_argument("--reports", action="append", default=[], help="published reports folder(s) to read rows from (default: reports/)")
    ap.add_argument("--root", action="append", default=[], help="results store root(s) to read rows from")
    ap.add_argument("--out", help="write README.md and the plot into this folder (default: print the markdown)")
    ap.add_argument("--moe-us", type=float, help="the non-attention µs per step (a stated input, not measured)")
    ap.add_argument("--device", help="price from rows of this card only (a device_short, e.g. h100; 'any': every "
                                     "card's rows); default: the budget file's device")
    ap.add_argument("--fuel", default=str(REPO_ROOT / "fuels/glm-5.3-flash/attention.yaml"))
    ns = ap.parse_args(args)
    try:
        geometry = load_fuel(ns.fuel)
        spec = budget.load_budget(ns.name, geometry)
        if ns.moe_us is not None:
            spec = dataclasses.replace(spec, moe_us_per_step=ns.moe_us, moe_source="given on the command line")
        if ns.device:
            spec = dataclasses.replace(spec, device=None if ns.device.lower() == "any" else ns.device.lower())
        rows = budget.priced_rows(ns.reports or ([] if ns.root else [str(REPO_ROOT / "reports")]), ns.root)
        text = budget.render(spec, rows, geometry, pathlib.Path(ns.out) if ns.out else None)
    except (FuelError, budget.BudgetError, OSError) as exc:
        fail(str(exc).strip().splitlines()[0])
    print(f"budget: {pathlib.Path(ns.out) / 'README.md'}" if ns.out else text, end="" if not ns.out else "\n")


def _cmd_sweeps(args: list[str]) -> None:
    from harness import store

    ap = argparse.ArgumentParser(prog="attnbench sweeps", description="Stored sweeps, oldest first.")
    ap.add_argument("--root", default="results", help="results store root (default: results)")
    ns = ap.parse_args(args)
    root = pathlib.Path(ns.root)
    folders = sorted({*store.sweep_dirs(root), *sweep.planned_sweeps(root)})
    if not folders:
        fail(f"sweeps: none under {root}", code=1)
    print(f"{'folder':<48} {'device':<10} {'jobs':>9} {'ok':>5} {'skip':>5} {'fail':>5}")
    for folder in folders:
        rows = store.load_sweep(folder)
        prov = store.read_provenance(folder) or {}
        done = sweep.progress(folder)
        jobs = f"{done[0]}/{done[1]}" if done else f"{rows['job'].nunique() if len(rows) else 0}/?"
        counts = rows["status"].value_counts() if len(rows) else {}
        print(f"{folder.name:<48} {str(prov.get('device_short') or prov.get('backend') or '-'):<10} {jobs:>9} "
              f"{int(counts.get('ok', 0)):>5} {int(counts.get('skipped', 0)):>5} {int(counts.get('failed', 0)):>5}")


SUBCOMMANDS = {"report": _cmd_report, "publish": _cmd_publish, "compare": _cmd_compare, "accounting": _cmd_accounting,
               "fuel": _cmd_fuel, "list": _cmd_list, "sweeps": _cmd_sweeps,
               "reopen-check": _cmd_reopen_check, "budget": _cmd_budget}
# One line each for `attnbench --help` (the first line of each verb's description).
USAGE = """usage: attnbench [-m] [+experiment=NAME] [KEY=VALUE ...] [--force]   run one job, or a sweep with -m
       attnbench VERB [ARGS]                                          (attnbench VERB --help for its options)

verbs:
  report      render a stored sweep as a dated markdown write-up
  publish     copy a rendered write-up into reports/ and regenerate the index
  compare     the rows two sweeps share, side by side
  sweeps      stored sweeps: device, jobs stored of planned, ok / skipped / failed rows
  budget      where a decode step goes: KDA, sparse MLA and the indexer per step, from measured rows
  list        components, their variants, every axis
  accounting  byte accounting derived from the fuel
  fuel        the fuel: check, update (measured figures), settle (an open fact, with a source), import (a checkpoint)
  reopen-check  which published write-ups the current fuel or a newer run reopens, and why
  help        this text

running:
  -m, --multirun      one job per combination of the swept values (a sweep); re-running the same
                      command resumes its folder and runs only the jobs not stored yet
  --force             re-run every job of a resumed sweep
  +experiment=NAME    an experiment file of experiments/experiment/ ({experiments})
  hydra/launcher=parallel | slurm   spread the jobs over every visible GPU, or over a Slurm cluster
  --hydra-help        Hydra's own options; --cfg job prints a job's config
  --version           attnbench's version and commit
"""


def _usage() -> str:
    return USAGE.format(experiments=", ".join(_group_options("experiment")))


def _version() -> str:
    from importlib import metadata

    from harness.provenance import git_info

    try:
        version = metadata.version("attnbench")
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    info = git_info()
    dirty = {True: ", dirty", False: "", None: ", dirty: unknown"}[info.get("dirty")]
    return f"attnbench {version} (commit {str(info.get('commit') or 'unknown')[:12]}{dirty})"


def _prepare_sweep(check: Preflight, force: bool) -> tuple[pathlib.Path, list[str]]:
    """The multirun's folder (a new one, or the one its plan already has: resume), its plan
    written there, and the override that points Hydra at it."""
    plan = check.plan
    try:
        sweep_dir, resumed = sweep.choose_sweep_dir(check.root, plan, check.explicit_dir)
    except ValueError as exc:
        fail(str(exc))
    stored = sweep.stored_count(sweep_dir, plan) if resumed else 0
    if plan.repeats:
        print(f"attnbench: {len(plan.repeats)} of {len(plan.jobs)} jobs repeat an earlier job's point "
              f"(their component does not read a swept key) and are not run: {plan.distinct} to run", file=sys.stderr)
    if resumed:
        todo = plan.distinct if force else plan.distinct - stored
        print(f"attnbench: resuming {sweep_dir}: {stored} of {plan.distinct} jobs stored, {todo} to run"
              + (" (--force: all of them again)" if force else ""), file=sys.stderr)
    try:
        sweep.write_plan(sweep_dir, plan)
    except OSError as exc:
        fail(f"store.root: cannot write {sweep_dir / sweep.PLAN} ({exc.strerror}); allowed: a writable directory")
    sweep.export_env(plan.distinct, force, 0 if force else stored)
    extra = [] if check.explicit_dir is not None else [f"hydra.sweep.dir={sweep_dir}"]
    return sweep_dir, extra


def _finish(check: Preflight, sweep_dir: pathlib.Path | None) -> None:
    """The summary of what the command stored; exit 1 when any stored row failed."""
    from harness import store

    if sweep_dir is not None:
        rows = store.load_sweep(sweep_dir)
        planned, stored = check.plan.distinct, sweep.stored_count(sweep_dir, check.plan)
    elif _last_job_dirs:
        sweep_dir = _last_job_dirs[-1].parent
        rows = store.load_sweep(sweep_dir)
        planned = stored = None
    else:
        return
    text, failed = sweep.summary(rows, planned, stored)
    print(text, file=sys.stderr)
    print(f"attnbench: stored under {sweep_dir}; render with: python3 -m harness report {sweep_dir}", file=sys.stderr)
    if failed:
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        SUBCOMMANDS[argv[0]](argv[1:])
        return
    if argv[:1] in (["help"], ["-h"], ["--help"]):
        if argv[1:2] and argv[1] in SUBCOMMANDS:
            SUBCOMMANDS[argv[1]](["--help"])
        print(_usage(), end="")
        return
    if argv == ["--version"]:
        print(_version())
        return
    force = "--force" in argv
    argv = [a for a in argv if a != "--force"]
    check = preflight(argv)
    sweep_dir = None
    slots = None
    if check is not None and check.multirun:
        sweep_dir, extra = _prepare_sweep(check, force)
        argv = argv + extra
        # workers of a parallel launcher claim these (jobs in this process never do)
        if check.backend == "cuda" or os.environ.get(placement.FAKE_ENV):
            slots = placement.prepare_slots(placement.visible_gpus())
    elif check is not None:
        sweep.export_env(0, force, 0)
    sys.argv = [sys.argv[0]] + argv
    # Ctrl-C while Hydra composes a job's config reaches us as Hydra's own error exit (1), not as a
    # KeyboardInterrupt: remember that one came, so the command still says "interrupted" (130).
    interrupted: list[bool] = []

    def on_sigint(signum, frame):
        interrupted.append(True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    try:
        _hydra_job()
    except (KeyboardInterrupt, SystemExit) as exc:
        if isinstance(exc, SystemExit) and not interrupted:
            raise
        if sweep_dir is not None:
            done = sweep.stored_count(sweep_dir, check.plan)
            fail(f"interrupted: {done} of {check.plan.distinct} jobs stored under {sweep_dir}; "
                 f"run the same command again to run the rest", code=130)
        fail("interrupted; nothing stored for the running job", code=130)
    finally:
        if slots is not None:
            shutil.rmtree(slots, ignore_errors=True)
    if check is not None:
        _finish(check, sweep_dir)


if __name__ == "__main__":
    main()
