"""Kernel families. Importing this package registers every family with `harness.registry`."""

from kernels import kda_decode, roofline  # noqa: F401
