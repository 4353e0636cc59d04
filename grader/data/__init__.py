"""Benchmark data: BEIR-layout tasks, benchmarks, registry, digests, importers."""
