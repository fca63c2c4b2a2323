"""DSA selection path (the lightning indexer, top-k, kpool compress and expand), seed 001's
kpool_compress -> index_scores -> topk -> expand_selection as kernels.

- ``reference.py``: the rules, float64 / exact, each tested (tests/test_dsa_reference.py); every
  kernel here is checked against them.
- one module set per component (spec, variants, .cu designs), registered below.
"""
