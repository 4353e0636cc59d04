"""Reads of a server of many competitions on PostgreSQL (issue 33 item 4):

    .venv/bin/python bench/many_competitions.py [--competitions 20] [--participants 50] [--submissions 40000]

Builds a world of ``--competitions`` competitions on mini, ``--participants`` participants each (one of them a host
baseline; the others spread over the zero-shot, fine-tuned and undeclared boards) and ``--submissions`` scored
hidden-split submissions in all, in one PostgreSQL database (a throw-away cluster, tests/hosting/postgres.py), each
competition in its own schema; then starts a real ``grader serve --competitions DIR --database URL`` (no local
workers) and times, over real sockets, the reads a visitor and a participant make:

- ``/``: the listing of every competition;
- each competition's board page ``/c/<name>/`` and its JSON ``/api/v1/competitions/<name>/leaderboard``;
- a participant's submission list ``/api/v1/competitions/<name>/submissions`` (its scores computed from the signed reports).

The world is made without grading each submission in a container (as bench/leaderboard.py): every submission has a
report with its own per-query values, signed with its competition's host key exactly as acceptance signs it
(``results.recording.sign``: the report, its part scores and its signed public-part report, in the result's folder),
and the rows a scored grade leaves (submission, result, part scores). Skipped, as reads do not look at them: the
transitions, attempts and transparency-log entries of each grade, and fsync while writing the reports (a bench world).
The competitions are built in ``--jobs`` processes. ``--world DIR`` keeps the world (the cluster's data, the state
folder) in DIR and, run again, measures it without building it again (another version of the server, say).

First pass: each board and each list once, from a cold server (a board's statistics computed: 10,000 resamples; a
list's signed reports read, verified and scored), timed apart as first reads. Then ``--rounds``
rounds, each over every competition in a shuffled order: ``/``, its board page, its board JSON, its participant's
list. Prints p50/p95/max per kind against the target (p95 < 200 ms) and writes bench/results/many_competitions.md
(or ``--markdown``).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from sqlalchemy import select  # noqa: E402

from grader import jsonio  # noqa: E402
from grader.data.benchmark import BenchmarkSpec  # noqa: E402
from grader.hosting.clock import utcnow  # noqa: E402
from grader.hosting.db.models import Pin, Result, ResultPart, Worker  # noqa: E402
from grader.hosting.directory.layout import ServerLayout  # noqa: E402
from grader.hosting.identity.participants import create_participant, rekey_local_worker  # noqa: E402
from grader.hosting.intake.submission_rows import received_submission  # noqa: E402
from grader.hosting.leaderboard.parts import acceptance_scorer  # noqa: E402
from grader.hosting.queue import lifecycle  # noqa: E402
from grader.hosting.results.recording import Grading, sign  # noqa: E402
from grader.hosting.serve_many import ManyOptions, open_layout, prepare_entry  # noqa: E402
from grader.hosting.states import State, Track  # noqa: E402
from grader.reports.model import build_report  # noqa: E402
from tests.hosting.postgres import Cluster, _as_postgres, _bin_dir  # noqa: E402
from tests.hosting.support import ManyServer, free_port, write_competition  # noqa: E402

TARGET_MS = 200.0
#: A competition file's default queue timings (the tests' files reap every 0.5 s: twenty such reapers would be load
#: of their own in the server).
QUEUE = {"lease_s": 60, "heartbeat_s": 10, "redispatch_s": 30, "reap_every_s": 2, "infra_backoff_s": 5, "infra_retry_s": 600}
SETTINGS = ("zero-shot", "fine-tuned", None)  # None: no training labels (the undeclared board)
KINDS = ("/", "board page", "board JSON", "submission list")


def competition_names(count: int) -> list[str]:
    return [f"comp-{index:02d}" for index in range(count)]


def write_world_files(folder: Path, count: int) -> None:
    """One competition file per competition: mini's hidden split, the default [leaderboard] (10,000 resamples) and queue timings."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in competition_names(count):
        write_competition(
            folder / f"{name}.toml", name=name, title=f"Competition {name}", tables={"quotas": {"per_day": 1000, "total": 10000}, "queue": QUEUE}
        )


