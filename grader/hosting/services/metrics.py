"""Monitoring in the Prometheus text format: computed from the database at each scrape (the one source of truth).

What a host of many workers watches (docs/deploy.md): the queue depth and the
age of the oldest queued job (a stalled broker or too few workers), jobs
running per worker (a stuck or drained worker), and how submissions ended by
failure code (a burst of INFRA is the platform's fault, not the participants').
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from grader.hosting.clock import utcnow
from grader.hosting.db.models import Replica, State, Submission, Worker
from grader.hosting.db.session import Database
from grader.hosting.queue.dispatch import Dispatcher


class _DatabaseCollector(Collector):
    def __init__(self, db: Database, dispatcher: Dispatcher) -> None:
        self.db, self.dispatcher = db, dispatcher

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = utcnow()
        with self.db.session() as session:
            by_state = dict(session.execute(select(Submission.state, func.count()).group_by(Submission.state)).all())
            oldest = session.scalar(select(func.min(Submission.uploaded_at)).where(Submission.state == State.QUEUED.value))
            running = session.execute(
                select(Worker.name, func.count(Submission.id))
                .outerjoin(Submission, (Submission.lease_worker_id == Worker.id) & (Submission.state == State.RUNNING.value))
                .where(Worker.revoked_at.is_(None))
                .group_by(Worker.name)
            ).all()
            ended = session.execute(
                select(Submission.state, Submission.failure_code, func.count())
                .where(Submission.state.in_([State.FAILED.value, State.ERROR.value]))
                .group_by(Submission.state, Submission.failure_code)
            ).all()
            dissents = session.execute(
                select(Worker.name, func.count(Replica.id))
                .join(Replica, Replica.blamed_worker_id == Worker.id)
                .where(Replica.verdict == "dissent")
                .group_by(Worker.name)
            ).all()
        states = GaugeMetricFamily("grader_submissions", "Submissions by state", labels=["state"])
        for state in State:
            states.add_metric([state.value], float(by_state.get(state, 0)))
        yield states
        yield GaugeMetricFamily("grader_queue_depth", "Jobs queued and not claimed", value=float(by_state.get(State.QUEUED, 0)))
        age = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
        yield GaugeMetricFamily("grader_oldest_queued_seconds", "Seconds since the upload of the oldest queued job (0 if none)", value=age)
        per_worker = GaugeMetricFamily("grader_running_jobs", "Jobs running now, by worker (active workers)", labels=["worker"])
        for name, count in running:
            per_worker.add_metric([name], float(count))
        yield per_worker
        failures = GaugeMetricFamily(
            "grader_failures", "Submissions that ended failed (participant) or error (platform), by failure code", labels=["state", "code"]
        )
        for ended_state, code, count in ended:
            failures.add_metric([ended_state, code or "none"], float(count))
        yield failures
        flagged = GaugeMetricFamily(
            "grader_replica_dissents",
            "Replicas a worker returned that disagreed with the majority of its job (replicas > 1; a flag)",
            labels=["worker"],
        )
        for name, count in dissents:
            flagged.add_metric([name], float(count))
        yield flagged
        counts = self.dispatcher.broker_counts()
        if counts is not None:
            published, failed = counts
            dispatch = GaugeMetricFamily("grader_broker_dispatches", "Celery wake-ups since the server started, by outcome", labels=["outcome"])
            dispatch.add_metric(["published"], float(published))
            dispatch.add_metric(["failed"], float(failed))
            yield dispatch


def render(db: Database, dispatcher: Dispatcher) -> bytes:
    """The metrics page (Prometheus text exposition format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_DatabaseCollector(db, dispatcher))
    return generate_latest(registry)
