"""Runs: ranked results per query, in memory as arrays, and their file formats."""
