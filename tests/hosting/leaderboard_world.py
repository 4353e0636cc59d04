"""A seeded competition for the leaderboard tests: real database (SQLite or PostgreSQL), real signed reports.

Submissions go through the real lifecycle (received, queued, claimed by a
worker, result accepted and signed by the host); only the grading itself is
replaced by reports built here with known per-query values, since grading is
not what these tests are about. Expected numbers are re-derived here from the
partition rule of docs/statistics.md, independently of grader.stats.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from grader.data.benchmark import BenchmarkSpec
from grader.data.registry import resolve_benchmark
from grader.grading.scoring import facts_of
from grader.hosting.clock import utcnow
from grader.hosting.config import DEPTH, load_competition
from grader.hosting.db.models import Participant, Pin, Result, Submission, Worker
from grader.hosting.identity.participants import create_participant, rekey_local_worker
from grader.hosting.identity.teams import team_of
from grader.hosting.intake.submission_rows import received_submission
from grader.hosting.leaderboard.parts import acceptance_scorer
from grader.hosting.queue import lifecycle
from grader.hosting.server import ServeOptions, prepare
from grader.hosting.transparency.log_events import log_receipt
from grader.reports.model import build_report
from grader.runs.compact import canonical_order, encode_run, run_digest
from grader.runs.run import Run
from grader.sandbox.blinding import DOCUMENT, QUERY, blind
from tests.hosting.posting import accept_posted
from tests.hosting.support import worker_headers, write_competition
from tests.hosting.world import World

XSS_NAME = "<img src=x onerror=alert(1)>"
QUERIES = 60
FRACTION = 0.3


@dataclass
class Seeded:
    """One seeded hidden-split submission and what the test expects of it."""

    id: str
    participant: str
    name: str
    values: dict[str, dict[str, float]]
    public: float = 0.0
    private: float = 0.0
    full: float = 0.0
    private_tasks: dict[str, float] = field(default_factory=dict)


def reference_public(secret: bytes, task: str, query_ids: list[str], fraction: float) -> set[str]:
    """The public queries by the rule of docs/statistics.md, written out again here."""
    name = task.encode()
    tag = {q: hmac.new(secret, len(name).to_bytes(4, "big") + name + q.encode(), hashlib.sha256).digest() for q in query_ids}
    ranked = sorted(query_ids, key=lambda q: (tag[q], q))
    count = min(max(math.floor(fraction * len(query_ids) + 0.5), 1), len(query_ids) - 1)
    return set(ranked[:count])


def _mean_of_tasks(values: dict[str, dict[str, float]], keep: dict[str, set[str]] | None) -> float:
    means = []
    for task, per_query in sorted(values.items()):
        chosen = [v for q, v in per_query.items() if keep is None or q in keep[task]]
        means.append(math.fsum(chosen) / len(chosen))
    return math.fsum(means) / len(means)


def make_world(tmp_path: Path, database: str | None, *, resamples: int = 500, ladder_step: float | None = None) -> World:
    """The served leaderboard competition (the one :class:`~tests.hosting.world.World`, built by the server's ``prepare()``)."""
    board: dict[str, Any] = {"public_fraction": FRACTION, "finals": 2, "resamples": resamples, "seed": 7}
    if ladder_step is not None:
        board.update(ladder=True, ladder_step=ladder_step)
    competition = load_competition(
        write_competition(
            tmp_path / "c.toml",
            title="Code retrieval on mini (demo)",
            tables={"leaderboard": board, "quotas": {"per_day": 50, "total": 100, "concurrent": 50}},
        )
    )
    state = tmp_path / "state"
    # A fixed secret keeps every number of the tests the same from run to run (the leak scan looks for exact numbers).
    (state / "keys").mkdir(parents=True)
    os.chmod(state / "keys", 0o700)
    secret_file = state / "keys" / "partition.secret"
    secret_file.write_text(hashlib.sha256(b"leaderboard tests").hexdigest() + "\n", encoding="ascii")
    os.chmod(secret_file, 0o600)
    ctx, _db = prepare(ServeOptions(competition=competition, state_dir=state, database=database, workers=0))
    tokens, ids = {}, {}
    with ctx.db.session() as session:
        for name, team, baseline in (
            ("alice", "lab-a", False),
            ("bob", None, False),
            ("carol", "=cmd|' /C calc'!A0", False),
            ("mallory", None, False),
            ("host-bm25", None, True),
        ):
            participant, tokens[name] = create_participant(session, name, team, baseline=baseline)
            ids[name] = participant.id
        worker_token = rekey_local_worker(session, "seed-worker")
        workers = list(session.scalars(select(Worker.id).order_by(Worker.id)).all())
    return World.served(ctx, database, tokens, ids["alice"], workers, worker_token)


def seed(
    world: World,
    participant: str,
    name: str,
    level: float,
    *,
    setting: str | None = "zero-shot",
    private_shift: float = 0.0,
    model: dict[str, Any] | None = None,
    uploaded_ago_s: float = 0,
    rng_seed: int = 0,
    without_parts: bool = False,
    through: Any = None,
    blinding: dict[str, str] | None = None,
    expect: str = "accepted",
    tamper: Callable[[str, bytes], bytes] | None = None,
    stated: dict[str, Any] | None = None,
    receipt: bool = True,
    while_graded: Callable[[], None] | None = None,
    failed: str | None = None,
) -> Seeded:
    """Add a scored hidden-split submission whose per-query values centre on ``level`` (private queries shifted by ``private_shift``).

    ``without_parts``: accepted without the scorer, as 0.2.0 could (no part scores, no public-part report: the start repairs it).
    ``through``: an HTTP client of the server's app; the result is then posted through the worker route.
    ``blinding``: the report's ``sandbox.blinding`` (default: the competition's key); ``expect``: the verdict the post must get.
    ``tamper`` (with ``through``): rewrites each task's compact run before it is put (a forging worker);
    ``stated``: fields merged into the posted facts (a worker stating what is not its to state).
    ``receipt``: log the upload's receipt as the upload route does (False: a submission the host added by hand);
    ``while_graded``: called once the submission is claimed, before its result is posted (the end logged meanwhile).
    ``failed``: that task failed OOM in the report (the grade ends ``failed``, its other tasks scored as usual).
    """
    ctx = world.ctx
    rng = random.Random(rng_seed)
    with ctx.db.session() as session:
        pin = session.get(Pin, ctx.pin_id)
        assert pin is not None
        digests = pin.digests
        pid = session.scalar(select(Participant.id).where(Participant.name == participant))
        team_id = team_of(session, pid)  # as intake/submissions.py reads it: a team member's upload is the team's
        worker_id = session.scalar(select(Worker.id).where(Worker.name == "seed-worker"))
    values: dict[str, dict[str, float]] = {}
    public_sets: dict[str, set[str]] = {}
    for task in ctx.tasks:
        ids = [f"{task}-q{i:03d}" for i in range(QUERIES)]
        public_sets[task] = reference_public(world.secret, task, ids, FRACTION)
        values[task] = {}
        for q in ids:
            v = level + rng.uniform(-0.25, 0.25) + (0.0 if q in public_sets[task] else private_shift)
            values[task][q] = min(1.0, max(0.0, v))
    content_digest = hashlib.sha256(f"{participant}/{name}/{rng_seed}".encode()).hexdigest()
    labels: dict[str, Any] = {"model": dict(model or {})}
    if setting:
        labels["training"] = {"setting": setting, "datasets": [] if setting == "zero-shot" else ["mini/train"]}
    submission = received_submission(
        submission_id=lifecycle.new_submission_id(),
        participant_id=pid,
        team_id=team_id,
        pin_id=ctx.pin_id,
        name=name,
        kind="onnx",
        track="hidden",
        split="test",
        upload_path="none",
        upload_sha256="0" * 64,
        upload_bytes=1,
        content_digest=content_digest,
        uploaded_at=utcnow() - timedelta(seconds=uploaded_ago_s),
        attempt_limit=3,
        labels=labels,
    )
    now = submission.uploaded_at
    with ctx.db.session() as session:
        lifecycle.record_received(session, submission)
        if receipt and ctx.log is not None:
            log_receipt(session, ctx.log, submission)  # in the upload's transaction, as intake/submissions.py logs it
    assert lifecycle.enqueue(ctx.db, ctx.dispatcher, submission.id, actor="test")
    claim = lifecycle.claim(ctx.db, worker_id, 60)
    assert claim is not None and claim.submission_id == submission.id
    if while_graded is not None:
        while_graded()
    spec = BenchmarkSpec(name="mini", version=digests["version"], primary_measure="NDCG@10", tasks=tuple(ctx.tasks), groups={})
    tasks = []
    for task in ctx.tasks:
        per_query = values[task]
        mean = math.fsum(per_query.values()) / len(per_query)
        if task == failed:
            tasks.append(
                {
                    "name": task,
                    "split": "test",
                    "data_digest": {"sha256": digests["tasks"][task]["test"]},
                    "status": "failed",
                    "failure": {"code": "OOM", "message": "killed at /srv/hidden"},
                    "measures": {},
                    "queries": {"judged": QUERIES, "answered": 0, "missing": QUERIES, "extra": 0},
                }
            )
            continue
        tasks.append(
            {
                "name": task,
                "split": "test",
                "data_digest": {"sha256": digests["tasks"][task]["test"]},
                "status": "scored",
                "failure": None,
                "measures": {"NDCG@10": mean, "MAP@10": mean / 2},
                "queries": {"judged": QUERIES, "answered": QUERIES, "missing": 0, "extra": 0},
                "per_query": {"measure": "NDCG@10", "values": per_query},
            }
        )
    report = build_report(
        benchmark={"name": "mini", "version": digests["version"], "primary_measure": "NDCG@10"},
        subject={"name": name, "kind": "onnx", "digest": {"sha256": content_digest}},
        tasks=tasks,
        aggregate=spec.aggregate({t["name"]: t["measures"].get("NDCG@10") for t in tasks}),
        policy="strict",
        started_at=now,
        finished_at=now,
        # As a worker's report names it: the competition's blinding key (the server refuses any other).
        sandbox={"kind": "docker", "blinding": blinding or (ctx.blinding_key.report() if ctx.blinding_key else None)},
        labels={k: v for k, v in labels.items() if k == "training"},
    )
    if through is not None:
        # A worker posts no report: it puts a ranking per task and states the rest; the server scores. The
        # per-query values are then the server's, read back from the report it stored.
        post_runs(world, through, submission.id, claim.attempt, {**facts_of(report), **(stated or {})}, rng, expect=expect, tamper=tamper)
        if expect == "accepted":
            values = served_values(world, submission.id)
            public_sets = {task: reference_public(world.secret, task, list(values[task]), FRACTION) for task in values}
    else:
        verdict = accept_posted(
            ctx.db,
            ctx.state,
            ctx.signing_key,
            submission_id=submission.id,
            attempt=claim.attempt,
            worker_id=worker_id,
            payload={"report": report},
            parts=None if without_parts else acceptance_scorer(ctx),  # as the server's route does
            host_log=ctx.log,  # logged as the server's route does
        )
        assert verdict.status == expect, verdict
    entry = Seeded(
        submission.id,
        participant,
        name,
        values,
        public=_mean_of_tasks(values, public_sets),
        private=_mean_of_tasks(values, {t: set(values[t]) - public_sets[t] for t in values}),
        full=_mean_of_tasks(values, None),
    )
    entry.private_tasks = {
        t: math.fsum(v for q, v in values[t].items() if q not in public_sets[t]) / (len(values[t]) - len(public_sets[t])) for t in values
    }
    world.submissions.append(entry)
    return entry


def post_runs(
    world: World,
    client: Any,
    submission_id: str,
    attempt: int,
    facts: dict[str, Any],
    rng: random.Random,
    *,
    expect: str,
    tamper: Callable[[str, bytes], bytes] | None = None,
) -> None:
    """Put a random ranking of each task (of a few of its documents) as compact runs, then post the ``facts`` naming them.

    As a worker does: under the pseudonyms of its data copy (the competition's key), indexes into their canonical order.
    """
    headers = worker_headers(world.worker_token)
    digests: dict[str, str] = {}
    for name, data in random_runs(world, rng).items():
        if tamper is not None:
            data = tamper(name, data)
        put = client.put(f"/api/v1/worker/jobs/{submission_id}/runs/{name}", params={"attempt": attempt}, content=data, headers=headers)
        assert put.status_code == 200 and put.json()["sha256"] == run_digest(data), put.text
        digests[name] = run_digest(data)
    answer = client.post(f"/api/v1/worker/jobs/{submission_id}/result", json={"attempt": attempt, "facts": facts, "runs": digests}, headers=headers)
    assert answer.status_code == 200 and answer.json()["status"] == expect, answer.text


def random_runs(world: World, rng: random.Random) -> dict[str, bytes]:
    """Per task, the compact run of a random ranking of a few of its documents (one ``rng`` state: the same bytes)."""
    benchmark = resolve_benchmark(world.ctx.benchmark_target)
    runs: dict[str, bytes] = {}
    for name in world.ctx.tasks:
        task = benchmark.task(name)
        judged = task.qrels("test")
        corpus = canonical_order([d.id for d in task.iter_corpus()])
        queries = canonical_order([q.id for q in task.iter_queries() if q.id in judged])
        rankings: dict[str, dict[str, float]] = {}
        for q in queries:  # a relevant document somewhere in the top 10 for most queries, so the values vary
            docs = [d for d in rng.sample(corpus, 10) if d not in judged[q]]
            relevant = sorted(judged[q])[: rng.randint(0, 1)]
            ranked = (docs[: rng.randint(0, 9)] + relevant + docs)[:10]
            rankings[q] = {d: float(10 - i) for i, d in enumerate(dict.fromkeys(ranked))}
        key = world.ctx.blinding_key
        assert key is not None
        documents, judged_ids = blind(key, name, DOCUMENT, list(corpus)), blind(key, name, QUERY, list(queries))
        to_doc, to_query = {real: p for p, real in documents.real_of.items()}, {real: p for p, real in judged_ids.real_of.items()}
        run = Run.from_mapping({to_query[q]: {to_doc[d]: score for d, score in ranked.items()} for q, ranked in rankings.items()})
        runs[name] = encode_run(run, corpus=documents.staged, queries=judged_ids.staged, depth=DEPTH)
    return runs


def served_values(world: World, submission_id: str) -> dict[str, dict[str, float]]:
    """The per-query values of the report the server scored and stored for ``submission_id``."""
    with world.ctx.db.session() as session:
        row = session.get(Submission, submission_id)
        assert row is not None and row.result_id is not None
        result = session.get(Result, row.result_id)
        assert result is not None and result.report_path is not None
        path = Path(result.report_path)
    report = json.loads(path.read_text(encoding="utf-8"))
    return {name: dict(entry["per_query"]["values"]) for name, entry in report["tasks"].items()}


def seed_demo(world: World) -> None:
    """The board of the tests and of docs/leaderboard.png."""
    seed(
        world,
        "alice",
        "alice-encoder-v1",
        0.55,
        private_shift=-0.05,
        model={"parameters": 22_700_000, "dimension": 384, "max_length": 256, "license": "apache-2.0"},
        uploaded_ago_s=500,
        rng_seed=1,
    )
    seed(
        world,
        "alice",
        "alice-encoder-v2",
        0.60,
        private_shift=-0.10,
        model={"parameters": 22_700_000, "dimension": 384, "max_length": 512, "license": "apache-2.0", "revision": "v2"},
        uploaded_ago_s=400,
        rng_seed=2,
    )
    seed(world, "bob", "bob-lsa", 0.45, private_shift=0.12, uploaded_ago_s=300, rng_seed=3)
    seed(world, "carol", '=HYPERLINK("http://x")', 0.35, private_shift=0.0, uploaded_ago_s=250, rng_seed=4)
    seed(world, "mallory", XSS_NAME, 0.40, private_shift=0.03, uploaded_ago_s=200, rng_seed=5)
    seed(world, "host-bm25", "BM25 baseline", 0.50, private_shift=0.0, uploaded_ago_s=600, rng_seed=6)
    seed(world, "bob", "bob-finetuned", 0.70, setting="fine-tuned", private_shift=-0.02, uploaded_ago_s=100, rng_seed=7)
    seed(world, "carol", "carol-mystery", 0.65, setting=None, private_shift=0.0, uploaded_ago_s=50, rng_seed=8)


ZERO_SHOT = {"alice-encoder-v1", "alice-encoder-v2", "bob-lsa", '=HYPERLINK("http://x")', XSS_NAME, "BM25 baseline"}


def expected_order(world: World, setting_names: set[str], part: str) -> list[str]:
    """Per participant the best ``part`` score among the given submissions, best first (baselines excluded)."""
    best: dict[str, tuple[float, str]] = {}
    for s in world.submissions:
        if s.name in setting_names and s.participant != "host-bm25":
            score = getattr(s, part)
            if s.participant not in best or score > best[s.participant][0]:
                best[s.participant] = (score, s.name)
    return [name for _, name in sorted(best.values(), reverse=True)]


def assert_free_of_secrets(world: World, text: str, where: str) -> None:
    """No private or full-split score (aggregate or per task, at 4 decimals or full precision), no per-query value, no secret in ``text``."""
    numbers = set(re.findall(r"\d+\.\d+", text))
    for s in world.submissions:
        for value in (s.private, s.full, *s.private_tasks.values()):
            assert not {f"{value:.4f}", f"{round(value, 4)}", repr(value)} & numbers, f"{where}: private/full score of {s.name} leaked"
        for per_query in s.values.values():
            for value in per_query.values():
                if value not in (0.0, 1.0):
                    assert repr(value) not in numbers, f"{where}: a per-query value of {s.name} leaked"
    assert world.secret.hex() not in text, f"{where}: the partition secret leaked"
