"""``python -m tests.hosting.screenshot docs/leaderboard.png [WIDTH]``: the seeded demo board, photographed by headless Chromium.

WIDTH is the window's width in pixels (default 1280; below 500 a phone is emulated).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.hosting.test_leaderboard_browser import write_screenshot

if __name__ == "__main__":
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 1280
    write_screenshot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/leaderboard.png").resolve(), Path(tempfile.mkdtemp()), width)