def _report(
    ctx: Any, digests: dict[str, Any], name: str, digest: str, values: dict[str, dict[str, float]], labels: dict[str, Any], at: Any
) -> dict[str, Any]:
    """A worker's report of a hidden-split grade whose per-query values are ``values`` (as tests/hosting/leaderboard_world.py)."""
    spec = BenchmarkSpec(name="mini", version=digests["version"], primary_measure="NDCG@10", tasks=tuple(ctx.tasks), groups={})
    tasks = []
    for task in ctx.tasks:
        per_query = values[task]
        mean = math.fsum(per_query.values()) / len(per_query)
        tasks.append(
            {
                "name": task,
                "split": "test",
                "data_digest": {"sha256": digests["tasks"][task]["test"]},
                "status": "scored",
                "failure": None,
                "measures": {"NDCG@10": mean, "MAP@10": mean / 2},
                "queries": {"judged": len(per_query), "answered": len(per_query), "missing": 0, "extra": 0},
                "per_query": {"measure": "NDCG@10", "values": per_query},
            }
        )
    return build_report(
        benchmark={"name": "mini", "version": digests["version"], "primary_measure": "NDCG@10"},
        subject={"name": name, "kind": "onnx", "digest": {"sha256": digest}},
        tasks=tasks,
        aggregate=spec.aggregate({t["name"]: t["measures"]["NDCG@10"] for t in tasks}),
        policy="strict",
        started_at=at,
        finished_at=at,
        sandbox={"kind": "docker", "blinding": ctx.blinding_key.report() if ctx.blinding_key else None},
        labels={k: v for k, v in labels.items() if k == "training"},
    )


def build_competition(job: tuple[str, str, str, str, int, int, int]) -> tuple[str, str, float]:
    """Prepare competition ``name`` as the server would, then fill it: participants, signed reports, rows. Returns
    (name, the token of its participant ``p00``, seconds)."""
    name, state_dir, competitions_dir, url, participants, count, queries = job
    started = time.perf_counter()
    os.fsync = lambda _fd: None  # a bench world: the reports are written without fsync (the server's writes keep theirs)
    layout = ServerLayout(Path(state_dir)).load()
    ctx = prepare_entry(layout, layout.entries[name], ManyOptions(Path(state_dir), Path(competitions_dir), database=url, workers=0))
    scorer = acceptance_scorer(ctx)
    rng = random.Random(name)
    with ctx.db.session() as session:
        people = []
        token = ""
        for index in range(participants):
            baseline = index == participants - 1
            participant, issued = create_participant(session, "bm25-baseline" if baseline else f"p{index:02d}", baseline=baseline)
            people.append(participant.id)
            token = issued if index == 0 else token
        rekey_local_worker(session, "bench-worker")
        session.flush()
        worker = session.scalar(select(Worker).where(Worker.name == "bench-worker"))
        pin = session.get(Pin, ctx.pin_id)
        assert worker is not None and pin is not None
        worker_id, worker_name, digests = worker.id, worker.name, dict(pin.digests)
    query_ids = {task: [f"{task}-q{i:04d}" for i in range(queries)] for task in ctx.tasks}
    now = utcnow()
    batch = 200
    for first in range(0, count, batch):
        made = []
        for number in range(first, min(count, first + batch)):
            who = number % participants
            setting = SETTINGS[who % len(SETTINGS)]
            labels: dict[str, Any] = {"model": {}}
            if setting is not None:
                labels["training"] = {"setting": setting, "datasets": [] if setting == "zero-shot" else ["mini/train"]}
            level = 0.3 + 0.4 * who / participants + 0.05 * rng.random()
            values = {task: {q: min(1.0, max(0.0, level + rng.uniform(-0.25, 0.25))) for q in ids} for task, ids in query_ids.items()}
            submission_id = lifecycle.new_submission_id()
            digest = f"{name}/{number}".encode().hex().ljust(64, "0")[:64]
            at = now - timedelta(minutes=count - number)
            report = _report(ctx, digests, f"entry-{number}", digest, values, labels, at)
            grading = Grading(
                submission_id=submission_id,
                attempt=1,
                worker_id=worker_id,
                worker_name=worker_name,
                remote=False,
                track=Track.HIDDEN,
                split="test",
                kind="onnx",
                content_digest=digest,
                pin_id=ctx.pin_id,
                pinned=dict(digests.get("tasks", {})),
            )
            folder = ctx.state.result_dir(submission_id, 1)
            folder.mkdir(parents=True)
            signed = sign(ctx.signing_key, folder, report, grading, State.SCORED, parts=scorer)
            submission = received_submission(
                submission_id=submission_id,
                participant_id=people[who],
                pin_id=ctx.pin_id,
                name=f"entry-{number}",
                kind="onnx",
                track=Track.HIDDEN.value,
                split="test",
                upload_path="none",
                upload_sha256="0" * 64,
                upload_bytes=1,
                content_digest=digest,
                uploaded_at=at,
                attempt_limit=3,
                labels=labels,
            )
            made.append((submission, signed))
        with ctx.db.session() as session:
            session.add_all([submission for submission, _ in made])
            session.flush()
            results = []
            for submission, signed in made:
                results.append(
                    Result(
                        submission_id=submission.id,
                        attempt=1,
                        pin_id=ctx.pin_id,
                        worker_id=worker_id,
                        state=State.SCORED.value,
                        failure_code=None,
                        aggregate=signed.aggregate,
                        envelope_path=str(signed.envelope),
                        report_path=str(signed.plain),
                        logs_path=None,
                        created_at=submission.uploaded_at,
                    )
                )
            session.add_all(results)
            session.flush()
            for (submission, signed), result in zip(made, results, strict=True):
                assert signed.part_columns is not None
                session.add(ResultPart(result_id=result.id, **signed.part_columns))
                submission.state = State.SCORED
                submission.attempt = 1
                submission.result_id = result.id
                submission.public_score = signed.aggregate.get("score")
    ctx.dispatcher.close()
    ctx.db.dispose()
    return name, token, time.perf_counter() - started


