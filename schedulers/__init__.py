"""Scheduling policy: pure code, time passed in, no I/O (property-tested in tests/schedulers)."""
