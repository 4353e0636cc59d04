"""Intake attacks (hostile archives, shown text) replayed against a real `grader serve` on real sockets.

One server (SQLite, one local worker) serves every test of this file; each attack uses its own
participant, so their quotas and listings do not interfere.

Before / after:
* hostile archives — a Docker upload whose image.tar names a missing layer, a truncated layer or a non-JSON
  config: was 201, then INFRA three times, ``error``, never charged; now 422 and nothing stored.
  An image that passes intake but that the engine refuses: was INFRA/``error``, free; now
  ``failed`` with IMAGE_INVALID after one attempt, charged.
* shown text and unbounded input — a member 2,000 folders deep: was 500 (RecursionError); now 422. A name with U+202E or
  11,000 training datasets: was 201; now 422 naming the field. The state folder: was 0644 files;
  now 0700 folders and 0600 files, the database's -wal/-shm included, after a real grade.
"""

from __future__ import annotations

import json
import os
import stat

import httpx
import pytest

from grader.hosting.participant.client import HostingClient
from tests.hosting.attack_support import BODY, BROKEN_IMAGES, post, stored_uploads, submissions_of, token_for, upload_of
from tests.hosting.support import Server, admin, write_competition
from tests.image_tars import engine_refused_tar, image_tar

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from tests.sandbox_support import require_docker

    require_docker()
    root = tmp_path_factory.mktemp("attacks-intake")
    server = Server(write_competition(root / "c.toml"), root / "state", workers=1).start()
    yield server
    server.stop()


@pytest.mark.parametrize("attack", list(BROKEN_IMAGES))
def test_a_docker_tar_with_missing_or_broken_parts_is_refused_422_and_nothing_is_stored(served: Server, attack: str) -> None:
    who = "item2-" + attack.replace(" ", "-").lower()
    token = token_for(served, who)
    before = stored_uploads(served)
    image, words = BROKEN_IMAGES[attack]
    response = post(served, token, upload_of(image=image))
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"] and "image.tar" in response.json()["detail"]
    assert stored_uploads(served) == before
    assert submissions_of(served, who) == []
    quota = httpx.get(f"{served.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()["hidden"]
    assert quota["used_24h"] == 0


def test_an_image_the_engine_refuses_after_intake_fails_charged_with_image_invalid(served: Server) -> None:
    token = token_for(served, "item2-engine-refused")
    response = post(served, token, upload_of(image=engine_refused_tar()))
    assert response.status_code == 201, response.text
    view = HostingClient(served.url, token).wait(response.json()["id"], timeout_s=300)
    assert (view["state"], view["failure_code"]) == ("failed", "IMAGE_INVALID"), view
    (row,) = submissions_of(served, "item2-engine-refused")
    assert row["attempt"] == 1  # not retried as the platform's fault
    quota = httpx.get(f"{served.url}/api/v1/quota", headers={"Authorization": f"Bearer {token}"}).json()["hidden"]
    assert quota["used_24h"] == 1  # charged
    history = admin(served.state, "history", row["id"])
    assert "the container engine refused the image" in history


def test_a_member_nested_2000_folders_deep_is_refused_422_not_500(served: Server) -> None:
    token = token_for(served, "item7-deep")
    deep = "/".join(["d"] * 2000) + "/x"
    response = post(served, token, upload_of(image=image_tar([BODY]), members=[(deep, b"x")]))
    assert response.status_code == 422, response.text
    assert "over the limit of 1024" in response.json()["detail"]
    deep = "/".join(["d"] * 40) + "/x"
    response = post(served, token, upload_of(image=image_tar([BODY]), members=[(deep, b"x")]))
    assert response.status_code == 422 and "levels deep" in response.json()["detail"], response.text


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        ({"name": "fine\u202eexe.gnp"}, "/name"),
        ({"name": "zero\u200bwidth"}, "/name"),
        ({"name": "c1\x9bcsi"}, "/name"),
        ({"training": {"setting": "fine-tuned", "datasets": ["ok", "evil\u202e"]}}, "/training/datasets/1"),
        ({"training": {"setting": "fine-tuned", "datasets": [f"set-{n}" for n in range(11_000)]}}, "/training/datasets"),
    ],
)
def test_names_and_datasets_that_would_fool_a_terminal_or_swell_the_board_are_refused(served: Server, manifest: dict, field: str) -> None:
    token = token_for(served, f"item7-text-{abs(hash(field + json.dumps(manifest)[:40])) % 10**8}")
    response = post(served, token, upload_of(manifest, image=image_tar([BODY])))
    assert response.status_code == 422, response.text
    assert f"{field}: " in response.json()["detail"]


def test_a_loop_of_12_engine_refused_uploads_stays_inside_the_quota(served: Server) -> None:
    """Each engine-refused image is charged, so the daily quota (5 here) ends the loop; nothing more is stored."""
    who = "item2-loop"
    token = token_for(served, who)
    client = HostingClient(served.url, token)
    codes = []
    for _ in range(12):
        response = post(served, token, upload_of(image=engine_refused_tar()))
        codes.append(response.status_code)
        if response.status_code == 201:
            assert client.wait(response.json()["id"], timeout_s=300)["failure_code"] == "IMAGE_INVALID"
    assert codes == [201] * 5 + [429] * 7
    rows = submissions_of(served, who)
    assert len(rows) == 5 and {row["state"] for row in rows} == {"failed"}


def test_the_state_folder_is_private_after_a_real_grade(served: Server) -> None:
    # Runs after the graded test above (file order): uploads, results, logs, the database and its WAL exist.
    assert list((served.state / "results").iterdir()), "no result was written: run the whole file"
    loose = []
    seen = set()
    for folder, _dirs, files in os.walk(served.state):
        for path, wanted in [(folder, 0o700)] + [(os.path.join(folder, f), 0o600) for f in files]:
            seen.add(os.path.basename(path))
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode != wanted:
                loose.append(f"{os.path.relpath(path, served.state)} {mode:04o}")
    assert loose == []
    assert {"grader.sqlite3", "grader.key", "grader.pub", "partition.secret"} <= seen, sorted(seen)
    assert any(name.endswith("-wal") for name in seen), sorted(seen)
    assert stat.S_IMODE(served.state.stat().st_mode) == 0o700
