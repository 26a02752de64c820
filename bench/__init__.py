"""Benchmarks: each bench_*.py module has main() that prints figures and ratios."""
