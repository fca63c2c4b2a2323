"""attnbench's kernel-agnostic harness: fuel, accounting, configs, backends, timing,
verification, provenance, the results store, reports and the CLI."""

__version__ = "0.1.0"
