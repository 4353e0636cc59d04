"""Phases (docs/hosting.md#phases): a competition as an ordered list of phases, each its own window, kinds, quotas,
Ladder setting and board.

Against a real ``grader serve`` (no grade needed): an upload goes to the phase open now, with that phase's kinds and
quotas (counted within it); ``grader submit --phase`` refuses, before uploading, a phase that has not opened or has
closed, and the server refuses it too, before the body; each phase has its own board; ``GET /api/v1/competition``
publishes the phases and the open one, which is what ``grader check --competition URL`` reads. The file's rules: the
unit tests at the end, every error naming its key.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import rfc8785
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.hosting.api.app import create_app
from grader.hosting.clock import utcnow
from grader.hosting.config import REGRADE_BEST, REGRADE_CHOSEN, Phase, load_competition
from grader.hosting.db.models import FinalChoice, LogEntry, Submission
from grader.hosting.errors import CompetitionFileError, NotPublished, RefusedSubmission
from grader.hosting.intake.quotas import quota_status
from grader.hosting.intake.refusals import phase_refusal
from grader.hosting.intake.submissions import public_view
from grader.hosting.leaderboard.service import board_json, report_envelope
from grader.hosting.participant.client import HostingClient
from grader.hosting.participant.competition_rules import ParticipantRules
from grader.hosting.server import Reaper, check_phase_splits
from grader.hosting.services import admin as admin_service
from grader.hosting.services.phase_close import log_phase_boards_when_due, log_phase_ends_if_due
from grader.hosting.services.phase_regrade import regrade_opened_phases
from grader.hosting.states import Track
from grader.reports.verify import verify_envelope
from grader.transparency import entries
from tests.hosting.leaderboard_world import XSS_NAME, seed
from tests.hosting.support import REPO, Server, admin, grader_cli, log_audit, served_entries, wait_for, write_competition
from tests.hosting.world import World, new_submission, state_of

ONNX = REPO / "submissions_example" / "onnx-lsa"
PHASES = [
    # closed: its board is final
    {"name": "warm-up", "start": "2020-01-01T00:00:00Z", "end": "2021-01-01T00:00:00Z"},
    # open now: one hidden submission a day, ONNX only, graded on the public dev split
    {"name": "main", "start": "2021-01-01T00:00:00Z", "end": "2098-01-01T00:00:00Z", "split": "dev", "kinds": ["onnx"], "quotas": {"per_day": 1}},
    # not open yet: nothing is accepted for it
    {"name": "final", "start": "2098-01-01T00:00:00Z", "end": "2099-01-01T00:00:00Z", "leaderboard": {"ladder": True}},
]


def _phases_toml(phases: list[dict[str, object]]) -> str:
    lines = []
    for phase in phases:
        lines.append("[[phases]]")
        tables = {key: value for key, value in phase.items() if isinstance(value, dict)}
        for key, value in phase.items():
            if key in ("start", "end"):
                lines.append(f"{key} = {value}")
            elif isinstance(value, list):
                lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
            elif not isinstance(value, dict):
                lines.append(f'{key} = "{value}"')
        for name, table in tables.items():
            lines.append(f"[phases.{name}]")
            lines.extend(f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def _file(path: Path, phases: list[dict[str, object]] = PHASES) -> Path:
    file = write_competition(path, name="phased", start=None, end=None)
    file.write_text(file.read_text(encoding="utf-8") + _phases_toml(phases), encoding="utf-8")
    return file


@pytest.mark.slow
def test_uploads_go_to_the_open_phase_under_its_rules_and_a_named_phase_must_be_open(tmp_path: Path) -> None:
    server = Server(_file(tmp_path / "c.toml"), tmp_path / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "kim").strip()
        client = HostingClient(server.url, token)
        info = client.competition()
        assert info["phase"] == "main" and [p["name"] for p in info["phases"]] == ["warm-up", "main", "final"]
        assert info["kinds"] == ["onnx"] and info["quotas"]["per_day"] == 1  # the open phase's rules
        assert [p["finals"] for p in info["phases"]] == [False, False, True]
        rules = ParticipantRules.from_api(info, server.url)  # what `grader check --competition URL` checks against
        assert rules.kinds == ("onnx",) and [p.name for p in rules.phases] == ["warm-up", "main", "final"]
        # a named phase that is not open: refused before uploading, in the server's words, and by the server too
        env = {"GRADER_TOKEN": token, "GRADER_SERVER": server.url}
        for named, said in (
            ("final", "phase 'final' opens at 2098-01-01T00:00:00Z"),
            ("warm-up", "phase 'warm-up' closed at 2021-01-01T00:00:00Z; its board is final"),
        ):
            refused = grader_cli("submit", str(ONNX), "--phase", named, env=env, timeout=120)
            assert refused.returncode == 4 and said in refused.stderr and "refused here before uploading" in refused.stderr, refused.stderr
            raw = httpx.post(
                f"{server.url}/api/v1/submissions",
                params={"phase": named},
                headers={"Authorization": f"Bearer {token}", "Content-Length": "1"},
                content=b"x",
            )
            assert raw.status_code == 403 and said in raw.text
        # the open phase, named or not: accepted; its quota (1 a day, not the file's 5) counts its submissions only
        sid = client.submit(ONNX, phase="main")["id"]
        assert client.status(sid)["split"] == "dev"  # the phase's own split
        with pytest.raises(RefusedSubmission) as over:
            client.submit(ONNX)
        assert over.value.status == 429
        quota = client.quota()
        assert quota["hidden"]["used_24h"] == 1 and quota["hidden"]["per_day"] == 1, quota
        # each phase its own board; the default is the open phase's; a phase the competition does not have: 404
        assert httpx.get(f"{server.url}/api/v1/leaderboard", params={"phase": "warm-up"}).json()["boards"] == []
        assert httpx.get(f"{server.url}/api/v1/leaderboard", params={"phase": "nope"}).status_code == 404
        page = httpx.get(f"{server.url}/").text
        assert "public leaderboard, phase main" in page and 'href="/?phase=final"' in page
        assert [p["split"] for p in info["phases"]] == ["test", "dev", "test"]
    finally:
        server.stop()


def _kinds(server: Server) -> list[str]:
    return [entries.decode_entry(entry)["kind"] for entry in served_entries(server)]


@pytest.mark.slow
def test_a_closed_phase_is_logged_its_boards_wait_for_its_grades_and_it_stays_closed(tmp_path: Path) -> None:
    """The phase's end and final boards in the log, by the real server's reaper; the audit accepts them; a file that
    reopens the phase is refused at start, as a moved competition end is."""
    later = [
        {"name": "one", "start": "2020-01-01T00:00:00Z", "end": "2098-01-01T00:00:00Z"},
        {"name": "two", "start": "2098-01-01T00:00:00Z", "end": "2099-01-01T00:00:00Z"},
    ]
    file = _file(tmp_path / "c.toml", later)
    server = Server(file, tmp_path / "state", workers=0).start()
    try:
        token = admin(server.state, "add-participant", "kim").strip()
        held = HostingClient(server.url, token).submit(ONNX)["id"]  # phase one's, never graded here (no worker)
        server.stop()
        closing = (utcnow() + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")  # after the upload's receipt
        _file(file, [{**later[0], "end": closing}, {**later[1], "start": closing}])
        server.start()
        wait_for(lambda: "phase_end" in _kinds(server), what="phase one's end logged by the reaper")
        assert "phase_board" not in _kinds(server) and "end" not in _kinds(server)  # its upload is in flight: its board is not final
        admin(server.state, "cancel", held)
        wait_for(lambda: "phase_board" in _kinds(server), what="phase one's final boards logged once nothing of it is in flight")
        closed = [entries.decode_entry(entry) for entry in served_entries(server) if entries.decode_entry(entry)["kind"] == "phase_end"]
        assert [(e["phase"], e["time"]) for e in closed] == [("one", closing)]
        audit = log_audit(server, httpx.get(f"{server.url}/log/key").text.strip(), tmp_path / "auditor")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        server.stop()
        # phase one reopened (its end moved later): refused at start, in one line naming the logged end
        _file(file, later)
        refused = server.start(expect_ok=False)
        assert refused.process is not None and refused.process.wait(120) != 0
        said = server.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1]
        assert said.startswith(f"error: the log holds the end of phase 'one' at {closing} (entry "), said
        assert "but the competition file now says it ends at 2098-01-01T00:00:00Z: a closed phase stays closed" in said, said
    finally:
        server.stop()


# -- the file's rules (no server) ----------------------------------------------------------------------------------------


def test_phases_map_onto_the_competition_and_an_old_file_is_one_window(tmp_path: Path) -> None:
    competition = load_competition(_file(tmp_path / "c.toml"))
    assert competition.start == datetime(2020, 1, 1, tzinfo=UTC) and competition.end == datetime(2099, 1, 1, tzinfo=UTC)
    at = datetime(2050, 1, 1, tzinfo=UTC)
    main = competition.phase_at(at)
    assert main is not None and main.name == "main" and main.kinds == ("onnx",) and main.quotas.per_day == 1
    assert main.quotas.total == competition.quotas.total  # the file's quotas where the phase says nothing
    assert competition.in_phase(main).kinds == ("onnx",) and competition.in_phase(None) is competition
    final = competition.phase_named("final")
    assert final is not None and final.leaderboard.ladder and not main.leaderboard.ladder
    # the board a reader gets: the open phase's; after the last one: the last one's (final)
    assert competition.board_phase(at) is main and competition.board_phase(datetime(2100, 1, 1, tzinfo=UTC)) is final
    # a last phase without end stands; the competition then has no end
    standing = load_competition(_file(tmp_path / "s.toml", [{"name": "only", "start": "2020-01-01T00:00:00Z"}]))
    assert standing.standing and standing.phase_at(datetime(2200, 1, 1, tzinfo=UTC)) is not None
    # the Ladder by default on a standing phase over hidden data only (docs/hosting.md#standing-leaderboards)
    mixed = [
        {"name": "dev", "start": "2020-01-01T00:00:00Z", "end": "2021-01-01T00:00:00Z", "test_data": "public"},
        {"name": "board", "start": "2021-01-01T00:00:00Z"},
    ]
    assert [p.leaderboard.ladder for p in load_competition(_file(tmp_path / "m.toml", mixed)).phases] == [False, True]
    old = load_competition(write_competition(tmp_path / "old.toml"))
    assert old.phases == () and old.phase_at(at) is None


def test_a_phase_grades_the_competitions_split_or_its_sample_split(tmp_path: Path) -> None:
    competition = load_competition(_file(tmp_path / "c.toml"))
    check_phase_splits(competition, "test", "dev")  # main grades dev: the sample split, pinned and in the workers' copies
    with pytest.raises(CompetitionFileError) as caught:
        check_phase_splits(competition, "test", None)  # a benchmark without a sample split
    assert str(caught.value).startswith(f"{tmp_path / 'c.toml'}: phases.1.split: 'dev' is not the competition's split 'test'")


def test_a_gap_between_phases_accepts_nothing() -> None:
    competition = load_competition(REPO / "competitions_example" / "coir-challenge.toml")
    gap = (competition.phases[0].end or competition.start) - timedelta(seconds=1)
    assert phase_refusal(competition.phases, gap) is None
    spaced = [competition.phases[0], type(competition.phases[1])("later", start=competition.phases[1].start + timedelta(days=1), end=None)]
    refusal = phase_refusal(spaced, competition.phases[1].start)
    assert refusal is not None and "between phases: phase 'later' opens at" in str(refusal)
    assert "no phase 'nope' in this competition (its phases: development, final)" in str(phase_refusal(competition.phases, gap, "nope"))


@pytest.mark.parametrize(
    ("phases", "top", "key", "what"),
    [
        ([{"name": "a", "start": "2020-01-01T00:00:00Z"}, {"name": "b", "start": "2021-01-01T00:00:00Z"}], "", "phases.0.end", "only the last phase"),
        (
            [{"name": "a", "start": "2020-01-01T00:00:00Z", "end": "2022-01-01T00:00:00Z"}, {"name": "b", "start": "2021-01-01T00:00:00Z"}],
            "",
            "phases.1.start",
            "must not be before the end of phase 'a'",
        ),
        ([{"name": "a", "start": "2020-01-01T00:00:00Z", "end": "2019-01-01T00:00:00Z"}], "", "phases.0.end", "after the phase's start"),
        (
            [{"name": "a", "start": "2020-01-01T00:00:00Z", "end": "2021-01-01T00:00:00Z"}, {"name": "a", "start": "2021-01-01T00:00:00Z"}],
            "",
            "phases.1.name",
            "named twice",
        ),
        ([{"name": "a", "start": "2020-01-01T00:00:00Z"}], "start = 2020-01-01T00:00:00Z\n", "start", "phases name the windows"),
        ([{"name": "A b", "start": "2020-01-01T00:00:00Z"}], "", "phases.0.name", "does not match"),
        ([{"name": "a", "start": "2020-01-01T00:00:00Z", "quotas": {"sample_per_day": 3}}], "", "phases.0.quotas.sample_per_day", "unknown key"),
        (
            [{"name": "a", "start": "2020-01-01T00:00:00Z", "leaderboard": {"ladder": True}}],
            'test_data = "public"\n',
            "phases.0.leaderboard.ladder",
            "must be false",
        ),
        ([{"name": "a", "start": "2020-01-01T00:00:00Z", "regrade": "best"}], "", "phases.0.regrade", "no previous phase"),
        ([{"name": "a", "start": "2020-01-01T00:00:00Z", "regrade": "all"}], "", "phases.0.regrade", "is not one of"),
    ],
)
def test_a_bad_phase_is_one_line_naming_its_key(tmp_path: Path, phases: list[dict[str, object]], top: str, key: str, what: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "c"\nbenchmark = "mini"\n' + top + _phases_toml(phases), encoding="utf-8")
    with pytest.raises(CompetitionFileError) as caught:
        load_competition(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: ") and what in message and "\n" not in message.split(" (hint")[0], message


# -- the re-grade when a phase opens (the served board world: real prepare(), signed reports, SQLite and PostgreSQL) -----


def _two_phases(world: World) -> tuple[Phase, Phase]:
    """Phase one held every seeded submission and closed just now; phase two opened then, on the dev split, taking the best."""
    now = utcnow()
    one = Phase("one", start=now - timedelta(days=1), end=now)
    two = Phase("two", start=now, end=None, split="dev", regrade=REGRADE_BEST)
    world.ctx.competition = world.competition = replace(world.ctx.competition, end=None, phases=(one, two))
    return one, two


@pytest.mark.board(seeded=True)
def test_an_opening_phase_grades_each_participants_best_entry_of_the_previous_one_again_once_and_free(world: World) -> None:
    _two_phases(world)
    made = regrade_opened_phases(world.ctx)
    with world.ctx.db.session() as session:
        rows = {sid: session.get(Submission, sid) for sid in made}
        sources = {s.id: s for s in session.scalars(select(Submission)).all()}
        receipts = set(session.scalars(select(LogEntry.submission_id).where(LogEntry.kind == "receipt")).all())
        alice = quota_status(session, world.ctx.competition, world.participant_id, Track.HIDDEN, utcnow())
    copied = {sources[row.idempotency_key.removeprefix("regrade:")].name for row in rows.values() if row is not None and row.idempotency_key}
    # each participant's best public entry, per training setting (alice's v2, not her v1), the host's baseline too
    assert copied == {"alice-encoder-v2", "bob-lsa", '=HYPERLINK("http://x")', XSS_NAME, "BM25 baseline", "bob-finetuned", "carol-mystery"}
    for row in rows.values():
        assert row is not None and row.state == "queued" and row.split == "dev"  # graded again on the new phase's split
        source = sources[str(row.idempotency_key).removeprefix("regrade:")]
        assert (row.upload_sha256, row.participant_id, row.labels) == (source.upload_sha256, source.participant_id, source.labels)
    assert set(made) <= receipts  # logged as any upload is, before its grade
    assert alice.used_24h == 0 and alice.in_flight == 0  # not charged: a re-grade is the phase's, not the participant's
    assert regrade_opened_phases(world.ctx) == []  # once


@pytest.mark.board(seeded=True)
def test_the_re_grade_waits_for_the_previous_phases_grades_in_flight(world: World) -> None:
    one, _ = _two_phases(world)
    late = new_submission(world, uploaded_ago_s=5)  # queued in phase one: it may yet be someone's best
    assert one.holds(state_of(world, late).uploaded_at)
    assert regrade_opened_phases(world.ctx) == []
    admin_service.cancel(world.ctx.db, late, host_log=world.ctx.log)
    # the server's periodic pass makes them, as it logs the end and the reveal
    reaper = Reaper(world.ctx)
    reaper.start()
    try:
        wait_for(lambda: _regrades(world) == 7, timeout=60, what="the reaper's pass making the re-grades")
    finally:
        reaper.stopping.set()
        reaper.join(10)
    assert regrade_opened_phases(world.ctx) == [] and _regrades(world) == 7


def _regrades(world: World) -> int:
    with world.ctx.db.session() as session:
        return len(session.scalars(select(Submission.id).where(Submission.idempotency_key.startswith("regrade:"))).all())


@pytest.mark.board(seeded=True)
def test_each_submission_follows_the_ladder_of_its_own_phase(world: World) -> None:
    now = utcnow()
    board = world.ctx.competition.leaderboard
    one = Phase("one", start=now - timedelta(days=1), end=now, leaderboard=board)
    two = Phase("two", start=now, end=None, leaderboard=replace(board, ladder=True))
    world.ctx.competition = world.competition = replace(world.ctx.competition, end=None, phases=(one, two))
    later = seed(world, "alice", "alice-in-the-ladder-phase", 0.7, rng_seed=9)
    with world.ctx.db.session() as session:
        before, after = session.get(Submission, world.by_name("alice-encoder-v2").id), session.get(Submission, later.id)
    assert before is not None and after is not None and two.holds(after.uploaded_at)
    # phase one shows public-part reports; phase two is a Ladder: its finer numbers would undo it
    assert report_envelope(world.ctx, before, ended=False) is not None
    assert report_envelope(world.ctx, after, ended=False) is None
    # and each phase's board ranks its own submissions only
    ranked = {e["name"] for b in board_json(world.ctx, "public", phase="two").model_dump()["boards"] for e in b["entries"]}
    assert ranked == {"alice-in-the-ladder-phase"}


@pytest.mark.board(seeded=True)
def test_a_phase_over_public_test_data_discloses_its_grades_at_once(world: World) -> None:
    now = utcnow()
    one = Phase("one", start=now - timedelta(days=1), end=now, test_data="public", leaderboard=world.ctx.competition.leaderboard)
    two = Phase("two", start=now, end=None, leaderboard=world.ctx.competition.leaderboard)
    world.ctx.competition = world.competition = replace(world.ctx.competition, end=None, phases=(one, two))
    with world.ctx.db.session() as session:
        submission = session.get(Submission, world.by_name("alice-encoder-v2").id)
    assert submission is not None
    envelope = report_envelope(world.ctx, submission, ended=False)  # the full report, not the public part's
    assert envelope is not None
    assert "part" not in verify_envelope(envelope, world.ctx.signing_key.public_key()).report["labels"]
    assert report_envelope(world.ctx, submission, ended=False) == envelope
    view = public_view(world.ctx, submission, ended=False)
    assert view.private_score is not None and view.full_score is not None
    # its board: the full split by default, each row linking the full report; the hidden phase's stays as it was
    assert board_json(world.ctx, None, ended=False, phase="one").part == "full"
    assert board_json(world.ctx, None, ended=False, phase="two").part == "public"
    with pytest.raises(NotPublished):
        board_json(world.ctx, "full", ended=False, phase="two")


@pytest.mark.board(seeded=True)
def test_a_closed_phases_logged_boards_are_the_ones_served_for_it_after_the_end(world: World) -> None:
    _two_phases(world)
    assert world.ctx.log is not None
    assert log_phase_ends_if_due(world.ctx.db, world.ctx.log, world.ctx.competition) == ["one"]
    assert log_phase_ends_if_due(world.ctx.db, world.ctx.log, world.ctx.competition) == []  # once
    assert log_phase_boards_when_due(world.ctx) == ["one"] and log_phase_boards_when_due(world.ctx) == []
    with world.ctx.db.session() as session:
        logged = [entries.decode_entry(bytes(row)) for row in session.scalars(select(LogEntry.entry).where(LogEntry.kind == "phase_board"))]
    assert [entry["phase"] for entry in logged] == ["one"]
    admin(world.state.root, "end", "--yes", database=world.database)
    client = TestClient(create_app(world.ctx))
    for part in ("public", "private"):
        served = client.get("/api/v1/leaderboard", params={"part": part, "phase": "one"}).json()
        assert served["boards"] and hashlib.sha256(rfc8785.dumps(served)).hexdigest() == logged[0][f"{part}_board_sha256"], part


@pytest.mark.board(seeded=True)
def test_a_phase_regrading_the_chosen_takes_what_each_participant_chose_during_the_previous_one_free(world: World) -> None:
    now = utcnow()
    one = Phase("one", start=now - timedelta(days=1), end=now + timedelta(hours=1))
    two = Phase("two", start=now + timedelta(hours=1), end=None, split="dev", regrade=REGRADE_CHOSEN)
    world.ctx.competition = world.competition = replace(world.ctx.competition, end=None, phases=(one, two))
    client = TestClient(create_app(world.ctx))
    assert [(p["finals"], p["carried"]) for p in client.get("/api/v1/competition").json()["phases"]] == [(False, True), (True, False)]
    # during phase one its choices are taken (the next phase carries them): alice's older entry, not her best; bob's one
    chosen = {"alice": world.by_name("alice-encoder-v1").id, "bob": world.by_name("bob-lsa").id}
    for name, sid in chosen.items():
        answer = client.put("/api/v1/finals", json={"submissions": [sid]}, headers={"Authorization": f"Bearer {world.tokens[name]}"})
        assert answer.status_code == 200, answer.text
    shown = client.get("/api/v1/finals", headers={"Authorization": f"Bearer {world.tokens['alice']}"}).json()
    assert shown["finals"] == [chosen["alice"]] and shown["chosen"]
    # phase one closes, phase two opens: the choices, and only they, are graded again on its split, charged to no one
    one, two = replace(one, end=now), replace(two, start=now)
    world.ctx.competition = world.competition = replace(world.ctx.competition, phases=(one, two))
    made = regrade_opened_phases(world.ctx)
    with world.ctx.db.session() as session:
        rows = [session.get(Submission, sid) for sid in made]
        alice = quota_status(session, world.ctx.competition, world.participant_id, Track.HIDDEN, utcnow())
    assert sorted(str(row.idempotency_key) for row in rows if row is not None) == sorted(f"regrade:{sid}" for sid in chosen.values())
    assert all(row is not None and row.split == "dev" and row.state == "queued" for row in rows)
    assert alice.used_24h == 0 and alice.in_flight == 0
    assert regrade_opened_phases(world.ctx) == []  # once
    # a choice now is the last phase's (final): phase one's submissions are no longer chosen among
    late = client.put(
        "/api/v1/finals", json={"submissions": [world.by_name("alice-encoder-v2").id]}, headers={"Authorization": f"Bearer {world.tokens['alice']}"}
    )
    assert late.status_code == 409 and "choices are taken now among the submissions of phase 'two'" in late.text
    # at the end, the finals logged are the last phase's choices only: phase one's were carried, not final; the host
    # ends before any reaper pass logged phase one's end, and the end logs it first
    assert world.ctx.log is not None
    admin_service.end_now(world.ctx.db, host_log=world.ctx.log, competition=world.ctx.competition)
    with world.ctx.db.session() as session:
        kinds = list(session.scalars(select(LogEntry.kind).order_by(LogEntry.index)))
        assert session.scalar(select(func.count()).select_from(FinalChoice)) == 2  # the choices stay, for the record
    assert "phase_end" in kinds and "end" in kinds and kinds.index("phase_end") < kinds.index("end") and "finals" not in kinds
