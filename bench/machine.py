"""The line a benchmark's results begin with: when (UTC), on which machine, its CPU count and its load.

Imported by name (``import machine``): a script run as ``python bench/NAME.py`` has bench/ on its path.
"""

from __future__ import annotations

import os
import platform
import time


def machine_line(loads: int = 1) -> str:
    """``# YYYY-MM-DD HH:MM UTC, NODE, nproc N, load L`` with the first ``loads`` load averages (1, 5, 15 minutes)."""
    load = " ".join(f"{value:.1f}" for value in os.getloadavg()[:loads])
    return f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, nproc {os.cpu_count()}, load {load}"
