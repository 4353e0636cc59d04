"""snoop: walk the whole filesystem looking for judgements; report findings, exit 0.

A finding is a file whose path contains 'qrel' or whose content contains the
BEIR qrels header 'query-id<TAB>corpus-id'. The run is valid: every query gets
one hit, the first corpus document, whose score is the number of findings (so a
grader test can assert the score is 0).
"""

import os
import re
import stat

from harness import log, read_jsonl, write_run

SKIP = {"/proc", "/sys", "/dev"}
NAME = re.compile(r"qrel", re.IGNORECASE)
NEEDLE = b"query-id\tcorpus-id"
CHUNK = 1 << 20
MAX_BYTES = 256 << 20  # per file

findings = []
scanned = 0
for top, dirs, files in os.walk("/", onerror=lambda e: None):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in SKIP]
    for name in files:
        path = os.path.join(top, name)
        if NAME.search(path):
            findings.append(("path", path))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            scanned += 1
            tail, seen = b"", 0
            while seen < MAX_BYTES:
                block = os.read(fd, CHUNK)
                if not block:
                    break
                if NEEDLE in tail + block:
                    findings.append(("content", path))
                    break
                tail, seen = block[-len(NEEDLE):], seen + len(block)
        except OSError:
            pass
        finally:
            os.close(fd)

try:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for row in handle:
            fields = row.split()
            log(f"snoop: mount {fields[4]} (root {fields[3]}, {fields[5]})")
except OSError:
    pass
for kind, path in findings:
    log(f"snoop: found ({kind}) {path}")
log(f"snoop: scanned {scanned} files, {len(findings)} findings")
corpus = read_jsonl("corpus.jsonl")
first = corpus[0]["_id"] if corpus else None
write_run([(q["_id"], [(first, float(len(findings)))] if first else []) for q in read_jsonl("queries.jsonl")])
