"""Benchmarks that print ratios measured in one run (never timed tests)."""
