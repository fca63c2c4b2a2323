"""Kernel families. Importing this package registers every family with `harness.registry`."""

from kernels import roofline  # noqa: F401
