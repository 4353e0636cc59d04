"""docs/transparency.md, "What each commitment commits": the recipe in the doc opens every kind of commitment a real log holds.

The recipe is the doc's own ``python`` block, run here with an import hook that admits nothing but the standard library
modules it names (so it cannot lean on ``grader``); its worked example is the doc's own numbers, recomputed by the
recipe and by the project. A served competition (tests/hosting/leaderboard_world.py) then writes every kind of entry
that commits (a sign-up's registration, a receipt of a real upload, reports, an outcome, a rejudge, a cancellation, finals) and the reveal, and
the recipe opens each from the served entries and the revealed keys alone. ``/api/v1/competition`` shows entry 0's
commitments and key ids in entry 0's own forms before the reveal.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import json
import re
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from grader.hosting.api.app import create_app
from grader.hosting.config import TeamPolicy
from grader.hosting.db.models import Participant
from grader.hosting.directory.people import People, open_people
from grader.hosting.queue import lifecycle
from grader.hosting.services import signup, teams
from grader.hosting.transparency.host_log import identifier_key
from grader.transparency.commitments import commit, entry_key, key_commitment
from tests.hosting.leaderboard_world import make_world, seed
from tests.hosting.support import REPO, admin
from tests.hosting.transparency_support import served_entries
from tests.hosting.world import expire_lease

DOC = REPO / "docs" / "transparency.md"
SECTION = "### What each commitment commits"
#: The only modules the recipe may import: what the doc promises a reader needs.
STDLIB = frozenset({"base64", "hashlib", "hmac", "json"})
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
#: Entry 0's fields that /api/v1/competition's `log` repeats.
ENTRY_ZERO_KEYS = ("origin", "partition_commitment", "identifier_commitment", "blinding_commitment", "host_key_id", "log_key_id")
COMMITTING_KINDS = {"registration", "team", "receipt", "report", "outcome", "cancellation", "rejudge", "finals"}


def _blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the section (language, body), in order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n### ", len(SECTION))]
    return re.findall(r"^```(\w*)\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)


def recipe() -> dict[str, Any]:
    """The doc's ``python`` block, executed with an ``__import__`` that refuses anything but :data:`STDLIB`."""
    (code,) = [body for language, body in _blocks() if language == "python"]

    def only_stdlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in STDLIB:
            raise ImportError(f"the doc's recipe imports {name!r}: a reader has only the standard library")
        return builtins.__import__(name, *args, **kwargs)

    namespace: dict[str, Any] = {"__builtins__": {**vars(builtins), "__import__": only_stdlib}, "__name__": "recipe"}
    exec(compile(code, f"{DOC}:recipe", "exec"), namespace)
    return namespace


def worked_example() -> dict[str, str]:
    """The doc's worked example: ``name  value`` lines."""
    (body,) = [body for language, body in _blocks() if language == "" and "entry key" in body and "partition secret" in body]
    return {name.strip(): value for name, value in (line.rsplit(None, 1) for line in body.splitlines() if line.strip())}


