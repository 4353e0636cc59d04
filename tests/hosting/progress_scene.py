"""A real ``grader serve`` with a grade running and one waiting: what the progress tests and the docs' screenshots show.

``python -m tests.hosting.progress_scene docs/progress`` writes ``docs/progress-1280.png`` and ``docs/progress-390.png``:
the participant page of that scene in headless Chromium, at 1280 pixels and on a 390-pixel phone.

The worker speaks the worker protocol by hand over real sockets (as a remote worker does): it states its fingerprint,
claims the first grade and reports progress in its heartbeats; no grade is computed.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path
from grader.hosting.participant.client import HostingClient
from tests.hosting.support import REPO, Server, admin, claim_body, stated_fingerprint, worker_headers, write_competition

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


@dataclass
class Scene:
    """The server, the participant's token and their two grades (the first one is claimed by :meth:`claim`)."""

    server: Server
    participant: str
    first: str
    second: str
    worker: str = ""
    tasks: tuple[str, ...] = ()

    def claim(self, key_dir: Path) -> dict[str, Any]:
        """A remote worker registers, states its fingerprint and claims: the first grade runs."""
        ensure_worker_key(key_dir)
        self.worker = admin(self.server.state, "add-worker", "w1", "--public-key", str(worker_public_key_path(key_dir))).strip()
        fingerprint = stated_fingerprint(self.server.url, self.worker, ensure_worker_key(key_dir))
        answer = httpx.post(
            f"{self.server.url}/api/v1/worker/claim", json=claim_body(fingerprint, 5), headers=worker_headers(self.worker), timeout=60
        )
        job: dict[str, Any] = answer.json()
        assert job["submission_id"] == self.first, job
        self.tasks = tuple(job["tasks"])
        return job

    def report(self, progress: list[dict[str, Any]]) -> httpx.Response:
        """A heartbeat of the first grade's attempt carrying ``progress``."""
        url = f"{self.server.url}/api/v1/worker/jobs/{self.first}/heartbeat"
        return httpx.post(url, json={"attempt": 1, "progress": progress}, headers=worker_headers(self.worker), timeout=60)


def start_scene(tmp: Path) -> Scene:
    """A started server without local workers, a participant and two queued grades of theirs."""
    server = Server(write_competition(tmp / "c.toml"), tmp / "state", workers=0).start()
    participant = admin(server.state, "add-participant", "kim").strip()
    client = HostingClient(server.url, participant)
    return Scene(server, participant, client.submit(EXAMPLE)["id"], client.submit(EXAMPLE)["id"])


def sign_in(driver: Any, url: str, token: str) -> None:
    """Sign in on the page with ``token`` and wait for the participant's page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/signin")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin").click()
    WebDriverWait(driver, 120).until(lambda d: d.current_url.endswith("/me") and d.execute_script("return document.readyState") == "complete")


def encoding(scene: Scene) -> list[dict[str, Any]]:
    """The progress the screenshots show: the first task searching, the second one encoding, the last one waiting."""
    first, second, *rest = scene.tasks
    return [
        {"task": first, "phase": "searching", "documents": 10},
        {"task": second, "phase": "encoding", "documents": 10, "encoded": 6},
        *({"task": task, "phase": "waiting"} for task in rest),
    ]


def write_screenshots(prefix: Path, tmp: Path) -> None:
    """``PREFIX-1280.png`` and ``PREFIX-390.png``: the participant page while one grade runs and one waits."""
    from tests.hosting.browser import full_page_screenshot, sized_driver

    scene = start_scene(tmp)
    try:
        scene.claim(tmp / "key")
        for width in (1280, 390):
            driver = sized_driver(width, 844 if width < 500 else 900)
            try:
                assert scene.report(encoding(scene)).status_code == 200  # a heartbeat: the lease is renewed, the grade runs on
                sign_in(driver, scene.server.url, scene.participant)
                full_page_screenshot(driver, f"{prefix}-{width}.png", width)
            finally:
                driver.quit()
    finally:
        scene.server.stop()


if __name__ == "__main__":
    write_screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/progress").resolve(), Path(tempfile.mkdtemp()))
