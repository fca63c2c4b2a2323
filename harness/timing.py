"""Timing: one measurement loop for every backend.

CUDA: events recorded on the stream the kernels run on. Between repetitions the L2 is either
flushed by writing a buffer of at least 2x the L2 (allocated once per backend), or, when the
working set fits in L2, several input sets are rotated so no repetition finds its inputs cached.
Optional CUDA-graph replay removes launch gaps for launch-bound kernels. By default (``hold``) each
batch of repetitions is enqueued behind a kernel that spins until the host has enqueued all of
it (harness/host_hold.cu), so no sample holds a host-side launch gap: clock ``cuda-events-held``.

CPU: ``time.perf_counter`` around each call (the CPU reference backend).

Stop rule: keep repeating until at least ``min_reps`` and ``min_time_ms`` of measured time, then
stop when the relative spread (p80 - p20) / p50 is within ``max_noise``, or at ``max_reps``, or
at ``timeout_s`` of wall time. A row that stops noisy is flagged (``noisy``), never dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib
import time
from typing import Callable, Sequence

import numpy as np

BATCH = 10  # repetitions between stop-rule checks (one host sync per batch)

log = logging.getLogger("attnbench")


@dataclasses.dataclass(frozen=True)
class TimingResult:
    samples_ms: tuple[float, ...]
    ms_p50: float
    ms_p20: float
    ms_p80: float
    ms_min: float
    n: int
    spread: float
    noisy: bool
    stop_reason: str
    clock: str          # cuda-events | cuda-events-held (timing.hold) | host
    cache: str          # flush | rotate | warm | host
    graph: bool
    chain: int = 1      # launches per sample; every ms figure is per launch (sample / chain)


def summarize(samples: Sequence[float]) -> tuple[float, float, float, float, float]:
    a = np.asarray(samples, dtype=np.float64)
    p20, p50, p80 = (float(x) for x in np.percentile(a, [20, 50, 80]))
    spread = (p80 - p20) / p50 if p50 > 0 else math.inf
    return p50, p20, p80, float(a.min()), spread


def _stop(samples: list[float], conf, started: float) -> str | None:
    n = len(samples)
    if time.perf_counter() - started > conf.timeout_s:
        return "timeout"
    if n >= conf.max_reps:
        return "max_reps"
    if n < conf.min_reps or sum(samples) < conf.min_time_ms:
        return None
    _, _, _, _, spread = summarize(samples)
    return "converged" if spread <= conf.max_noise else None


def _result(samples: list[float], reason: str, conf, clock: str, cache: str, graph: bool) -> TimingResult:
    samples = samples[:conf.max_reps]  # the stop rule checks once a batch; keep exactly max_reps
    p50, p20, p80, mn, spread = summarize(samples)
    # Too few repetitions (a timeout before min_reps) is as untrustworthy as a wide spread.
    noisy = spread > conf.max_noise or len(samples) < conf.min_reps
    return TimingResult(tuple(samples), p50, p20, p80, mn, len(samples), spread,
                        noisy, reason, clock, cache, graph)


def per_launch(result: TimingResult, chain: int) -> TimingResult:
    """A result whose samples each ran ``chain`` launches, restated per launch (the spread and the
    stop rule are unchanged: they were judged on the whole samples)."""
    if chain == 1:
        return result
    scale = 1.0 / chain
    return dataclasses.replace(
        result, samples_ms=tuple(x * scale for x in result.samples_ms), ms_p50=result.ms_p50 * scale,
        ms_p20=result.ms_p20 * scale, ms_p80=result.ms_p80 * scale, ms_min=result.ms_min * scale,
        chain=chain)


ROTATION_CAP = 64  # input sets at most; beyond that a flush is cheaper than the copies


def rotation_sets(footprint_bytes: int, l2_bytes: int, cap: int = ROTATION_CAP) -> int:
    """Input sets whose footprints together cover twice the L2 (so none is cached when reused)."""
    return max(2, min(cap, math.ceil(2 * l2_bytes / max(footprint_bytes, 1))))


def choose_cache_mode(conf_cache: str, footprint_bytes: int, l2_bytes: int) -> str:
    """``auto``: rotate input sets when one set's footprint (bytes the step touches, each buffer
    once) fits in half the L2 and the rotation can cover 2x the L2; else flush between reps."""
    if conf_cache != "auto":
        return conf_cache
    fits = footprint_bytes * 2 <= l2_bytes
    covers = rotation_sets(footprint_bytes, l2_bytes) * footprint_bytes >= 2 * l2_bytes
    return "rotate" if fits and covers else "flush"


def time_host(step: Callable[[], None], conf) -> TimingResult:
    for _ in range(conf.warmup):
        step()
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        for _ in range(BATCH):
            t0 = time.perf_counter()
            step()
            samples.append((time.perf_counter() - t0) * 1e3)
        reason = _stop(samples, conf, started)
        if reason:
            return _result(samples, reason, conf, "host", "host", False)


class _Flusher:
    """Reads a buffer of >= 2x L2 on the stream (harness/l2_flush.cu), evicting whatever the last
    repetition cached and leaving no dirty lines for the next one to write back."""

    SOURCE = pathlib.Path(__file__).with_name("l2_flush.cu")

    def __init__(self, backend):
        cp = backend.cp
        self.backend = backend
        self.size = max(2 * backend.l2_bytes(), 1 << 20)
        with backend.stream:
            # Random contents, so no compression or zero-page shortcut makes the reads cheap.
            self.buf = cp.random.randint(0, 2**31, size=self.size // 4, dtype=cp.int32).view(cp.uint32)
            self.sink = cp.zeros(1, dtype=cp.uint32)
        self.kernel = backend.module(self.SOURCE).get_function("l2_flush_read")
        self.n16 = self.size // 16
        self.grid = int(backend.props["multiProcessorCount"]) * 8

    def __call__(self) -> None:
        cp = self.backend.cp
        self.backend.launch(self.kernel, (self.grid,), (256,), (self.buf, cp.uint64(self.n16), self.sink))


class _HostHold:
    """A kernel that holds the stream until the host releases it (harness/host_hold.cu): ``hold``
    before a batch is enqueued, ``release`` after, ``timed_out`` once the batch has run."""

    SOURCE = pathlib.Path(__file__).with_name("host_hold.cu")
    SECONDS = 1.0  # the longest hold: the host enqueues a batch of BATCH repetitions in far less

    def __init__(self, backend):
        cp = backend.cp
        self.backend = backend
        self.mem = cp.cuda.alloc_pinned_memory(4)          # mapped into the device's address space (UVA)
        self.flag = np.frombuffer(self.mem, np.uint32, 1)
        with backend.stream:
            self.expired = cp.zeros(1, dtype=cp.uint32)
        self.kernel = backend.module(self.SOURCE).get_function("host_hold")
        self.max_cycles = np.int64(self.SECONDS * int(backend.props["clockRate"]) * 1000)   # clockRate in kHz

    def hold(self) -> None:
        self.flag[0] = 0                                   # the previous batch's hold has run: it was synchronized
        self.backend.launch(self.kernel, (1,), (1,), (np.uint64(self.mem.ptr), self.max_cycles, self.expired))

    def release(self) -> None:
        self.flag[0] = 1

    def timed_out(self) -> bool:
        """After the batch ran: whether the hold gave up before the release (and reset the mark)."""
        if not int(self.expired.get()[0]):
            return False
        self.expired.fill(0)
        return True


def host_hold(backend) -> _HostHold:
    """The backend's stream hold (made on first use, then reused by every job and tool)."""
    h = getattr(backend, "_attnbench_host_hold", None)
    if h is None:
        h = _HostHold(backend)
        backend._attnbench_host_hold = h
    return h


