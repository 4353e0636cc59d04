"""write-input: try to write into /input (and the root filesystem); exit 3 if all refused, 0 if any write landed."""

import os

from harness import empty_run, log

landed = []
attempts = [
    ("create /input/pwned", lambda: open("/input/pwned", "w").write("pwned\n")),
    ("overwrite /input/queries.jsonl", lambda: open("/input/queries.jsonl", "a").write("{}\n")),
    ("chmod /input/task.json", lambda: os.chmod("/input/task.json", 0o666)),
    ("mkdir /input/dir", lambda: os.mkdir("/input/dir")),
    ("create /etc/pwned (root fs)", lambda: open("/etc/pwned", "w").write("pwned\n")),
    ("create /app/pwned (root fs)", lambda: open("/app/pwned", "w").write("pwned\n")),
]
for what, attempt in attempts:
    try:
        attempt()
        landed.append(what)
        log(f"write-input: {what}: WRITTEN")
    except OSError as error:
        log(f"write-input: {what}: refused ({error.strerror})")

if landed:
    empty_run()
    log(f"write-input: WROTE: {', '.join(landed)}")
    raise SystemExit(0)
log("write-input: every write refused")
raise SystemExit(3)