def open_cluster(bin_dir: Path, world: Path | None) -> tuple[Cluster, bool]:
    """A cluster: a throw-away one, or the one kept in ``world`` (started again on a fresh port); whether it was kept."""
    if world is None or not (world / "pg" / "data").is_dir():
        cluster = Cluster(bin_dir)
        return cluster, False
    cluster = Cluster.__new__(Cluster)  # the kept one: its folder and data as the first run left them
    cluster.bin, cluster.root, cluster.data = bin_dir, world / "pg", world / "pg" / "data"
    cluster.user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    cluster.port = free_port()
    cluster.start(first=True)
    return cluster, True


def stop_cluster(cluster: Cluster, world: Path | None) -> None:
    """Stop the cluster; a kept world's data stays (a clean stop), a throw-away cluster goes."""
    if world is None:
        cluster.stop()
        return
    import subprocess

    subprocess.run(_as_postgres([str(cluster.bin / "pg_ctl"), "-D", str(cluster.data), "-m", "fast", "stop"]), capture_output=True)


def keep_cluster(cluster: Cluster, world: Path) -> None:
    """Move a fresh throw-away cluster into ``world`` (stopped, moved, started again there)."""
    stop_cluster(cluster, world)
    shutil.move(str(cluster.root), str(world / "pg"))
    cluster.root, cluster.data = world / "pg", world / "pg" / "data"
    cluster.start(first=True)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def timed_get(client: httpx.Client, path: str, headers: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    answer = client.get(path, headers=headers)
    elapsed = time.perf_counter() - started
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return elapsed * 1000


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--competitions", type=int, default=20)
    parser.add_argument("--participants", type=int, default=50)
    parser.add_argument("--submissions", type=int, default=40_000, help="scored submissions in all, spread evenly over the competitions")
    parser.add_argument("--queries", type=int, default=100, help="hidden queries per task in each report (mini has 3 tasks)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2, help="processes building the world")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--world", type=Path, default=None, help="keep the world here (or measure the one kept here)")
    args = parser.parse_args()
    per_competition = args.submissions // args.competitions
    bin_dir = _bin_dir()
    if bin_dir is None:
        sys.exit("bench/many_competitions.py: needs the PostgreSQL server binaries (scripts/setup-postgres.sh)")
    load_start = os.getloadavg()
    world = args.world.resolve() if args.world is not None else None
    cluster, kept = open_cluster(bin_dir, world)
    scratch = world if world is not None else Path(tempfile.mkdtemp(prefix="grader-bench-many-"))
    server: ManyServer | None = None
    try:
        files, state = scratch / "competitions", scratch / "state"
        if kept:
            facts = jsonio.load_file(scratch / "world.json")
            url = f"postgresql://{cluster.user}@127.0.0.1:{cluster.port}/{facts['database']}"
            tokens, build_s = facts["tokens"], facts["build_s"]
            args.competitions, args.participants, args.queries, per_competition = facts["size"]  # what was built, not what was asked
            print(f"world: kept in {scratch} (built in {build_s:.0f} s)", flush=True)
        else:
            if world is not None:
                world.mkdir(parents=True, exist_ok=True)
                if os.geteuid() == 0:
                    shutil.chown(world, "postgres", "postgres")
                keep_cluster(cluster, world)
            url = cluster.new_database()
            write_world_files(files, args.competitions)
            open_layout(state, files, postgres=True)
            started = time.perf_counter()
            jobs = [
                (name, str(state), str(files), url, args.participants, per_competition, args.queries) for name in competition_names(args.competitions)
            ]
            with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
                built = pool.map(build_competition, jobs, chunksize=1)
            build_s = time.perf_counter() - started
            tokens = {name: token for name, token, _ in built}
            if world is not None:
                jsonio.write_json(
                    scratch / "world.json",
                    {
                        "database": url.rsplit("/", 1)[1],
                        "tokens": tokens,
                        "build_s": build_s,
                        "size": [args.competitions, args.participants, args.queries, per_competition],
                    },
                )
        print(
            f"world: {args.competitions} competitions x {args.participants} participants, {per_competition * args.competitions} scored submissions in {build_s:.0f} s",
            flush=True,
        )
        started = time.perf_counter()
        server = ManyServer(files, state, workers=0, database=url).start()
        start_s = time.perf_counter() - started
        assert server.process is not None
        samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
        cold: list[float] = []
        cold_lists: list[float] = []
        names = competition_names(args.competitions)
        with httpx.Client(base_url=server.url, timeout=300) as client:
            for name in names:  # the first read of each board computes its statistics; of each list, verifies its reports
                cold.append(timed_get(client, f"/api/v1/competitions/{name}/leaderboard"))
                cold_lists.append(timed_get(client, f"/api/v1/competitions/{name}/submissions", {"Authorization": f"Bearer {tokens[name]}"}))
            listed = client.get(f"/api/v1/competitions/{names[0]}/submissions", headers={"Authorization": f"Bearer {tokens[names[0]]}"}).json()
            for _ in range(args.rounds):
                random.shuffle(names)
                for name in names:
                    samples["/"].append(timed_get(client, "/"))
                    samples["board page"].append(timed_get(client, f"/c/{name}/"))
                    samples["board JSON"].append(timed_get(client, f"/api/v1/competitions/{name}/leaderboard"))
                    own = {"Authorization": f"Bearer {tokens[name]}"}
                    samples["submission list"].append(timed_get(client, f"/api/v1/competitions/{name}/submissions", own))
        rss = rss_mib(server.process.pid)
    finally:
        if server is not None:
            server.stop()
        stop_cluster(cluster, world)
        if world is None:
            shutil.rmtree(scratch, ignore_errors=True)
    load_end = os.getloadavg()
    lines = [
        f"{args.competitions} competitions x {args.participants} participants, {per_competition * args.competitions} scored hidden-split submissions "
        f"({per_competition} per competition, {len(listed)} in the timed participant's list), {args.queries} queries per task x 3 tasks per report; "
        f"PostgreSQL, one schema per competition; `grader serve --competitions` with no local workers",
        f"world built in {build_s:.0f} s ({args.jobs} processes); server ready in {start_s:.1f} s; server RSS after the reads {rss:.0f} MiB",
        f"first read of each board (statistics computed, 10,000 resamples): median {statistics.median(cold):.0f} ms, max {max(cold):.0f} ms",
        f"first read of each participant's list (its {len(listed)} signed reports verified and scored): median "
        f"{statistics.median(cold_lists):.0f} ms, max {max(cold_lists):.0f} ms",
        "",
        f"| read ({args.rounds} rounds x {args.competitions} competitions) | p50 ms | p95 ms | max ms | p95 < {TARGET_MS:.0f} ms |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        values = samples[kind]
        p95 = percentile(values, 0.95)
        lines.append(f"| {kind} | {percentile(values, 0.5):.1f} | {p95:.1f} | {max(values):.1f} | {'yes' if p95 < TARGET_MS else 'NO'} |")
    machine = (
        f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), Python {platform.python_version()}; "
        f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end (a machine shared with other jobs)"
    )
    command = "nice .venv/bin/python bench/many_competitions.py " + " ".join(sys.argv[1:])
    text = "\n".join(lines)
    print(text)
    print(machine)
    default_size = (args.competitions, args.participants, args.submissions) == (20, 50, 40_000)
    target = args.markdown or (
        REPO / "bench" / "results" / "many_competitions.md" if default_size else Path(tempfile.gettempdir()) / "many_competitions.md"
    )
    target.write_text(f"# A server of many competitions: reads on PostgreSQL\n\n`{command.strip()}`\n\n{text}\n\n{machine}\n", encoding="utf-8")
    print(f"written: {target}")


if __name__ == "__main__":
    main()
