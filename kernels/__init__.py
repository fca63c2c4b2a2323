"""Kernel families. Importing this package registers every family with `harness.registry`, and
the axes declared ahead of their families (the DSA ones, ``dsa_axes``)."""

from kernels import dsa_axes, dsa_indexer, dsa_layer, kda_decode, roofline, sparse_mla  # noqa: F401
