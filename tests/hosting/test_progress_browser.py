"""The participant page follows its grades live in a real headless Chromium, over a real ``grader serve``.

Without reloading, the page shows a grade waiting (and why), then running with each task's progress as the worker
reports it, then ended; it fits a 1280-pixel window and a 390-pixel phone without scrolling sideways, and one
participant's watches are bounded (the fifth at once is refused, 429).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from grader.hosting.services import progress
from tests.hosting.browser import page_wait, require_chromium, sized_driver
from tests.hosting.progress_scene import encoding, sign_in, start_scene
from tests.hosting.support import admin, wait_for

FITS = """
const page = document.documentElement;
return {scroll: page.scrollWidth, viewport: page.clientWidth};
"""


def _cell(driver: Any, submission: str, name: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, f'tr[data-submission="{submission}"] td.{name}').text)


def _until(driver: Any, what: str, check: Any) -> None:
    page_wait(driver, 90, poll_frequency=0.2).until(lambda d: check(d), message=what)


@pytest.mark.slow
def test_the_page_follows_a_grade_live_and_fits(tmp_path: Path) -> None:
    require_chromium()
    scene = start_scene(tmp_path)
    driver = sized_driver(1280)
    try:
        sign_in(driver, scene.server.url, scene.participant)
        assert progress.NO_WORKER in _cell(driver, scene.first, "progress")  # drawn by the server: no script needed for it
        driver.execute_script("window.stillThisPage = true")
        scene.claim(tmp_path / "key")
        _until(driver, "the grade runs", lambda d: _cell(d, scene.first, "state") == "running")
        _until(driver, "the second is next", lambda d: "position 1 in the queue (0 ahead, 1 running)" in _cell(d, scene.second, "progress"))
        assert scene.report(encoding(scene)).status_code == 200
        first_task, second_task = scene.tasks[:2]
        _until(driver, "the progress lines", lambda d: f"{second_task}: encoding 6 of 10 documents" in _cell(d, scene.first, "progress"))
        assert f"{first_task}: searching" in _cell(driver, scene.first, "progress")
        assert driver.execute_script("return window.stillThisPage") is True  # redrawn in place, never reloaded
        found = driver.execute_script(FITS)
        assert found["scroll"] <= found["viewport"], found
        # one participant's watches are bounded: the page's own and three more wait, a fifth is refused at once
        cookies = {c["name"]: c["value"] for c in driver.get_cookies()}
        watch = f"{scene.server.url}/me/progress"
        stop = threading.Event()
        last: list[int] = []

        def held() -> None:
            # Hold a watch until told to stop, asking again whenever it answers: a grade's rows may change on their own
            # (an estimate moves to the next minute, a worker's presence lapses), and each change answers every watch.
            seen = ""
            while True:
                answer = httpx.get(watch, params={"seen": seen}, cookies=cookies, timeout=90)
                if answer.status_code == 200:
                    seen = answer.json()["tag"]
                    if stop.is_set():
                        last.append(answer.status_code)
                        return
                elif answer.status_code == 429:  # the probe below held the fourth place a moment: ask again
                    time.sleep(0.2)
                else:
                    last.append(answer.status_code)
                    return

        threads = [threading.Thread(target=held) for _ in range(3)]
        for thread in threads:
            thread.start()

        def fifth_refused() -> bool:
            answer = httpx.get(watch, params={"seen": "0" * 32}, cookies=cookies, timeout=60)  # answered at once when admitted
            return answer.status_code == 429 and "too many windows" in answer.text

        wait_for(fifth_refused, 120, what="a fifth watch refused")
        stop.set()
        admin(scene.server.state, "cancel", scene.first)  # a change: every watch answers
        for thread in threads:
            thread.join(90)
        assert not any(thread.is_alive() for thread in threads)
        assert last == [200, 200, 200]
        _until(driver, "the cancel shows", lambda d: _cell(d, scene.first, "state") == "cancelled" and _cell(d, scene.first, "progress") == "")
        phone = sized_driver(390, 844)
        try:
            sign_in(phone, scene.server.url, scene.participant)
            found = phone.execute_script(FITS)
            assert found["scroll"] <= found["viewport"], found
        finally:
            phone.quit()
        admin(scene.server.state, "cancel", scene.second)
        _until(driver, "the page stops asking", lambda d: d.find_element("tag name", "body").get_attribute("data-progress") == "done")
    finally:
        driver.quit()
        scene.server.stop()
