"""memhog: allocate and touch memory in 100 MB steps until killed.

A safety cap (MEMHOG_MAX_MB, default 8192) keeps it from eating a host that set
no memory limit: reaching it exits 4 with 'NOT KILLED'.
"""

import os

from harness import log

STEP = 100 * 1000 * 1000
cap = int(os.environ.get("MEMHOG_MAX_MB", "8192")) * 1000 * 1000
held = []
while len(held) * STEP < cap:
    held.append(b"\x01" * STEP)  # written byte by byte: every page is touched
    log(f"memhog: holding {len(held) * 100} MB")
log(f"memhog: NOT KILLED at {len(held) * 100} MB (cap reached)")
raise SystemExit(4)
