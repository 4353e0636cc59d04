"""sleeper: sleep an hour (no SIGTERM handler: as PID 1 it ignores SIGTERM)."""

import time

from harness import log

log("sleeper: sleeping 3600 s")
time.sleep(3600)
log("sleeper: woke up")
