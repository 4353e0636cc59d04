"""symlink-out: make every expected output a symlink to a host-sensitive path; exit 0."""

import os

from harness import log

for name, target in (("run.jsonl", "/etc/passwd"), ("queries.npy", "/etc/shadow"), ("corpus.npy", "/proc/self/environ")):
    os.symlink(target, f"/output/{name}")
    log(f"symlink-out: /output/{name} -> {target}")
