"""Faults: every one recorded, every one undone.

A fault is a small object with ``start`` and ``heal``; the :class:`~leasecheck.nemesis.schedule.Nemesis`
runs them on a seeded schedule and heals everything still active on any exit.
This package knows processes, signals and callables — never a backend or the
runner (arrows point one way).
"""
