"""Benchmarks of leasecheck, each printing its figures side by side with a peer.

Run them from the repository root with ``python -m bench.<module>``; see
``bench/README.md``.
"""
