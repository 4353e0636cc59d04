"""Stored runs are re-scored without running anything, and a retention policy bounds them.

One SQLite world for the module (a copy of mini next to its competition file, so that a
test can correct a qrels file), with real submissions whose compact runs were put and
scored through the worker route. The tests run in file order: the re-scoring ones first,
then the competition ends and the retention policy prunes, then a pruned submission's
re-scoring is refused.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytrec_eval
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.cli.main import cli
from grader.data.registry import data_root, resolve_benchmark
from grader.hosting.api.app import create_app
from grader.hosting.config import DEPTH, RetentionPolicy
from grader.hosting.db.models import Attempt, LogEntry, Result, ResultPart, Submission, Transition
from grader.hosting.server import Reaper
from grader.hosting.services.retention import plan
from grader.reports.signing import ENVELOPE_NAME
from grader.runs.compact import decode_run
from grader.sandbox.blinding import DOCUMENT, QUERY, blind
from tests.hosting.leaderboard_world import make_world, seed
from tests.hosting.support import admin
from tests.hosting.world import World

pytestmark = pytest.mark.slow  # the server scores in a child process

TASK = "text2code"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("rescore")
    shutil.copytree(data_root("mini"), root / "mini")  # the competition's own data: a test corrects its qrels
    built = make_world(root, None, resamples=100)
    assert Path(built.ctx.benchmark_target) == (root / "mini").resolve()
    client = TestClient(create_app(built.ctx))
    for participant, name, rng_seed in (("alice", "a1", 1), ("alice", "a2", 2), ("alice", "a3", 3), ("bob", "b1", 4)):
        seed(built, participant, name, 0.5, through=client, rng_seed=rng_seed)
    yield built
    built.ctx.db.dispose()


def _competition_file(world: World) -> Path:
    return world.state.root.parent / "c.toml"


def _current(world: World, submission_id: str) -> tuple[Submission, Result]:
    with world.ctx.db.session() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None and submission.result_id is not None
        result = session.get(Result, submission.result_id)
        assert result is not None
        session.expunge_all()
        return submission, result


def _report(result: Result) -> dict:  # type: ignore[type-arg]
    assert result.report_path is not None
    return json.loads(Path(result.report_path).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _counts(world: World) -> dict[str, int]:
    with world.ctx.db.session() as session:
        return {
            "attempts": session.scalar(select(func.count()).select_from(Attempt)) or 0,
            "transitions": session.scalar(select(func.count()).select_from(Transition)) or 0,
            "results": session.scalar(select(func.count()).select_from(Result)) or 0,
            "rejudge entries": session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "rejudge")) or 0,
            "report entries": session.scalar(select(func.count()).select_from(LogEntry).where(LogEntry.kind == "report")) or 0,
        }


def _stored_rankings(world: World, submission_id: str, attempt: int, task: str) -> dict[str, dict[str, float]]:
    """The run the worker put for ``task``, decoded over the (unchanged) corpus and judged queries, under the real ids.

    The worker's run indexes its pseudonymous copy: decoded over the pseudonyms' order, then named by the real ids.
    """
    data = resolve_benchmark(world.ctx.benchmark_target).task(task)
    qrels = data.qrels("test")
    key = world.ctx.blinding_key
    assert key is not None
    documents = blind(key, task, DOCUMENT, [d.id for d in data.iter_corpus()])
    queries = blind(key, task, QUERY, [q.id for q in data.iter_queries() if q.id in qrels])
    raw = (world.ctx.state.runs_dir(submission_id, attempt) / f"{task}.run").read_bytes()
    run = decode_run(raw, documents=len(documents.staged), queries=len(queries.staged), depth=DEPTH).to_run(documents.staged, queries.staged)
    return {queries.real_of[q]: {documents.real_of[d]: s for d, s in ranked.items()} for q, ranked in run.to_mapping().items()}


def _qrels_file(world: World, task: str) -> Path:
    return Path(world.ctx.benchmark_target) / task / "qrels" / "test.tsv"


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """The qrels TSV read here, without the grader's reader."""
    judged: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            judged.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    return judged


