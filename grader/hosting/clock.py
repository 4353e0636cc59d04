"""The one clock of the hosting layer (UTC, timezone-aware)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """RFC 3339 with ``Z``, to the second, or None."""
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
