"""``python -m tests.hosting.screenshot docs/leaderboard.png [WIDTH]``: the seeded demo board, photographed by headless Chromium.

WIDTH is the window's width in pixels (default 1280; below 500 a phone is emulated).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.hosting.browser import full_page_screenshot, http_server, sized_driver
from tests.hosting.leaderboard_world import make_world, seed_demo


def write_screenshot(path: Path, tmp: Path, width: int = 1280) -> None:
    """docs/leaderboard.png: the seeded demo board in headless Chromium, the whole page at ``width`` pixels (below 500: a phone)."""
    world = make_world(tmp, None, resamples=10_000)
    seed_demo(world)
    browser = sized_driver(width)
    try:
        with http_server(world.ctx) as url:
            browser.get(url + "/")
            full_page_screenshot(browser, str(path), width)
    finally:
        browser.quit()
        world.ctx.db.dispose()


if __name__ == "__main__":
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 1280
    write_screenshot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/leaderboard.png").resolve(), Path(tempfile.mkdtemp()), width)