def test_rescore_after_a_qrels_correction_equals_a_direct_score_of_the_same_run(world: World, tmp_path: Path) -> None:
    target = world.by_name("a1")
    submission, before = _current(world, target.id)
    old_report = _report(before)
    rankings = _stored_rankings(world, target.id, before.attempt, TASK)
    # The correction: the document each of the first 20 queries ranks first becomes relevant (grade 2); the judged set is unchanged.
    path = _qrels_file(world, TASK)
    text = path.read_text(encoding="utf-8")
    added = [(q, next(iter(docs))) for q, docs in sorted(rankings.items())[:20] if docs]
    path.write_text(text + "".join(f"{q}\t{d}\t2\n" for q, d in added), encoding="utf-8")
    admin(world.state.root, "repin", "--competition", str(_competition_file(world)))
    counts, generation = _counts(world), world.ctx.dispatcher.generation()

    out = admin(world.state.root, "rejudge", "--rescore", target.id, "--competition", str(_competition_file(world)))
    assert f"{target.id}  re-scored: result" in out and "re-scored 1 submission(s)" in out

    after_submission, after = _current(world, target.id)
    report = _report(after)
    # Independently: pytrec_eval over the same ranking and the corrected qrels as read here...
    evaluator = pytrec_eval.RelevanceEvaluator(_read_qrels(path), {"ndcg_cut_10"})
    per_query = evaluator.evaluate(rankings)
    judged = _read_qrels(path)
    expected = math.fsum(per_query[q]["ndcg_cut_10"] if q in per_query else 0.0 for q in judged) / len(judged)
    assert abs(report["tasks"][TASK]["measures"]["NDCG@10"] - expected) <= 1e-12
    assert report["tasks"][TASK]["measures"]["NDCG@10"] != old_report["tasks"][TASK]["measures"]["NDCG@10"]
    # ... and `grader score` of the same run as a TREC file
    trec = tmp_path / "run.trec"
    trec.write_text("".join(f"{q} Q0 {d} {i} {s!r} w\n" for q, docs in rankings.items() for i, (d, s) in enumerate(docs.items())), encoding="utf-8")
    direct = CliRunner().invoke(cli, ["score", "--qrels", str(path), "--run", str(trec), "--measure", "NDCG@10", "--format", "json"])
    assert direct.exit_code == 0, direct.output
    assert report["tasks"][TASK]["measures"]["NDCG@10"] == json.loads(direct.stdout)["measures"]["NDCG@10"]
    # the other tasks' data did not change: their scores are the accepted ones, bit for bit
    for name, entry in report["tasks"].items():
        if name != TASK:
            assert entry["measures"] == old_report["tasks"][name]["measures"]
    assert report["labels"]["rescored"] == {"result": before.id, "attempt": before.attempt}

    # Nothing ran: no attempt, no transition, no dispatch; the state and attempt stay; one more result (the earlier one stays), logged.
    now = _counts(world)
    assert now == {
        **counts,
        "results": counts["results"] + 1,
        "rejudge entries": counts["rejudge entries"] + 1,
        "report entries": now["report entries"],
    }
    assert now["report entries"] == counts["report entries"] + 2  # the full report and its public part
    assert world.ctx.dispatcher.generation() == generation
    assert (after_submission.state, after_submission.attempt) == (submission.state, submission.attempt)
    assert after.id != before.id and after.attempt == before.attempt and Path(str(before.envelope_path)).is_file()
    assert after_submission.public_score == report["aggregate"]["score"]
    with world.ctx.db.session() as session:
        assert session.get(ResultPart, after.id) is not None  # the boards read the new parts
    public_part = Path(str(after.envelope_path)).parent / "public-part" / ENVELOPE_NAME
    # the participant's download before the end: the public part of the new result, signed beside it
    served = TestClient(create_app(world.ctx)).get(
        f"/api/v1/submissions/{target.id}/report", headers={"Authorization": f"Bearer {world.tokens['alice']}"}
    )
    assert served.status_code == 200 and served.content == public_part.read_bytes()


def _refused(world: World, *args: str):  # type: ignore[no-untyped-def]
    """`grader admin ARGS --competition FILE` in-process, expected to fail: its click result."""
    result = CliRunner().invoke(cli, ["admin", "--state", str(world.state.root), *args, "--competition", str(_competition_file(world))])
    assert result.exit_code != 0, result.output
    return result


