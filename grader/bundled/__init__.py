"""Benchmark definitions shipped with the grader (and the bundled ``mini`` data)."""
