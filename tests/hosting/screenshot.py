"""``python -m tests.hosting.screenshot docs/leaderboard.png``: the seeded demo board, photographed by headless Chromium."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.hosting.browser import http_server, new_driver
from tests.hosting.leaderboard_world import make_world, seed_demo


def write_screenshot(path: Path, tmp: Path) -> None:
    """docs/leaderboard.png: the seeded demo board in headless Chromium."""
    world = make_world(tmp, None, resamples=10_000)
    seed_demo(world)
    browser = new_driver(1500, 1100)
    try:
        with http_server(world.ctx) as url:
            browser.get(url + "/")
            browser.save_screenshot(str(path))
    finally:
        browser.quit()
        world.ctx.db.dispose()


if __name__ == "__main__":
    write_screenshot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/leaderboard.png").resolve(), Path(tempfile.mkdtemp()))
