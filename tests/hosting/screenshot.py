"""``python -m tests.hosting.screenshot docs/leaderboard.png``: the seeded demo board, photographed by headless Chromium."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.hosting.test_leaderboard_browser import write_screenshot

if __name__ == "__main__":
    write_screenshot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/leaderboard.png").resolve(), Path(tempfile.mkdtemp()))
