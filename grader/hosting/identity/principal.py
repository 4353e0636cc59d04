"""Who an authenticated caller is (plain data, detached from any database session)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    """What a credential lets its holder do."""

    PARTICIPANT = "participant"
    WORKER = "worker"
    METRICS = "metrics"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its role, id and name; ``fingerprint`` ties a web session to the token signed in with."""

    role: Role
    id: int
    name: str
    fingerprint: str = ""
