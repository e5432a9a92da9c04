"""Benchmarks: ``python -m benchmarks.NAME`` prints a table; ``--json`` prints one JSON object."""
