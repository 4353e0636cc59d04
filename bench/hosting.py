"""Hosting overhead: grading the example encoder on mini through `grader serve` versus `grader run`, in one run.

    .venv/bin/python bench/hosting.py [--rounds 3] [--latency-samples 8]

Both sides grade submissions_example/onnx-lsa on mini's hidden split in the
Docker sandbox with the same limits (1 CPU, 2 GiB, 600 s). Rounds alternate
(direct, served, direct, served...) so that a busy machine hits both alike.

- direct: wall time of the `grader run` process (start-up, grading, report).
- served: wall time from `grader submit` starting (local checks, packing,
  upload) to the client seeing `scored` (claim, fetch, grading in a warm
  worker, signing), polled every 0.1 s.
- upload-to-running: from the audit row `received` (the upload completed) to
  the row `running` (a worker claimed it), with one idle worker, submissions
  sent one at a time.
Prints medians and the ratio served/direct (target <= 1.10) and the median
upload-to-running time (target < 1 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.hosting.db.models import Transition  # noqa: E402
from grader.hosting.db.session import open_database  # noqa: E402
from grader.hosting.participant.client import HostingClient  # noqa: E402
from tests.hosting.support import Server, admin, write_competition  # noqa: E402

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
LIMITS = {"time_limit_s": 600, "memory": "2g", "cpus": 1}


def direct(out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from grader.cli.main import main; main()",
            "run",
            str(EXAMPLE),
            "--benchmark",
            "mini",
            "--split",
            "test",
            "--sandbox",
            "docker",
            "--time-limit",
            "600",
            "--memory",
            "2g",
            "--cpus",
            "1",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def served(client: HostingClient) -> tuple[float, str]:
    started = time.perf_counter()
    submission_id = client.submit(EXAMPLE)["id"]
    view = client.wait(submission_id, poll_s=0.1)
    assert view["state"] == "scored", view
    return time.perf_counter() - started, submission_id


def upload_to_running(state: Path, submission_ids: list[str]) -> list[float]:
    db = open_database(state)
    values = []
    with db.session() as session:
        for submission_id in submission_ids:
            rows = session.scalars(select(Transition).where(Transition.submission_id == submission_id).order_by(Transition.id)).all()
            received = next(r.at for r in rows if r.to_state == "received")
            running = next(r.at for r in rows if r.to_state == "running")
            values.append((running - received).total_seconds())
    db.dispose()
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grader-bench-hosting-") as scratch:
        root = Path(scratch)
        competition = write_competition(
            root / "c.toml",
            tables={
                "limits": LIMITS,
                "quotas": {"per_day": 1000, "total": 1000, "concurrent": 2},
                "queue": {"lease_s": 60, "heartbeat_s": 10, "redispatch_s": 30, "reap_every_s": 2},
            },
        )
        server = Server(competition, root / "state", workers=1).start()
        try:
            client = HostingClient(server.url, admin(server.state, "add-participant", "bench").strip())
            served(client)  # warm-up: the worker's first grade loads the runner image's layers
            direct(root / "warm")
            direct_times, served_times, ids = [], [], []
            for index in range(args.rounds):
                direct_times.append(direct(root / f"direct-{index}"))
                elapsed, submission_id = served(client)
                served_times.append(elapsed)
                ids.append(submission_id)
            for _ in range(max(0, args.latency_samples - len(ids))):
                ids.append(served(client)[1])
            latencies = upload_to_running(server.state, ids)
        finally:
            server.stop()
    d, s = statistics.median(direct_times), statistics.median(served_times)
    print(f"grading onnx-lsa on mini (test split, Docker sandbox, 1 CPU), {args.rounds} alternating rounds")
    print(f"  direct `grader run`     median {d:6.2f} s   ({', '.join(f'{t:.2f}' for t in direct_times)})")
    print(f"  through `grader serve`  median {s:6.2f} s   ({', '.join(f'{t:.2f}' for t in served_times)})")
    print(f"  hosting overhead ratio  {s / d:.3f}x   (target <= 1.10x)")
    print(f"upload completed -> running (idle worker), {len(latencies)} submissions")
    print(f"  median {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms   (target median < 1 s)")
    print(json.dumps({"direct_s": direct_times, "served_s": served_times, "ratio": s / d, "upload_to_running_s": latencies}))


if __name__ == "__main__":
    main()
