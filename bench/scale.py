"""Throughput of the distributed setting with 1 and with 2 workers, on submissions that spend their time waiting.

Each submission's container sleeps (``--sleep`` seconds per task) and then
answers with an empty run, so two shared cores are not the limit: the ratio of
throughputs shows whether dispatch (Celery on Redis) and bookkeeping
(PostgreSQL, leases, signed results) keep up (target >= 1.8x with 2 workers).

    .venv/bin/python bench/scale.py                 # 12 submissions, 4 s sleep
    .venv/bin/python bench/scale.py --submissions 20 --sleep 6

Needs Docker, redis-server (scripts/setup-redis.sh), PostgreSQL binaries
(scripts/setup-postgres.sh) and the test
images (tests/sandbox_images/build.sh tiny-sleep). It reuses the test
harness (tests/hosting/distributed.py): the real CLI processes on loopback.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.hosting.participant.client import packed  # noqa: E402
from tests.hosting.distributed import TINY_SLEEP, deploy, tiny_submission  # noqa: E402
from tests.hosting.postgres import Cluster, _bin_dir  # noqa: E402
from tests.hosting.redis import RedisServer, _binary  # noqa: E402
from tests.hosting.support import wait_for  # noqa: E402


def sleeper_image(seconds: int) -> str:
    """A tiny image that sleeps ``seconds`` per task (built from grader-test-tiny-sleep:1; a unique bench tag)."""
    import docker

    tag = f"grader-bench-sleep{seconds}:1"
    client = docker.from_env()
    client.images.build(fileobj=io.BytesIO(f"FROM {TINY_SLEEP}\nENV TINY_SLEEP_S={seconds}\n".encode()), tag=tag, rm=True, network_mode="none")
    return tag


def run_once(workers: int, submissions: int, image: str, broker: RedisServer, cluster: Cluster) -> float:
    """Seconds from the first upload to the last terminal state, with ``workers`` workers already started."""
    root = Path(tempfile.mkdtemp(prefix=f"grader-bench-scale-{workers}-"))
    each = max(1, submissions // 4)
    d = deploy(
        root,
        broker=broker.url,
        database=cluster.new_database(),
        workers=workers,
        tasks=["text2code"],
        quotas={"per_day": each, "total": each, "concurrent": each, "sample_per_day": 1},
        queue={"lease_s": 60, "heartbeat_s": 5, "redispatch_s": 10, "reap_every_s": 1},
    )
    try:
        for worker in d.workers:
            wait_for(lambda w=worker: "ready." in w.log.read_text(), timeout=60, what=f"worker {worker.name} ready")
        clients = [d.participant(f"b{n}")[1] for n in range((submissions + each - 1) // each)]
        ids = []
        with packed(tiny_submission(root, "bench", image)) as archive:
            started = time.monotonic()
            for n in range(submissions):
                ids.append(clients[n // each].upload(archive)["id"])
            rows = d.wait_all_terminal(ids, timeout=60 + submissions * 30)
            elapsed = time.monotonic() - started
        bad = [row for row in rows.values() if row["state"] != "scored"]
        assert not bad, bad
        return elapsed
    finally:
        for worker in d.workers:
            worker.stop()
        d.server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--sleep", type=int, default=4, help="seconds each submission's container waits")
    args = parser.parse_args()
    binary, pg = _binary(), _bin_dir()
    if binary is None or pg is None:
        print("bench/scale.py: needs redis-server and PostgreSQL binaries (scripts/setup-redis.sh, scripts/setup-postgres.sh)", file=sys.stderr)
        return 2
    image = sleeper_image(args.sleep)
    broker, cluster = RedisServer(binary), Cluster(pg)
    try:
        one = run_once(1, args.submissions, image, broker, cluster)
        two = run_once(2, args.submissions, image, broker, cluster)
    finally:
        broker.close()
        cluster.stop()
    print(f"{args.submissions} submissions, each waiting {args.sleep} s in its container (one task of mini), Celery on Redis, PostgreSQL")
    print("| workers | wall time (s) | submissions/min |")
    print("|---|---|---|")
    print(f"| 1 | {one:.1f} | {60 * args.submissions / one:.1f} |")
    print(f"| 2 | {two:.1f} | {60 * args.submissions / two:.1f} |")
    print(f"ratio (2 workers / 1 worker throughput): {one / two:.2f}x (target >= 1.8x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
