"""The participant page's resumable upload in a real headless Chromium, against a real `grader serve` over real sockets.

The page runs the vendored tus-js-client (served by the server: ``script-src 'self'``) and
the server's own upload script. A 100 MB archive is cut midway by a proxy that holds
the upload's bytes while the server is killed and started again; the page resumes from
the bytes the server held and ends with one submission whose stored archive has the
file's SHA-256. A second upload, on a 390-pixel phone, is interrupted by a reload of the page
mid-upload; choosing the same file again resumes the same tus upload from the bytes the server
holds. No worker runs (``--workers 0``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from grader.hosting.participant.client import write_archive
from tests.hosting.browser import new_driver, require_chromium
from tests.hosting.faulty_proxy import FaultyProxy
from tests.hosting.progress_scene import sign_in
from tests.hosting.support import REPO, Server, admin, wait_for, write_competition

pytestmark = pytest.mark.slow

VENDOR = REPO / "grader" / "hosting" / "leaderboard" / "templates" / "vendor" / "tus-js-client"
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
BIG = 100 << 20
#: Request bytes the resumed upload may send beyond the part the server did not hold: the HEAD, the PATCH's
#: headers, the reloaded page's requests (a few kB in all; a restart from byte 0 would add tens of MB).
OVERHEAD = 1 << 20
#: The tus uploads the page's tus-js-client keeps in localStorage (``tus::<fingerprint>::<id>``), by upload URL.
STORED_UPLOADS = """
return Object.keys(localStorage).filter(k => k.startsWith("tus::")).map(k => JSON.parse(localStorage.getItem(k)).uploadUrl);
"""
FITS = """
const page = document.documentElement;
return {scroll: page.scrollWidth, viewport: page.clientWidth};
"""


def test_the_vendored_bundle_is_the_recorded_one() -> None:
    """tus-js-client 4.3.1's dist/tus.min.js and its LICENSE, as `npm pack tus-js-client@4.3.1` gives them (README.md beside them)."""
    recorded = dict(reversed(line.split()) for line in (VENDOR / "SHA256SUMS").read_text().splitlines())
    assert set(recorded) == {"tus.min.js", "LICENSE"}
    for name, digest in recorded.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    assert "MIT License" in (VENDOR / "LICENSE").read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # stall_s well past the time a test holds an upload at the proxy: a held PATCH must stay in flight (unanswered)
    # until the test cuts it, not end itself and let the page go on through a fresh connection.
    root = tmp_path_factory.mktemp("browser-upload")
    competition = write_competition(root / "c.toml", tables={"upload": {"max_bytes": "160m", "reservation_s": 60, "stall_s": 30}})
    running = Server(competition, root / "state", workers=0).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `grader archive` writes for the example with 100 MB of random bytes beside it (gzip cannot shrink them)."""
    root = tmp_path_factory.mktemp("big-archive")
    folder = root / "submission"
    shutil.copytree(EXAMPLE, folder)
    with open(folder / "padding.bin", "wb") as out:
        for _ in range(BIG >> 20):
            out.write(os.urandom(1 << 20))
    target = root / "submission.tar.gz"
    write_archive(folder, target)
    return target


def test_a_100_mb_upload_cut_by_a_restarted_server_resumes_and_completes(server: Server, big_archive: Path) -> None:
    require_chromium()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    token = admin(server.state, "add-participant", "ada").strip()
    proxy = FaultyProxy(server.port)
    driver = new_driver()
    try:
        driver.get(f"{proxy.url}/signin")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "signin").click()
        WebDriverWait(driver, 120).until(lambda d: d.find_elements(By.ID, "upload-start"))
        proxy.hold_after(40 << 20)  # 40 MB of the upload reach the server; the rest is held
        driver.find_element(By.ID, "upload-file").send_keys(str(big_archive))
        driver.find_element(By.ID, "upload-start").click()
        assert proxy.holding.wait(300), "the upload never reached 40 MB"
        server.kill9()  # mid-PATCH
        server.start()
        proxy.released.set()  # the held connection is cut: the page finds the offset the restarted server holds
        status = driver.find_element(By.ID, "upload-status")
        WebDriverWait(driver, 300).until(lambda d: status.get_attribute("data-state") in ("done", "error"))
        assert status.get_attribute("data-state") == "done", status.text
        submission = status.get_attribute("data-submission")
        assert int(driver.find_element(By.ID, "upload-progress").get_attribute("value")) == 100
        assert proxy.forwarded < BIG + (20 << 20)  # 40 MB, then the rest: not the whole 100 MB again
        logs = [entry for entry in driver.get_log("browser") if "Content Security Policy" in entry.get("message", "")]
        assert not logs, logs
    finally:
        driver.quit()
        proxy.close()
    answer = httpx.get(f"{server.url}/api/v1/submissions", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    assert [s["id"] for s in answer] == [submission]
    stored = server.state / "uploads" / f"{submission}.tar.gz"
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == hashlib.sha256(big_archive.read_bytes()).hexdigest()


def _held_offset(server: Server, token: str, upload_url: str) -> int:
    """The bytes of the upload at ``upload_url`` the server holds, as tus's HEAD answers (with the participant's token)."""
    key = upload_url.rstrip("/").rsplit("/", 1)[1]
    answer = httpx.head(f"{server.url}/api/v1/uploads/{key}", headers={"Authorization": f"Bearer {token}", "Tus-Resumable": "1.0.0"}, timeout=30)
    assert answer.status_code == 200, answer.status_code
    return int(answer.headers["Upload-Offset"])


def test_a_reload_mid_upload_resumes_when_the_same_file_is_chosen_again_and_the_page_fits_390_px(server: Server, big_archive: Path) -> None:
    """What the page and docs/hosting.md promise: a reload mid-upload, the same file chosen again, resumes the same upload."""
    require_chromium()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.hosting.browser import sized_driver

    token = admin(server.state, "add-participant", "bea").strip()
    length = big_archive.stat().st_size
    proxy = FaultyProxy(server.port)
    driver = sized_driver(390, 844)
    try:
        sign_in(driver, proxy.url, token)
        proxy.hold_after(30 << 20)  # 30 MB of requests reach the server; the rest is held, the PATCH in flight
        driver.find_element(By.ID, "upload-file").send_keys(str(big_archive))
        driver.find_element(By.ID, "upload-start").click()
        assert proxy.holding.wait(300), "the upload never reached 30 MB"
        [upload_url] = wait_for(lambda: driver.execute_script(STORED_UPLOADS), timeout=60, what="the page's stored tus upload")
        held = wait_for(lambda: _held_offset(server, token, upload_url), timeout=60, what="the server holding part of the upload")
        assert 0 < held < length
        status = driver.find_element(By.ID, "upload-status")
        assert status.get_attribute("data-state") == "uploading", status.text
        fit = driver.execute_script(FITS)
        assert fit["scroll"] <= fit["viewport"], f"the page scrolls sideways at 390 px while uploading: {fit}"

        driver.refresh()  # the page's upload is gone with the page; its address stays in localStorage
        proxy.released.set()  # the held PATCH's connection is cut: the server keeps what arrived and frees the upload
        WebDriverWait(driver, 120).until(
            lambda d: d.execute_script("return document.readyState") == "complete" and d.find_elements(By.ID, "upload-start")
        )
        assert driver.execute_script(STORED_UPLOADS) == [upload_url]
        assert driver.find_element(By.ID, "upload-status").get_attribute("data-state") == "idle"
        proxy.plan()  # count afresh: what the page sends from here on
        driver.find_element(By.ID, "upload-file").send_keys(str(big_archive))
        driver.find_element(By.ID, "upload-start").click()
        status = driver.find_element(By.ID, "upload-status")
        WebDriverWait(driver, 300).until(lambda d: status.get_attribute("data-state") in ("done", "error"))
        assert status.get_attribute("data-state") == "done", status.text
        submission = status.get_attribute("data-submission")
        # Resumed, not restarted: the page sent at most the bytes the server did not hold before the reload.
        assert proxy.forwarded < length - held + OVERHEAD, (proxy.forwarded, length, held)
        assert driver.execute_script(STORED_UPLOADS) == []  # a completed upload is forgotten (removeFingerprintOnSuccess)
    finally:
        driver.quit()
        proxy.close()
    auth = {"Authorization": f"Bearer {token}"}
    # The upload created before the reload is the one that became the submission: its address was reused.
    became = httpx.get(f"{server.url}/api/v1/uploads/{upload_url.rstrip('/').rsplit('/', 1)[1]}", headers=auth, timeout=30)
    assert became.status_code == 200, became.text
    assert became.json()["id"] == submission
    answer = httpx.get(f"{server.url}/api/v1/submissions", headers=auth, timeout=30).json()
    assert [s["id"] for s in answer] == [submission]
    stored = server.state / "uploads" / f"{submission}.tar.gz"
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == hashlib.sha256(big_archive.read_bytes()).hexdigest()