def test_runs_over_another_judged_set_are_refused(world: World) -> None:
    target = world.by_name("a2")
    path = _qrels_file(world, TASK)
    text = path.read_text(encoding="utf-8")
    header, first, *rest = text.splitlines(keepends=True)
    dropped = first.split("\t")[0]
    try:
        path.write_text(header + "".join(line for line in rest if not line.startswith(dropped + "\t")), encoding="utf-8")
        results = _counts(world)["results"]
        refused = _refused(world, "rejudge", "--rescore", target.id)
        assert target.id in refused.output and "index other data than there is now" in refused.output
        assert _counts(world)["results"] == results
    finally:
        path.write_text(text, encoding="utf-8")


def _attempt_folder(world: World, submission_id: str) -> Path:
    return world.ctx.state.runs_dir(submission_id, _current(world, submission_id)[1].attempt)


def _run_bytes(folder: Path) -> tuple[int, int]:
    runs = list(folder.glob("*.run"))
    return len(runs), sum(p.stat().st_size for p in runs)


def test_retention_keeps_the_finals_and_the_best_and_reports_the_bytes(world: World) -> None:
    retaining = world.state.root.parent / "c-retain.toml"
    retaining.write_text(_competition_file(world).read_text(encoding="utf-8") + '[retention]\nruns = "finals-and-best"\n', encoding="utf-8")
    # alice has three scored submissions and two finals (her two best public ones, by default): the third is neither final nor best
    with world.ctx.db.session() as session:
        public = {
            sid: score
            for sid, score in session.execute(
                select(Submission.id, ResultPart.public_score).join(ResultPart, ResultPart.result_id == Submission.result_id)
            )
        }
    alice = sorted((world.by_name(n).id for n in ("a1", "a2", "a3")), key=lambda sid: public[sid])
    dropped = _attempt_folder(world, alice[0])
    kept = [_attempt_folder(world, sid) for sid in (*alice[1:], world.by_name("b1").id)]
    stray = world.ctx.state.runs_dir(world.by_name("b1").id, 9)  # an attempt no result names (a superseded one)
    stray.mkdir(parents=True)
    (stray / f"{TASK}.run").write_bytes(b"\0" * 100)
    runs, size = _run_bytes(dropped)
    expected = f"{runs + 1} run(s) of 2 attempt(s), {size + 100} bytes"

    out = admin(world.state.root, "runs", "--competition", str(retaining))
    assert "retention policy 'finals-and-best'" in out and expected in out and "to be removed at the end" in out
    assert "retention policy 'all': every run is kept" in admin(world.state.root, "runs", "--competition", str(_competition_file(world)))
    assert dropped.is_dir() and stray.is_dir()  # nothing removed before the end

    admin(world.state.root, "end", "--yes")
    ctx = replace(world.ctx, competition=replace(world.ctx.competition, retention=RetentionPolicy("finals-and-best")))
    due = plan(ctx.db, ctx.state, ctx.competition)
    assert due.ended and sorted(due.remove) == sorted([dropped, stray]) and due.remove_bytes == size + 100
    Reaper(ctx)._prune_runs()  # what the server's reaper does after the end (not started: one pass, here)
    assert not dropped.exists() and not stray.exists()
    assert all(folder.is_dir() and _run_bytes(folder)[0] == 3 and (folder / "facts.json").is_file() for folder in kept)
    out = admin(world.state.root, "runs", "--competition", str(retaining))
    held = sum(_run_bytes(folder)[1] for folder in kept)
    assert out.startswith(f"9 compact run(s) of 3 submission(s): {held} bytes") and "0 run(s) of 0 attempt(s), 0 bytes" in out


def test_a_pruned_submission_is_refused_by_name_the_others_are_rescored(world: World) -> None:
    with world.ctx.db.session() as session:
        public = {sid: score for sid, score in session.execute(select(Submission.id, Submission.public_score))}
    pruned = next(sid for sid in public if not (world.ctx.state.root / "runs" / sid).exists())
    refused = _refused(world, "rejudge", "--rescore", pruned)
    assert pruned in refused.output and "not kept" in refused.output
    everything = _refused(world, "rejudge", "--rescore", "--all")
    assert "re-scored 3 submission(s); refused 1" in everything.stdout and pruned in everything.output
