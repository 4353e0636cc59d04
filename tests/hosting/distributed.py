"""The distributed setting of the hosting tests: `grader serve --broker` (PostgreSQL, Redis) and `grader worker --broker` processes.

Everything is real and on loopback: the server and each worker are separate
processes of the real CLI; workers reach the server only over HTTP and the
broker; each has its own token and Ed25519 key pair.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.hosting.participant.client import TERMINAL, HostingClient
from grader.reports.keys import load_public_key
from grader.reports.verify import verify_report_file
from tests.hosting.support import REPO, Server, admin, wait_for, write_competition
from tests.sandbox_support import image_of

TINY = image_of("tiny")
TINY_SLEEP = image_of("tiny-sleep")


def tiny_submission(root: Path, name: str, image: str = TINY) -> Path:
    """A Docker submission of a tiny test image (packed with its ~2 MB `docker save` tar at upload)."""
    folder = root / "submissions" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.json").write_text(
        json.dumps({"kind": "docker", "name": name, "mode": "retrieve", "image": image, "training": {"setting": "zero-shot", "datasets": []}})
    )
    return folder


class BrokerServer(Server):
    """`grader serve --broker URL --workers 0 --database URL` in a subprocess."""

    def __init__(self, competition: Path, state: Path, *, broker: str, database: str) -> None:
        super().__init__(competition, state, workers=0, database=database)
        self.broker = broker

    def serve_args(self) -> list[str]:
        return [
            "serve",
            "--competition",
            str(self.competition),
            "--state",
            str(self.state),
            "--port",
            str(self.port),
            "--workers",
            "0",
            "--database",
            str(self.database),
            "--broker",
            self.broker,
        ]


@dataclass
class WorkerProcess:
    """One `grader worker --broker` process (a registered remote worker)."""

    name: str
    token: str
    key_dir: Path
    log: Path
    server_url: str
    broker: str
    #: the data copy `grader admin export-worker-data` wrote (pseudonymous ids, no judgements)
    data: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self, server_url: str | None = None) -> WorkerProcess:
        args = [
            "worker",
            "--server",
            server_url or self.server_url,
            "--broker",
            self.broker,
            "--name",
            self.name,
            "--key-dir",
            str(self.key_dir),
            "--min-free-disk",
            "10m",
            *(["--data", str(self.data)] if self.data is not None else []),
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from grader.cli.main import main; main()", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={**os.environ, "GRADER_WORKER_TOKEN": self.token},
            )
        return self

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # warm shutdown: the current grading finishes first
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@dataclass
class Deployment:
    """A server, its database and broker, and N workers."""

    root: Path
    server: BrokerServer
    workers: list[WorkerProcess] = field(default_factory=list)

    def add_worker(self, name: str, *, server_url: str | None = None) -> WorkerProcess:
        token = admin(self.server.state, "add-worker", name, database=self.server.database).strip()
        data = self.root / "worker-data"
        if not data.exists():  # as deploy.md's step 7: one export, copied to every worker
            admin(self.server.state, "export-worker-data", "--out", str(data), database=self.server.database)
        worker = WorkerProcess(
            name, token, self.root / "keys" / name, self.root / f"worker-{name}.log", server_url or self.server.url, self.server.broker, data
        )
        self.workers.append(worker.start())
        return worker

    def participant(self, name: str) -> tuple[str, HostingClient]:
        token = admin(self.server.state, "add-participant", name, database=self.server.database).strip()
        return token, HostingClient(self.server.url, token)

    def host_rows(self) -> list[dict[str, Any]]:
        return json.loads(admin(self.server.state, "submissions", "--json", database=self.server.database))

    def lease_holder(self, submission_id: str) -> WorkerProcess | None:
        """The worker process holding the current lease of ``submission_id`` (read from the database, as the host could)."""
        from grader.hosting.db.models import State, Submission, Worker
        from grader.hosting.db.session import open_database

        db = open_database(self.server.state, self.server.database)
        try:
            with db.session() as session:
                submission = session.get(Submission, submission_id)
                if submission is None or submission.state != State.RUNNING.value or submission.lease_worker_id is None:
                    return None
                worker = session.get(Worker, submission.lease_worker_id)
                name = worker.name if worker is not None else None
        finally:
            db.dispose()
        return next((w for w in self.workers if w.name == name), None)

    def wait_all_terminal(self, ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
        def done() -> dict[str, dict[str, Any]] | None:
            rows = {row["id"]: row for row in self.host_rows() if row["id"] in ids}
            return rows if len(rows) == len(ids) and all(row["state"] in TERMINAL for row in rows.values()) else None

        return wait_for(done, timeout=timeout, interval=0.5, what="every submission terminal")  # type: ignore[no-any-return]

    def check_invariants(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """Every submission terminal, none scored twice, every published report verifies under the host key and names a worker."""
        rows = {row["id"]: row for row in self.host_rows() if row["id"] in ids}
        assert set(rows) == set(ids)
        host_key = load_public_key(self.server.state / "keys" / "grader.pub")
        names = {w.name for w in self.workers}
        for submission_id, row in rows.items():
            assert row["state"] in TERMINAL, row
            history = admin(self.server.state, "history", submission_id, database=self.server.database)
            assert sum(history.count(f"-> {state} ") for state in ("scored", "failed", "error")) == 1, history
            envelopes = sorted((self.server.state / "results" / submission_id).glob("*/report.dsse.json"))
            assert len(envelopes) == (1 if row["state"] == "scored" else len(envelopes)), (row, envelopes)
            assert len(envelopes) <= 1, envelopes  # one published grade, never two
            for envelope in envelopes:
                verified = verify_report_file(envelope, host_key)
                assert verified.report["labels"]["graded_by"]["worker"] in names
        return rows


def deploy(
    root: Path,
    *,
    broker: str,
    database: str,
    workers: int = 2,
    quotas: dict[str, int] | None = None,
    max_attempts: int = 3,
    queue: dict[str, float] | None = None,
    **top: Any,
) -> Deployment:
    """Start a server on ``database`` and ``broker`` and ``workers`` worker processes."""
    tables: dict[str, dict[str, Any]] = {
        "quotas": quotas or {"per_day": 50, "total": 100, "concurrent": 10, "sample_per_day": 5},
        "limits": {"time_limit_s": 30, "memory": "256m", "cpus": 1},
    }
    if queue:
        tables["queue"] = queue
    competition = write_competition(root / "c.toml", tables=tables, max_attempts=max_attempts, **top)
    server = BrokerServer(competition, root / "state", broker=broker, database=database).start()
    deployment = Deployment(root, server)
    for index in range(1, workers + 1):
        deployment.add_worker(f"w{index}")
    return deployment
