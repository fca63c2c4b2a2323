"""Compare the machine code of every CUDA kernel under kernels/ between a git revision and the
working tree (or a second revision), kernel by kernel.

    python3 tools/sass_diff.py 1fb75c3                      # 1fb75c3 against the working tree
    python3 tools/sass_diff.py 1fb75c3 -DKDA_TIMELINE       # the same with the timeline probes on
    python3 tools/sass_diff.py 1fb75c3 HEAD --show-diff 40  # two revisions; print differing SASS

Each side's ``kernels/**/*.cu`` is compiled with the flags NVRTC gets at run time
(harness/backends.py): ``nvcc -arch=sm_90 -cubin -std=c++17 --use_fast_math -I<the file's folder>``
plus the ``-D`` flags given here. (The backend also passes ``-DATTNBENCH_SOURCES_SHA=<hash>``, a key
for CuPy's disk cache that no source reads; this tool refuses a source that mentions it, since the
build could then differ with the hash.) A revision is taken whole with ``git archive`` into a
temporary folder, so its headers are the revision's too.

Kernels are matched by symbol name across files (a kernel may move between files). Per kernel,
three things are compared:
  sass       ``cuobjdump -sass``: every instruction's text and its encoding words;
  resources  ``cuobjdump -res-usage``: registers, stack, shared, local, constant bank 0;
  attributes the kernel's ``.nv.info.<kernel>`` section (launch bounds, max registers, parameter
             layout, barrier counts, exit/sync offsets, ...).
Normalised, because they depend on the rest of the file rather than on this kernel's code:
  - in SASS, runs of blanks are collapsed to one: cuobjdump pads its columns to the widest
    instruction text of the whole file;
  - in SASS, only when the comparison above fails: ``c[0x4][offset]`` operands (the slot of a
    ``__device__`` global in the module's global-address table, filled by relocation at load time)
    are replaced by the global's name, and those instructions' first encoding word, which holds the
    slot offset, is not compared. A kernel that matches only this way is reported as
    ``relocated`` with the slots that moved (symbol-relative addresses of globals differ); it passes
    unless ``--strict``;
  - in attributes, EIATTR_PARAM_CBANK's ELF symbol index is replaced by the symbol's name (the
    index is the symbol's position in the file's symbol table);
  - in resources, only when SASS and attributes are identical: a static shared size of 0 on one
    side and 1024 on the other, where exactly the 1024 side's file has a kernel using mbarriers.
    That is sm_90's 1 KiB reserved shared area, which ptxas counts for every kernel using shared
    memory and, in a file with mbarrier kernels, for every kernel of the file. Reported as
    ``reserved``; it passes unless ``--strict``.
Nothing else is normalised.

Prints one line per kernel (identical / relocated / reserved / differs / only-old / only-new) and a
summary; exits 1 if any kernel differs or exists on one side only (or, with --strict, is relocated
or reserved), 2 on a build error.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import difflib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
FLAGS = ("-arch=sm_90", "-cubin", "-std=c++17", "--use_fast_math")
CUOBJDUMP_FALLBACK = "/opt/cudabin/cuobjdump"

_C4 = re.compile(r"c\[0x4\]\[(RZ|0x[0-9a-f]+)\]")
_ENC = re.compile(r"/\* (0x[0-9a-f]{16}) \*/\s*$")


@dataclasses.dataclass
class Kernel:
    name: str
    file: str                 # relative to the side's root
    sass: list[str]           # the function's cuobjdump -sass lines, blank runs collapsed
    resources: str            # its res-usage line
    attributes: list[str]     # its .nv.info.<name> section, PARAM_CBANK symbol named
    c4: dict[int, str]        # global-address-table offset -> global (the module's)
    module_mbarriers: bool    # some kernel of the same file uses mbarriers (EIATTR_NUM_MBARRIERS)


def _run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{res.stderr[-4000:]}")
    return res.stdout


def _split_sass(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"^\s*Function : (\S+)\s*$", line)
        if m:
            name = m.group(1)
            if name in out:
                raise RuntimeError(f"cuobjdump lists function {name} twice")
            out[name] = []
        elif name is not None and line.strip():
            # cuobjdump pads the columns to the widest instruction of the whole file
            out[name].append(" ".join(line.split()))
    return out


def _split_resources(text: str) -> dict[str, str]:
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^\s*Function (\S+):\s*$", line)
        if m:
            name = m.group(1)
        elif name is not None and line.strip():
            out[name] = line.strip()
            name = None
    return out


def _elf_sections(text: str) -> dict[str, list[str]]:
    """cuobjdump -elf's dump, split at its section headers (a section name in column 0)."""
    out: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("."):
            name = line.strip()
            out[name] = []
        elif name is not None and line.strip():
            out[name].append(line.rstrip())
    return out


def _symbols(sections: dict[str, list[str]]) -> dict[int, str]:
    syms = {}
    for line in sections.get(".section .symtab", []):
        parts = line.split()
        if len(parts) >= 7 and parts[0] != "index":
            try:
                syms[int(parts[0], 0)] = parts[-1]
            except ValueError:
                continue
    return syms


