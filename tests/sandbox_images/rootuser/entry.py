"""rootuser: runs as root (the image has no USER line); otherwise writes a valid empty run."""

import os

from harness import empty_run, log

log(f"rootuser: running as uid {os.getuid()}")
empty_run()
