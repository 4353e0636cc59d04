"""Grading: running a submission over a benchmark's tasks and assembling the report."""
