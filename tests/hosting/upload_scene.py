"""A web upload part-way, in headless Chromium against a real ``grader serve``: what the docs' upload screenshots show.

``python -m tests.hosting.upload_scene docs/upload`` writes ``docs/upload-1280.png`` and ``docs/upload-390.png``: the
participant page while its resumable upload (tus, the server's own vendored client) is part-way through a 24 MB
archive, held there by a proxy (:class:`tests.hosting.faulty_proxy.FaultyProxy`) so that the picture is of a real
upload, not of a mock-up. The page's upload is exercised for real, with a server restart in the middle, by
``tests/hosting/test_upload_browser.py``; this module only photographs it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from grader.hosting.participant.client import write_archive
from tests.hosting.faulty_proxy import FaultyProxy
from tests.hosting.progress_scene import sign_in
from tests.hosting.support import REPO, Server, admin, write_competition

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Random bytes beside the example (gzip cannot shrink them), so that the upload takes a while to send.
PADDING = 24 << 20
#: Where the proxy holds the upload: the bar stops part-way.
HELD_AT = 9 << 20


def padded_archive(tmp: Path) -> Path:
    """What `grader archive` writes for the example with :data:`PADDING` random bytes beside it."""
    folder = tmp / "submission"
    shutil.copytree(EXAMPLE, folder)
    (folder / "padding.bin").write_bytes(os.urandom(PADDING))
    target = tmp / "submission.tar.gz"
    write_archive(folder, target)
    return target


def write_screenshots(prefix: Path, tmp: Path) -> None:
    """``PREFIX-1280.png`` and ``PREFIX-390.png``: the participant page with its upload held part-way."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.hosting.browser import full_page_screenshot, sized_driver

    archive = padded_archive(tmp)
    competition = write_competition(tmp / "c.toml", tables={"upload": {"max_bytes": "64m"}})
    server = Server(competition, tmp / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "kim").strip()
        for width in (1280, 390):
            proxy = FaultyProxy(server.port)
            driver = sized_driver(width, 844 if width < 500 else 900)
            try:
                sign_in(driver, proxy.url, token)
                WebDriverWait(driver, 120).until(lambda d: d.find_elements(By.ID, "upload-start"))
                proxy.hold_after(HELD_AT)
                driver.find_element(By.ID, "upload-file").send_keys(str(archive))
                driver.find_element(By.ID, "upload-start").click()
                assert proxy.holding.wait(300), "the upload never reached the proxy's hold"
                WebDriverWait(driver, 60).until(lambda d: 0 < int(d.find_element(By.ID, "upload-progress").get_attribute("value") or 0) < 100)
                full_page_screenshot(driver, f"{prefix}-{width}.png", width)
            finally:
                driver.quit()
                proxy.close()
    finally:
        server.stop()


if __name__ == "__main__":
    write_screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/upload").resolve(), Path(tempfile.mkdtemp()))
