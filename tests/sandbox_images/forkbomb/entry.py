"""forkbomb: fork sleeping children until the kernel refuses (the pids limit); then exit 1.

Each child waits on a pipe and exits when the parent does. A safety cap
(FORKBOMB_MAX, default 2000) keeps it from taking a host down when no pids
limit is set: reaching it exits 0 with 'NOT REFUSED'.
"""

import os

from harness import log

cap = int(os.environ.get("FORKBOMB_MAX", "2000"))
read_end, write_end = os.pipe()
children = 0
refused = None
while children < cap:
    try:
        pid = os.fork()
    except OSError as error:
        refused = error
        break
    if pid == 0:
        os.close(write_end)
        try:
            os.read(read_end, 1)  # returns at EOF: when the parent has exited
        finally:
            os._exit(0)
    children += 1

if refused is None:
    log(f"forkbomb: NOT REFUSED after {children} children (cap {cap})")
    raise SystemExit(0)
log(f"forkbomb: refused after {children} children ({refused.strerror})")
raise SystemExit(1)