def _c4_table(sections: dict[str, list[str]]) -> dict[int, str]:
    table = {}
    for line in sections.get(".section .rela.nv.constant4\tRELA", []) + sections.get(
            ".section .rela.nv.constant4 RELA", []):
        parts = line.split()
        if len(parts) >= 3:
            table[int(parts[0], 0)] = parts[1]
    return table


def _attributes(lines: list[str], syms: dict[int, str]) -> list[str]:
    out, in_cbank = [], False
    for line in lines:
        if "Attribute:" in line:
            in_cbank = "EIATTR_PARAM_CBANK" in line
        elif in_cbank and line.strip().startswith("Value:"):
            words = line.split()
            index = int(words[1], 0)
            line = f"\tValue:\tsym:{syms.get(index, f'?{index:#x}')} {' '.join(words[2:])}"
        out.append(line)
    return out


def dump(cubin: pathlib.Path, file: str, cuobjdump: str) -> dict[str, Kernel]:
    sass = _split_sass(_run([cuobjdump, "-sass", str(cubin)]))
    res = _split_resources(_run([cuobjdump, "-res-usage", str(cubin)]))
    sections = _elf_sections(_run([cuobjdump, "-elf", str(cubin)]))
    syms, c4 = _symbols(sections), _c4_table(sections)
    mbarriers = any("EIATTR_NUM_MBARRIERS" in line for sec, lines in sections.items()
                    if sec.startswith(".nv.info.") for line in lines)
    return {name: Kernel(name, file, lines, res.get(name, "?"),
                         _attributes(sections.get(f".nv.info.{name}", []), syms), c4, mbarriers)
            for name, lines in sass.items()}


