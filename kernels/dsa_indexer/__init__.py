"""DSA selection path (the lightning indexer, top-k, kpool compress and expand): ``reference.py``
holds the rules, each tested (tests/test_dsa_reference.py). Its kernels and components are to
come (issue 14); nothing is registered yet."""
