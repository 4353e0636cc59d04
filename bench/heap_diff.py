"""What grew between two tracemalloc snapshots (bench/heaptrace/sitecustomize.py writes them): the largest differences.

    .venv/bin/python bench/heap_diff.py OLD.snap NEW.snap [--top 25] [--frames 4] [--group lineno|traceback]

Each row: the size difference (KiB), the count difference, and the allocation's place (its innermost ``--frames``
frames of grader or the standard library; site-packages frames are shown too when they are all there is).
"""

from __future__ import annotations

import argparse
import tracemalloc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--group", choices=["lineno", "traceback"], default="traceback")
    args = parser.parse_args()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]
    old = tracemalloc.Snapshot.load(args.old).filter_traces(ignore)
    new = tracemalloc.Snapshot.load(args.new).filter_traces(ignore)
    total_old = sum(stat.size for stat in old.statistics("filename"))
    total_new = sum(stat.size for stat in new.statistics("filename"))
    print(f"# traced: {total_old / 1024:.0f} KiB -> {total_new / 1024:.0f} KiB ({(total_new - total_old) / 1024:+.0f} KiB)")
    for stat in new.compare_to(old, args.group)[: args.top]:
        frames = [f"{frame.filename.split('site-packages/')[-1].split('/memory/')[-1]}:{frame.lineno}" for frame in stat.traceback]
        print(f"{stat.size_diff / 1024:+10.0f} KiB {stat.count_diff:+8d}  {' <- '.join(frames[: args.frames])}")


if __name__ == "__main__":
    main()