def compile_tree(root: pathlib.Path, out: pathlib.Path, nvcc: str, cuobjdump: str, defines: list[str],
                 jobs: int) -> dict[str, Kernel]:
    """Every kernels/**/*.cu under ``root``, compiled and dumped; {kernel name: Kernel}."""
    sources = sorted((root / "kernels").rglob("*.cu"))
    if not sources:
        raise RuntimeError(f"no .cu under {root / 'kernels'}")
    for src in sources:
        if "ATTNBENCH_SOURCES_SHA" in src.read_text():
            raise RuntimeError(f"{src}: reads ATTNBENCH_SOURCES_SHA, so its build depends on the hash "
                               "the backend passes; this tool does not pass it")
    out.mkdir(parents=True, exist_ok=True)

    def one(src: pathlib.Path) -> dict[str, Kernel]:
        rel = src.relative_to(root).as_posix()
        cubin = out / (rel.replace("/", "__") + ".cubin")
        _run([nvcc, *FLAGS, f"-I{src.parent}", *defines, "-o", str(cubin), str(src)])
        return dump(cubin, rel, cuobjdump)

    found: list[tuple[str, Kernel]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for kernels_of_file in pool.map(one, sources):
            found += list(kernels_of_file.items())
    # A kernel is keyed by its name, so a design moved to another file is still compared with
    # itself; a name that several modules define (each its own NVRTC module: a shared combine
    # kernel from a header) is keyed by name and file.
    counts = collections.Counter(name for name, _ in found)
    return {(name if counts[name] == 1 else f"{name} [{k.file}]"): k for name, k in found}


def export_revision(rev: str, dest: pathlib.Path) -> None:
    """kernels/ as it is at ``rev``, written under ``dest``."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "kernels"],
                          capture_output=True)
    if data.returncode != 0:
        raise RuntimeError(f"git archive {rev}: {data.stderr.decode()[-2000:]}")
    with tarfile.open(fileobj=io.BytesIO(data.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _relocated(a: Kernel, b: Kernel) -> list[str] | None:
    """If a and b differ only in global-address-table slots naming the same globals, the slots
    that moved ('name: 0x0 -> 0x8'); else None."""
    if len(a.sass) != len(b.sass):
        return None
    moved: set[str] = set()

    def norm(line: str, table: dict[int, str]) -> tuple[str, list[tuple[str, int]]]:
        refs = []

        def sub(m: re.Match) -> str:
            off = 0 if m.group(1) == "RZ" else int(m.group(1), 16)
            refs.append((table.get(off, f"?{off:#x}"), off))
            return f"c[0x4][@{refs[-1][0]}]"
        return _C4.sub(sub, line), refs

    for line_a, line_b in zip(a.sass, b.sass):
        la, ra = norm(line_a, a.c4)
        lb, rb = norm(line_b, b.c4)
        if ra or rb:
            # the instruction's first encoding word holds the slot offset; compare the rest
            la, lb = _ENC.sub("/* <slot> */", la), _ENC.sub("/* <slot> */", lb)
            names_a, names_b = [n for n, _ in ra], [n for n, _ in rb]
            if la != lb or names_a != names_b or any(n.startswith("?") for n in names_a):
                return None
            moved.update(f"{na}: {oa:#x} -> {ob:#x}" for (na, oa), (_, ob) in zip(ra, rb) if oa != ob)
        elif la != lb:
            return None
    return sorted(moved) if moved else None


def _reserved_only(a: Kernel, b: Kernel) -> str | None:
    """If a and b differ only in a static shared size of 0 against 1024 bytes, and exactly the
    1024-byte side's file has a kernel using mbarriers: why, in words; else None. ptxas counts
    sm_90's 1 KiB system-reserved shared area in the static shared size of every kernel that uses
    shared memory, and of every kernel of a file in which some kernel uses mbarriers, so a kernel
    that touches no shared memory shows 0 or 1024 depending on the file it is built in."""
    ra, rb = (dict(f.split(":", 1) for f in r.resources.split()) for r in (a, b))
    if set(ra) != set(rb) or {k for k in ra if ra[k] != rb[k]} != {"SHARED"}:
        return None
    by_size = {ra["SHARED"]: a, rb["SHARED"]: b}
    if set(by_size) != {"0", "1024"} or not by_size["1024"].module_mbarriers or by_size["0"].module_mbarriers:
        return None
    return (f"static shared {ra['SHARED']} -> {rb['SHARED']} B: sm_90's 1 KiB reserved area, counted "
            f"by ptxas for a kernel without shared memory only in a file with mbarrier kernels "
            f"({by_size['1024'].file})")


def compare(old: dict[str, Kernel], new: dict[str, Kernel], strict: bool, show: int) -> int:
    counts = {"identical": 0, "relocated": 0, "reserved": 0, "differs": 0, "only-old": 0, "only-new": 0}
    bad = 0
    width = max(len(n) for n in {**old, **new})
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            status = "only-old" if b is None else "only-new"
            print(f"{status:9}  {name:{width}}  {(a or b).file}")
            counts[status] += 1
            bad += 1
            continue
        where = a.file if a.file == b.file else f"{a.file} -> {b.file}"
        what = [part for part, same in (("sass", a.sass == b.sass), ("resources", a.resources == b.resources),
                                         ("attributes", a.attributes == b.attributes)) if not same]
        slots = _relocated(a, b) if what == ["sass"] else None
        reserved = _reserved_only(a, b) if what == ["resources"] else None
        if not what:
            status, note = "identical", ""
        elif slots:
            status, note = "relocated", "  [__device__ global slots moved: " + "; ".join(slots) + "]"
        elif reserved:
            status, note = "reserved", f"  [SASS and attributes identical; {reserved}]"
        else:
            status, note = "differs", f"  [{', '.join(what)}]"
        counts[status] += 1
        if status == "differs" or (status in ("relocated", "reserved") and strict):
            bad += 1
        print(f"{status:9}  {name:{width}}  {where}{note}")
        if status == "differs" and show:
            if "resources" in what:
                print(f"    resources: {a.resources}\n           vs: {b.resources}")
            for part in ("sass", "attributes"):
                if part in what:
                    diff = list(difflib.unified_diff(getattr(a, part), getattr(b, part), "old", "new",
                                                     lineterm="", n=1))
                    print("\n".join("    " + d for d in diff[:show]))
    total = sum(counts.values())
    print(f"{total} kernels: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Kernel-by-kernel machine-code comparison of kernels/**/*.cu: a git revision "
                    "against the working tree (or a second revision).",
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="git revision to compare from (e.g. 1fb75c3)")
    ap.add_argument("new", nargs="?", help="git revision to compare to (default: the working tree)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="MACRO[=VALUE]",
                    help="extra macro for both builds, e.g. -DKDA_TIMELINE (repeatable)")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or CUOBJDUMP_FALLBACK,
                    help=f"cuobjdump to dump SASS with (default: on PATH, else {CUOBJDUMP_FALLBACK})")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc runs")
    ap.add_argument("--strict", action="store_true",
                    help="count 'relocated' and 'reserved' kernels as failures")
    ap.add_argument("--show-diff", type=int, default=0, metavar="LINES",
                    help="print up to LINES of unified diff for each kernel that differs")
    ap.add_argument("--keep", type=pathlib.Path, metavar="DIR", help="keep the cubins under DIR")
    args = ap.parse_args(argv)
    defines = [f"-D{d}" for d in args.defines]
    for tool in (args.nvcc, args.cuobjdump):
        if not (shutil.which(tool) or os.access(tool, os.X_OK)):
            print(f"sass_diff: {tool} not found", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="sass_diff_") as tmp:
        work = args.keep or pathlib.Path(tmp)
        try:
            sides = []
            for label, rev in (("old", args.old), ("new", args.new)):
                if rev is None:
                    root = REPO
                else:
                    root = work / f"{label}_tree"
                    export_revision(rev, root)
                sides.append(compile_tree(root, work / f"{label}_cubin", args.nvcc, args.cuobjdump,
                                          defines, args.jobs))
        except RuntimeError as exc:
            print(f"sass_diff: {exc}", file=sys.stderr)
            return 2
        print(f"old: {args.old}   new: {args.new or 'working tree'}   flags: "
              f"{' '.join(FLAGS)} -I<folder> {' '.join(defines)}".rstrip())
        return compare(*sides, strict=args.strict, show=args.show_diff)


if __name__ == "__main__":
    sys.exit(main())
