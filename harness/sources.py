"""What a kernel source compiles: the file itself and every local header it includes.

A CUDA source may ``#include "name.cuh"`` a header beside it (or beside a header it includes);
the CUDA backend compiles it with ``-I`` on that folder, and everything that hashes a source (the
backend's module cache, a row's ``source_sha``) hashes this whole set, so a change to a shared
header changes every design that compiles it and a change to one design file changes only that
design. System includes (``<...>``) are not followed: NVRTC builds these sources without any.
"""

from __future__ import annotations

import hashlib
import pathlib
import re

_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def compiled_files(source: str | pathlib.Path) -> list[pathlib.Path]:
    """``source`` and the local headers it includes, transitively, in first-seen order. A missing
    header raises FileNotFoundError naming it and the file that includes it."""
    seen: list[pathlib.Path] = []
    stack = [pathlib.Path(source).resolve()]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen.append(path)
        found = []
        for name in _LOCAL_INCLUDE.findall(path.read_text()):
            header = (path.parent / name).resolve()
            if not header.is_file():
                raise FileNotFoundError(f"{path.name}: #include \"{name}\" not found beside it")
            found.append(header)
        stack.extend(reversed(found))
    return seen


def sources_sha(paths: list[str | pathlib.Path], length: int = 16) -> str:
    """One hash over every file the given sources compile (each named by its file name, so
    moving a folder does not change it); '' for no sources."""
    if not paths:
        return ""
    h = hashlib.sha256()
    files: list[pathlib.Path] = []
    for p in paths:
        for f in compiled_files(p):
            if f not in files:
                files.append(f)
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:length]
