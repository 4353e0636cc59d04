"""The aggregation policy's name (:class:`Policy`), apart from the code that applies it (:mod:`grader.metrics.policy`).

Its own module so that what only names a policy (the server's scoring jobs, which the
host's admin commands import) does not load numpy (it is slow to import).
"""

from __future__ import annotations

from enum import Enum


class Policy(str, Enum):
    """How queries are selected and scores read; the value is the CLI spelling."""

    STRICT = "strict"
    COIR = "coir"
