"""Run in a scoring process by tests/test_score_process.py: imports nothing, so what it finds loaded was loaded before."""

from __future__ import annotations

import sys


def loaded(module: str) -> bool:
    """Whether this process has imported ``module``."""
    return module in sys.modules
