"""GPU: the roofline kernels through CuPy, byte-exact at several sizes (skipped without a GPU)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from harness import backends, registry, runner

pytestmark = pytest.mark.skipif(not backends.gpu_visible(), reason="no GPU visible (CuPy sees no CUDA device)")

QUICK = SimpleNamespace(warmup=1, min_reps=5, max_reps=20, min_time_ms=0.0, max_noise=1.0,
                        timeout_s=5.0, cache="flush", graph=False)


@pytest.mark.parametrize("component", ["roofline", "roofline_rmw"])
@pytest.mark.parametrize("copy_mib", [1, 3, 64])
def test_cuda_roofline_variants_exact(geometry, component, copy_mib):
    comp = registry.get(component)
    backend = backends.get("cuda")
    for v in comp.variants:
        if v.backend != "cuda":
            continue
        row = runner.measure(comp, v, {"copy_mib": copy_mib}, geometry, backend, QUICK, seed=7, roofline=None)
        assert row["status"] == "ok", f"{v.name}: {row['reason']}"
        assert row["rel_err"] == 0


def _small_launch(backend):
    """A launcher of a few microseconds of GPU work (the flusher's read kernel over 256 KiB), for the
    hold's tests to wrap in a slow or a waiting host."""
    from harness import timing

    kernel = backend.module(timing._Flusher.SOURCE).get_function("l2_flush_read")
    buf = backend.cp.zeros(1 << 16, dtype=backend.cp.uint32)
    sink = backend.cp.zeros(1, dtype=backend.cp.uint32)
    return lambda: backend.launch(kernel, (8,), (256,), (buf, backend.cp.uint64(buf.size // 4), sink))


def test_a_held_batch_times_the_gpu_alone(geometry):
    """timing.hold on a device: the hold kernel sees the host's release through pinned memory (no
    expiry, which would leave the row unheld), the rows say cuda-events-held, and a host that
    sleeps 2 ms before each launch adds nothing to a held sample (the batch waits whole behind the
    hold) while it lands in every plain one."""
    from harness import timing

    comp = registry.get("roofline")
    backend = backends.get("cuda")
    held = SimpleNamespace(**{**vars(QUICK), "hold": True})
    row = runner.measure(comp, comp.variant("copy_v16"), {"copy_mib": 1}, geometry, backend, held, seed=7,
                         roofline=None)
    assert row["status"] == "ok", row["reason"]
    assert row["clock"] == "cuda-events-held"
    small_launch = _small_launch(backend)

    def slow_host_launch():
        time.sleep(0.002)
        small_launch()

    plain = timing.time_cuda([slow_host_launch], backend, SimpleNamespace(**{**vars(QUICK), "hold": False}), "warm")
    hold = timing.time_cuda([slow_host_launch], backend, held, "warm")
    assert plain.ms_p50 > 1.5 and hold.ms_p50 < 0.5, (plain.ms_p50, hold.ms_p50)


def test_a_step_that_waits_on_the_device_outlasts_the_hold_and_is_timed_unheld():
    """A step that synchronizes its stream inside itself waits behind the hold until the hold gives
    up (1 s), not forever; that batch is dropped and the step is timed without a hold."""
    from harness import timing

    backend = backends.get("cuda")
    small_launch = _small_launch(backend)

    def launch_then_wait():
        small_launch()
        backend.stream.synchronize()

    started = time.perf_counter()
    res = timing.time_cuda([launch_then_wait], backend, SimpleNamespace(**{**vars(QUICK), "hold": True}), "warm")
    assert res.clock == "cuda-events" and res.n >= QUICK.min_reps
    assert time.perf_counter() - started < 10.0
