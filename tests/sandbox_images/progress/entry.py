"""progress: writes /output/progress.json while it runs (docs/protocol.md), then a valid run with no hits.

Behaviour chosen by the `task` field of /input/task.json; each state is held HOLD_S seconds, so
the host's look (about once a second) sees it:

| task | what /output/progress.json says, in turn |
|---|---|
| `steps` (and any name not below) | `{"encoded": N}` for N = a quarter, a half, three quarters of the M documents, then M |
| `hostile` | M + 1; bytes that are not JSON; 300 bytes (valid JSON padded); a link to a valid file saying M; a FIFO; a folder; then a half of M (the only valid count); a quarter of M (decreasing); a link again (its last word) |

Exit status 0 either way: the file never fails a grade.
"""

import json
import os
import shutil
import time

from harness import OUTPUT, empty_run, log, read_jsonl, read_task, write_bytes

HOLD_S = 1.2
NAME = "progress.json"
PATH = os.path.join(OUTPUT, NAME)


def clear() -> None:
    if os.path.isdir(PATH) and not os.path.islink(PATH):
        shutil.rmtree(PATH)
    elif os.path.lexists(PATH):
        os.unlink(PATH)


def say(data: bytes) -> None:
    """Replace the progress file with ``data`` (a regular file, atomically), and hold it."""
    if os.path.isdir(PATH) and not os.path.islink(PATH):
        shutil.rmtree(PATH)
    write_bytes(NAME, data)
    time.sleep(HOLD_S)


def count(n: int) -> None:
    say(json.dumps({"encoded": n}).encode())


def link_to_valid(n: int) -> None:
    target = os.path.join(OUTPUT, "elsewhere.json")
    with open(target, "w", encoding="utf-8") as handle:
        json.dump({"encoded": n}, handle)
    os.chmod(target, 0o644)
    clear()
    os.symlink(target, PATH)
    time.sleep(HOLD_S)


def main() -> int:
    behaviour = read_task().get("task", "steps")
    total = len(read_jsonl("corpus.jsonl"))
    log(f"progress: behaviour {behaviour!r}: {total} documents")
    if behaviour == "hostile":
        count(total + 1)
        say(b"\xff\xfe not json at all")
        say(b'{"encoded": 1}' + b" " * 300)
        link_to_valid(total)
        clear()
        os.mkfifo(PATH, 0o644)
        time.sleep(HOLD_S)
        clear()
        os.mkdir(PATH)
        time.sleep(HOLD_S)
        count(total // 2)
        count(total // 4)
        link_to_valid(total)
    else:
        for n in (total // 4, total // 2, 3 * total // 4, total):
            count(n)
    empty_run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