def test_the_recipe_imports_only_the_standard_library() -> None:
    (code,) = [body for language, body in _blocks() if language == "python"]
    imported = {alias.name for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {str(node.module) for node in ast.walk(ast.parse(code)) if isinstance(node, ast.ImportFrom)}
    assert imported <= STDLIB, imported
    with pytest.raises(ImportError, match="a reader has only the standard library"):
        exec("import grader", {"__builtins__": {**vars(builtins), "__import__": recipe()["__builtins__"]["__import__"]}})


def test_the_worked_example_is_what_the_recipe_and_the_project_compute() -> None:
    r, example = recipe(), worked_example()
    secret = bytes.fromhex(example["partition secret"])
    ident = r["identifier_key"](secret)
    assert ident == identifier_key(secret) and ident.hex() == example["identifier key"]
    assert r["sha256_hex"](secret) == example["partition_commitment"] == key_commitment(secret)
    assert r["sha256_hex"](ident) == example["identifier_commitment"] == key_commitment(ident)
    key = r["entry_key"](ident, example["salt"])
    assert key == entry_key(ident, bytes.fromhex(example["salt"])) and key.hex() == example["entry key"]
    upload = hashlib.sha256(b"example archive").hexdigest()
    assert upload == example["upload sha256"]
    for field, value in (("participant", "alice"), ("submission", "s0123456789abcdef"), ("upload", upload), ("final 0", "s0123456789abcdef")):
        assert r["commit"](key, field, value) == commit(key, field, value) == example[field], field


def _archive() -> bytes:
    """The example submission as `grader submit` sends it: a gzipped tar of its files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("model.onnx", "tokenizer.json", "submission.json"):
            tar.add(EXAMPLE / name, arcname=name)
    return buffer.getvalue()


def _end_in_error(world: Any, submission_id: str) -> None:
    """Every attempt's lease lapses (its worker lost): at the attempt limit the reaper ends it `error` and logs the outcome."""
    for _ in range(10):
        claimed = lifecycle.claim(world.ctx.db, world.workers[0], 60)
        if claimed is None:
            return
        assert claimed.submission_id == submission_id
        expire_lease(world, submission_id)
        lifecycle.reap(world.ctx.db, world.ctx.dispatcher, redispatch_s=3600, host_log=world.ctx.log)
    raise AssertionError("never ended")


@pytest.mark.slow
def test_the_recipe_opens_every_kind_of_commitment_of_a_real_log(tmp_path: Path) -> None:
    r = recipe()
    world = make_world(tmp_path, None)

    def bearer(who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {world.tokens[who]}"}

    try:
        client = TestClient(create_app(world.ctx))
        before = client.get("/api/v1/competition").json()["log"]
        a1, a2 = seed(world, "alice", "a1", 0.5, rng_seed=1), seed(world, "alice", "a2", 0.6, rng_seed=2)
        b1 = seed(world, "bob", "b1", 0.4, rng_seed=3)
        body = _archive()
        answer = client.post("/api/v1/submissions", content=body, headers={"Authorization": f"Bearer {world.tokens['bob']}"})
        assert answer.status_code in (200, 201, 202), answer.text
        upload = answer.json()
        _end_in_error(world, upload["id"])
        admin(world.state.root, "rejudge", b1.id, database=world.database)
        admin(world.state.root, "cancel", b1.id, database=world.database)
        chosen = client.put("/api/v1/finals", json={"submissions": [a2.id, a1.id]}, headers={"Authorization": f"Bearer {world.tokens['alice']}"})
        assert chosen.status_code == 200, chosen.text
        # A sign-up (a server of many competitions' people, here beside the world's competition) logs a registration.
        world.ctx.people = people = People(open_people(tmp_path, None))
        world.ctx.competition = replace(world.ctx.competition, registration="open", rules="Be fair.")
        signup.sign_up(world.ctx, "quentin", "", signup.rules_sha256("Be fair."))
        # Team changes (the competition given a [teams] table): carol creates a team, mallory joins it and leaves.
        world.ctx.competition = replace(world.ctx.competition, teams=TeamPolicy())
        with world.ctx.db.session() as session:
            ids = {who: session.scalar(select(Participant.id).where(Participant.name == who)) for who in ("carol", "mallory")}
        # carol's own row gets a final choice before the team; then the team's row, a submission mallory made for it,
        # chosen by carol: two rows, two finals entries (the team's names the team), never one mixing both.
        c0 = seed(world, "carol", "c0", 0.45, rng_seed=4)
        assert client.put("/api/v1/finals", json={"submissions": [c0.id]}, headers=bearer("carol")).status_code == 200
        teams.create(world.ctx, ids["carol"], "Lighthouse")
        teams.join(world.ctx, ids["mallory"], teams.invite(world.ctx, ids["carol"])[0])
        m1 = seed(world, "mallory", "m1", 0.55, rng_seed=5)
        assert client.put("/api/v1/finals", json={"submissions": [m1.id]}, headers=bearer("carol")).status_code == 200
        teams.leave(world.ctx, ids["mallory"])
        people.db.dispose()
        # Before the reveal: entry 0 as served, and /api/v1/competition, name the same commitments in the same forms.
        served = [json.loads(entry) for entry in served_entries(client, world)]
        assert {name: served[0][name] for name in ENTRY_ZERO_KEYS} == before
        admin(world.state.root, "end", "--yes", database=world.database)
        admin(world.state.root, "log-reveal", "--competition", str(world.ctx.competition.path), database=world.database)
        entries = [json.loads(entry) for entry in served_entries(client, world)]
        host_pem, log_vkey = client.get("/host-key.pub").content, client.get("/log/key").text
    finally:
        world.ctx.db.dispose()

    first, (reveal,) = entries[0], [entry for entry in entries if entry["kind"] == "reveal"]
    # Entry 0: each key opens its commitment; the identifier key is the partition secret's; public keys by their raw bytes.
    for commitment, key in (
        ("partition_commitment", "partition_secret"),
        ("identifier_commitment", "identifier_key"),
        ("blinding_commitment", "blinding_key"),
    ):
        assert r["key_opens"](first[commitment], reveal[key]), commitment
    ident = r["identifier_key"](bytes.fromhex(reveal["partition_secret"]))
    assert ident.hex() == reveal["identifier_key"]
    assert first["host_key_id"] == r["key_id"](r["raw_key_of_pem"](host_pem))
    assert first["log_key_id"] == r["key_id"](r["raw_key_of_vkey"](log_vkey))
    # Every entry that names a participant opens, under its own entry key, to exactly the submission and participant it concerns.
    owners = {a1.id: "alice", a2.id: "alice", b1.id: "bob", upload["id"]: "bob", c0.id: "carol", m1.id: "mallory"}
    opened: dict[str, int] = {}
    rows: list[str] = []
    for entry in entries:
        if entry["kind"] not in COMMITTING_KINDS:
            continue
        key = r["entry_key"](ident, entry["salt"])
        if entry["kind"] == "registration":
            assert r["opens"](entry, key, "participant", "quentin") and not r["opens"](entry, key, "participant", "alice")
            assert entry["rules_sha256"] == hashlib.sha256(b"Be fair.").hexdigest()
        elif entry["kind"] == "team":
            assert r["opens"](entry, key, "team", "Lighthouse") and not r["opens"](entry, key, "team", "lab-a")
            assert any(r["opens"](entry, key, "participant", who) for who in ("carol", "mallory"))
            assert entry["action"] in ("create", "join", "leave")
        elif entry["kind"] == "finals":
            if "team" not in entry and r["opens"](entry, key, "participant", "alice"):
                assert r["finals_open"](entry, key, [a1.id, a2.id]) and not r["finals_open"](entry, key, [a1.id])
                rows.append("alice")
            elif "team" not in entry:  # carol's own row: her choice from before the team only
                assert r["opens"](entry, key, "participant", "carol") and r["finals_open"](entry, key, [c0.id])
                rows.append("carol")
            else:  # the team's row: the team and the member who chose, the submission another member made
                assert r["opens"](entry, key, "team", "Lighthouse") and r["opens"](entry, key, "participant", "carol")
                assert r["finals_open"](entry, key, [m1.id]) and not r["finals_open"](entry, key, [c0.id, m1.id])
                rows.append("Lighthouse")
        else:
            found = [sid for sid in owners if r["opens"](entry, key, "submission", sid)]
            assert len(found) == 1, entry
            assert r["opens"](entry, key, "participant", owners[found[0]]) and not r["opens"](entry, key, "participant", "quentin")
            if found[0] == upload["id"] and entry["kind"] == "receipt":  # the real upload: its digest is of the bytes sent
                assert r["opens"](entry, key, "upload", hashlib.sha256(body).hexdigest()) and upload["sha256"] == hashlib.sha256(body).hexdigest()
                assert key.hex() == upload["receipt"]["entry_key"]
                opened["upload"] = 1
        opened[entry["kind"]] = opened.get(entry["kind"], 0) + 1
    assert set(opened) == COMMITTING_KINDS | {"upload"}, opened
    assert sorted(rows) == ["Lighthouse", "alice", "carol"]  # one finals entry per board row that chose
