"""Every public route's JSON and the host's rows, byte for byte, before and after the end, against a committed snapshot.

A seeded competition (tests/hosting/leaderboard_world.py, real database, real signed reports) is read through the
real app (in-process ASGI client) and the real ``grader admin`` commands; the answers are compared with
tests/hosting/snapshots/routes.json. Only what legitimately varies from run to run is normalised: submission ids
(named after their submission), times, and the randomly generated blinding key. A refactoring of the routes,
services or message models must leave the file unchanged; to re-record it on purpose, run with
``GRADER_RECORD_SNAPSHOTS=1`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from grader import __version__
from grader.failures import FailureCode
from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.db.models import Participant
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.queue import lifecycle
from grader.hosting.services import admin as admin_service
from grader.hosting.services.competition import log_keys
from grader.hosting.states import State, Track
from grader.hosting.visibility import Part
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_envelope
from tests.hosting.leaderboard_world import make_world, seed, seed_demo
from tests.hosting.support import admin
from tests.hosting.world import World

SNAPSHOT = Path(__file__).parent / "snapshots" / "routes.json"
#: An ISO time as the server writes it (``iso``: seconds and microseconds, or a bare date-time with an offset).
TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")


def normaliser(world: World, ids: dict[str, str]) -> Callable[[str], str]:
    """What to replace in an answer: submission ids by their names, the blinding key and its id, the grader's version, times.

    The version is a fact of the release, not of the route: a version bump must not re-record every answer.
    """
    key = world.ctx.blinding_key
    assert key is not None
    logged = log_keys(world.ctx)  # entry 0's forms of the randomly generated keys, as /api/v1/competition shows them
    replacements = {
        **{sid: f"<id:{name}>" for sid, name in ids.items()},
        key.key_id: "<blinding-key-id>",
        key.secret.hex(): "<blinding-key>",
        logged["blinding_commitment"]: "<blinding-commitment>",
        logged["host_key_id"]: "<host-key-id>",
        logged["log_key_id"]: "<log-key-id>",
        f'"grader_version":"{__version__}"': '"grader_version":"<grader-version>"',
    }

    def normalise(text: str) -> str:
        for value, label in replacements.items():
            text = text.replace(value, label)
        return TIME.sub("<time>", text)

    return normalise


def sample_submission(world: World, participant: str, name: str) -> str:
    """A sample-split submission left queued (a state, track and view the seeded hidden grades do not have)."""
    ctx = world.ctx
    with ctx.db.session() as session:
        participant_id = session.query(Participant.id).filter(Participant.name == participant).scalar()
    submission = received_submission(
        submission_id=lifecycle.new_submission_id(),
        participant_id=participant_id,
        pin_id=ctx.pin_id,
        name=name,
        kind="onnx",
        track=Track.SAMPLE,
        split="dev",
        upload_path="none",
        upload_sha256="1" * 64,
        upload_bytes=1,
        content_digest="2" * 64,
        uploaded_at=utcnow(),
        attempt_limit=3,
        labels={"model": {}},
    )
    with ctx.db.session() as session:
        lifecycle.record_received(session, submission)
    assert lifecycle.enqueue(ctx.db, ctx.dispatcher, submission.id, actor="test")
    return submission.id


def answers(world: World, ids: dict[str, str], when: str) -> dict[str, dict[str, object]]:
    """Each route's status and body (as bytes decoded, not re-serialised), and the host's rows, as read ``when``."""
    client = TestClient(create_app(world.ctx))
    alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
    first = next(sid for sid, name in ids.items() if name == "alice-encoder-v1")
    queued = next(sid for sid, name in ids.items() if name == "alice-sample")
    reads = {
        "leaderboard": client.get("/api/v1/leaderboard"),
        "leaderboard public": client.get("/api/v1/leaderboard?part=public"),
        "leaderboard private": client.get("/api/v1/leaderboard?part=private"),
        "leaderboard other": client.get("/api/v1/leaderboard?part=other"),
        "leaderboard.csv": client.get("/leaderboard.csv"),
        "leaderboard.csv private": client.get("/leaderboard.csv?part=private"),
        "partition": client.get("/api/v1/partition"),
        "competition": client.get("/api/v1/competition"),
        "submissions": client.get("/api/v1/submissions", headers=alice),
        "submission scored": client.get(f"/api/v1/submissions/{first}", headers=alice),
        "submission queued": client.get(f"/api/v1/submissions/{queued}", headers=alice),
        "submission of another": client.get(f"/api/v1/submissions/{first}", headers={"Authorization": f"Bearer {world.tokens['bob']}"}),
        "logs of a hidden grade": client.get(f"/api/v1/submissions/{first}/logs", headers=alice),
        "logs of a sample run": client.get(f"/api/v1/submissions/{queued}/logs", headers=alice),
        "quota": client.get("/api/v1/quota", headers=alice),
        "finals": client.get("/api/v1/finals", headers=alice),
    }
    normalise = normaliser(world, ids)
    # Finals are listed in the order of their (random) ids: only that order is let go.
    finals = reads.pop("finals")
    found: dict[str, dict[str, object]] = {
        f"{when}: GET {name}": {"status": answer.status_code, "body": normalise(answer.content.decode("utf-8"))} for name, answer in reads.items()
    }
    shown = json.loads(normalise(finals.content.decode("utf-8")))
    found[f"{when}: GET finals"] = {"status": finals.status_code, "body": {**shown, "finals": sorted(shown["finals"])}}
    # Signed reports carry their signing time: what is recorded is whether each verifies, and how many per-query
    # values it holds per task (none in the public part's, every query's in the full split's).
    host_key = load_public_key(world.state.root / "keys" / "grader.pub")
    best = next(sid for sid, name in ids.items() if name == "alice-encoder-v2")
    for name, path in (
        ("report of a hidden grade", f"/api/v1/submissions/{first}/report"),
        ("report of a queued run", f"/api/v1/submissions/{queued}/report"),
        ("board report", f"/api/v1/leaderboard/reports/{best}"),
        ("board report of no entry", f"/api/v1/leaderboard/reports/{first}"),
    ):
        answer = client.get(path, headers=alice)
        found[f"{when}: GET {name}"] = {"status": answer.status_code}
        if answer.status_code == 200:
            report = verify_envelope(answer.content, host_key).report
            found[f"{when}: GET {name}"]["per_query"] = {
                t: len((e.get("per_query") or {}).get("values", {})) for t, e in sorted(report["tasks"].items())
            }
    state = str(world.state.root)
    for command in (["list", "--json"], ["list"], ["submissions", "--json"], ["submissions"], ["workers", "--json"], ["workers"], ["history", first]):
        found[f"{when}: grader admin {command[0]}{' --json' if '--json' in command else ''}"] = {
            "output": normalise(admin(world.state.root, *command))
        }
    assert state not in json.dumps(found)  # nothing of this machine's folders in a snapshot
    return found


def ladder_answers(world: World, ids: dict[str, str]) -> dict[str, dict[str, object]]:
    """The Ladder's board and a participant's view of a released score."""
    client = TestClient(create_app(world.ctx))
    alice = {"Authorization": f"Bearer {world.tokens['alice']}"}
    normalise = normaliser(world, ids)
    reads = {"leaderboard": client.get("/api/v1/leaderboard"), "submissions": client.get("/api/v1/submissions", headers=alice)}
    return {
        f"ladder: GET {name}": {"status": answer.status_code, "body": normalise(answer.content.decode("utf-8"))} for name, answer in reads.items()
    }


def test_every_route_answers_as_recorded_before_and_after_the_end(tmp_path: Path) -> None:
    (tmp_path / "board").mkdir()
    (tmp_path / "ladder").mkdir()
    world = make_world(tmp_path / "board", None)
    ladder = make_world(tmp_path / "ladder", None, ladder_step=0.01)
    try:
        seed_demo(world)
        ids = {s.id: s.name for s in world.submissions}
        sample = sample_submission(world, "alice", "alice-sample")
        ids[sample] = "alice-sample"
        found = answers(world, ids, "before the end")
        admin_service.end_now(world.ctx.db)
        found.update(answers(world, ids, "after the end"))
        for level, rng_seed in ((0.5, 1), (0.6, 2)):
            seed(ladder, "alice", f"ladder-{rng_seed}", level, rng_seed=rng_seed, uploaded_ago_s=100 - rng_seed)
        found.update(ladder_answers(ladder, {s.id: s.name for s in ladder.submissions}))
    finally:
        world.ctx.db.dispose()
        ladder.ctx.db.dispose()
    if os.environ.get("GRADER_RECORD_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        pytest.skip("recorded tests/hosting/snapshots/routes.json: review its diff")
    recorded = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert list(found) == list(recorded)
    for name, answer in found.items():
        assert answer == recorded[name], name


def test_openapi_names_the_allowed_values_of_tracks_states_failure_codes_and_parts(tmp_path: Path) -> None:
    world = make_world(tmp_path, None)
    try:
        schema = TestClient(create_app(world.ctx)).get("/openapi.json").json()
    finally:
        world.ctx.db.dispose()
    schemas = schema["components"]["schemas"]

    def allowed(model: str, field: str) -> list[str]:
        found = schemas[model]["properties"][field]
        options = found.get("anyOf", [found])
        refs = [option["$ref"].rsplit("/", 1)[-1] for option in options if "$ref" in option]
        assert len(refs) == 1, (model, field, found)
        return list(schemas[refs[0]]["enum"])

    assert allowed("SubmissionView", "track") == [t.value for t in Track] == allowed("QuotaView", "track") == allowed("Job", "track")
    assert allowed("SubmissionView", "state") == [s.value for s in State]
    assert allowed("SubmissionView", "failure_code") == [c.value for c in FailureCode]
    assert allowed("Boards", "part") == [p.value for p in Part] == ["public", "private", "full"]
    assert schema["paths"]["/api/v1/quota"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Quota"
    }
