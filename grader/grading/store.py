"""Finished tasks, stored so an interrupted grading resumes where it stopped.

Each finished task is one JSON file under ``OUT/tasks/``, written atomically and
keyed by everything its result depends on: submission digest, task data digest,
split, policy, measures, depth and grader version. A crash loses at most the task
in progress; a changed input never reuses a stale result.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grader import __version__
from grader.files import atomic_write_text


class TaskStore:
    """Reads and writes finished task entries under ``out_dir/tasks``."""

    def __init__(self, out_dir: Path) -> None:
        self.folder = out_dir / "tasks"

    @staticmethod
    def key(**parts: Any) -> dict[str, Any]:
        """The identity of a task result (plus the grader version)."""
        return {"grader": __version__, **parts}

    def _path(self, task: str, key: dict[str, Any]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:24]
        return self.folder / f"{task}.{digest}.json"

    def load(self, task: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """The stored entry for exactly this key, or None (also for an unreadable file)."""
        path = self._path(task, key)
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(stored, dict) or stored.get("key") != key or not isinstance(stored.get("entry"), dict):
            return None
        return stored["entry"]

    def save(self, task: str, key: dict[str, Any], entry: dict[str, Any]) -> Path:
        """Store ``entry`` atomically."""
        path = self._path(task, key)
        atomic_write_text(path, json.dumps({"key": key, "entry": entry}, indent=1, sort_keys=True, allow_nan=False) + "\n")
        return path
