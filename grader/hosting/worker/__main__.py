"""``python -m grader.hosting.worker --server URL --name NAME`` (token in GRADER_WORKER_TOKEN)."""

from __future__ import annotations

import argparse
import os
import sys

from grader.hosting.worker.loop import run_worker


def main() -> int:
    parser = argparse.ArgumentParser(prog="grader-worker")
    parser.add_argument("--server", required=True)
    parser.add_argument("--name", default="worker")
    parser.add_argument("--once", action="store_true", help="grade at most one job, then exit")
    parser.add_argument("--exit-with-parent", action="store_true", help="exit when the parent process (a local server) dies")
    args = parser.parse_args()
    token = os.environ.get("GRADER_WORKER_TOKEN")
    if not token:
        print("grader worker: GRADER_WORKER_TOKEN is not set", file=sys.stderr)
        return 2
    run_worker(args.server, token, name=args.name, once=args.once, exit_with_parent=args.exit_with_parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
