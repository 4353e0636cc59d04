"""grader: a containerized, verifiable grader for code-retrieval benchmarks."""

__version__ = "0.3.0"
