"""Statistics over per-query values: bootstrap intervals, paired tests, Holm's correction, rank
intervals and significance groups, the public/private query partition, and the benchmark's aggregation.

Every random draw is specified in :mod:`grader.stats.draws` and docs/statistics.md, so anyone can
re-derive every number.
"""