def flusher(backend) -> _Flusher:
    """The backend's L2 flusher (allocated on first use, then reused by every job and tool)."""
    f = getattr(backend, "_attnbench_flusher", None)
    if f is None:
        f = _Flusher(backend)
        backend._attnbench_flusher = f  # allocated once per backend, reused by every job
    return f


def time_cuda(steps: Sequence[Callable[[], None]], backend, conf, cache: str) -> TimingResult:
    """Time ``steps`` (one per rotated input set; one when flushing) with CUDA events.

    Each repetition records a start and an end event around one step on ``backend.stream``; the
    flush (when used) is enqueued before the start event, so it is never inside the timed span.
    ``conf.hold``: each batch is enqueued behind host_hold's kernel and released once enqueued
    whole, so the GPU never waits on the host inside a sample. A hold that expires (the host took
    over _HostHold.SECONDS to enqueue a batch: a step that waits on the device inside itself waits
    out the hold) drops every sample taken so far, and the step is timed unheld from then on, its
    clock ``cuda-events``, with a warning naming the step's first call.
    """
    cp = backend.cp
    stream = backend.stream
    flush = flusher(backend) if cache == "flush" else None
    hold = host_hold(backend) if getattr(conf, "hold", False) else None
    k = 0
    for _ in range(conf.warmup):
        if flush:
            flush()
        steps[k % len(steps)]()
        k += 1
    stream.synchronize()
    samples: list[float] = []
    started = time.perf_counter()
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(BATCH)]
    while True:
        if hold:
            hold.hold()
        for start, end in events:
            if flush:
                flush()
            start.record(stream)
            steps[k % len(steps)]()
            end.record(stream)
            k += 1
        if hold:
            hold.release()
        end_last = events[-1][1]
        end_last.synchronize()
        if hold and hold.timed_out():
            # the batch's samples may hold the wait, and held and unheld samples do not mix in a row
            log.warning("timing.hold: the host took over %g s to enqueue %d repetitions of %s, so the hold "
                        "expired; its samples are dropped and the step is timed unheld (clock cuda-events)",
                        _HostHold.SECONDS, BATCH, getattr(steps[0], "__name__", repr(steps[0])))
            hold = None
            samples.clear()
            continue
        samples.extend(cp.cuda.get_elapsed_time(s, e) for s, e in events)
        reason = _stop(samples, conf, started)
        if reason:
            return _result(samples, reason, conf, "cuda-events-held" if hold else "cuda-events", cache,
                           bool(conf.graph))
