"""What a job is doing, said only when it takes a while: ``stage("verify", "sparse_mla/split_mma")``
marks the current stage; a daemon thread logs ``still verifying sparse_mla/split_mma (12 s)``
once a stage has run past ``SLOW_S`` seconds, and every ``REPEAT_S`` after that, so a long compile,
a many-GiB input build or a slow reference is never a silent minute, and a fast job prints nothing
extra."""

from __future__ import annotations

import contextlib
import logging
import threading
import time

log = logging.getLogger("attnbench")

SLOW_S = 5.0
REPEAT_S = 30.0

_lock = threading.Lock()
_current: dict = {}          # {"name", "what", "since", "said"}
_watcher: threading.Thread | None = None


def _watch() -> None:
    while True:
        time.sleep(0.5)
        with _lock:
            if not _current:
                continue
            ran = time.monotonic() - _current["since"]
            due = SLOW_S if _current["said"] == 0 else SLOW_S + REPEAT_S * _current["said"]
            if ran < due:
                continue
            _current["said"] += 1
            name, what = _current["name"], _current["what"]
        log.info("still %s %s (%.0f s)", name, what, ran)


@contextlib.contextmanager
def stage(name: str, what: str):
    """Mark ``name`` (a present participle: "compiling", "timing") for ``what`` while the block runs."""
    global _watcher
    with _lock:
        if _watcher is None:
            _watcher = threading.Thread(target=_watch, name="attnbench-stages", daemon=True)
            _watcher.start()
        saved = dict(_current)
        _current.clear()
        _current.update(name=name, what=what, since=time.monotonic(), said=0)
    try:
        yield
    finally:
        with _lock:
            _current.clear()
            _current.update(saved)
