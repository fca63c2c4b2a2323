"""What every family's wgmma kernels need from NVRTC and the device (scan_wgmma.cu, split_wgmma.cu).

wgmma exists only on sm_90a, the arch-specific Hopper target: NVRTC must be asked for it by name
(an ``-arch=`` option replaces the device's, ``harness.cuda.get_kernel``), and each source's own
define switches its wgmma body on (without it the body is a trap, so a wrong-arch build fails loudly
instead of computing nothing). Nothing here imports cupy.
"""

from __future__ import annotations

WGMMA_ARCH = "sm_90a"


def wgmma_options(define: str) -> tuple[str, ...]:
    """NVRTC options for a wgmma source whose body ``define`` enables."""
    return (f"-arch={WGMMA_ARCH}", f"-D{define}")


def require_wgmma_device(name: str, backend) -> None:
    """Refuse, in one line naming ``name``, a device that cannot run sm_90a code."""
    if backend.arch() != "sm_90":
        raise ValueError(f"{name}: wgmma needs an sm_90 device (compiled for {WGMMA_ARCH}); this one is {backend.arch()}")
