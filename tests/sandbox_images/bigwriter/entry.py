"""bigwriter: grow /output/run.jsonl in 1 MiB steps, then create many small files, until refused.

Exits 1 when a write is refused (ENOSPC, EFBIG, EDQUOT, ...). Safety caps
(BIGWRITER_MAX_MB, default 2048; BIGWRITER_MAX_FILES, default 100000) keep it
from filling a host disk that has no cap: reaching both exits 0 with 'NOT REFUSED'.
"""

import os

from harness import log

max_bytes = int(os.environ.get("BIGWRITER_MAX_MB", "2048")) << 20
max_files = int(os.environ.get("BIGWRITER_MAX_FILES", "100000"))
line = b'{"query_id": "q", "hits": []}\n'
block = line * ((1 << 20) // len(line))
refused = []

written = 0
try:
    with open("/output/run.jsonl", "wb", buffering=0) as handle:
        while written < max_bytes:
            written += handle.write(block)
except OSError as error:
    refused.append(f"run.jsonl at {written >> 20} MiB ({error.strerror})")
log(f"bigwriter: run.jsonl: {written >> 20} MiB written")

created = 0
try:
    os.makedirs("/output/many", exist_ok=True)
    while created < max_files:
        with open(f"/output/many/{created:07d}.txt", "wb") as handle:
            handle.write(b"x" * 100)
        created += 1
except OSError as error:
    refused.append(f"file {created} ({error.strerror})")
log(f"bigwriter: {created} small files created")

if refused:
    log(f"bigwriter: refused: {'; '.join(refused)}")
    raise SystemExit(1)
log(f"bigwriter: NOT REFUSED ({written >> 20} MiB, {created} files)")
