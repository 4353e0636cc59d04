"""Finished tasks, stored so an interrupted grading resumes where it stopped.

Each finished task is one JSON file under ``OUT/tasks/``, written atomically and
keyed by everything its result depends on: submission digest, task data digest,
split, policy, measures, depth, sandbox and limits, PCA dimensions, whether
embeddings are kept, the grader version and the report's schema version. A crash loses at most the task in
progress; a changed input never reuses a stale result.

What is read back is not trusted: a stored entry is reused only if it is
well-formed, valid against the report schema's task definition, and consistent
with its key (name, split, data digest, exactly the measures asked for). A run
that signs its report also requires the entry's MAC under its own key
(:mod:`grader.grading.store_auth`). Anything else is graded again, with the
reason given; nothing read from the store is ever fatal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from grader import __version__, jsonio
from grader.grading.store_auth import ALGORITHM, StoreAuthenticator
from grader.reports.model import SCHEMA_VERSION
from grader.schemas import load_schema

#: A stored entry is a few kB; anything far larger is not one the grader wrote.
MAX_ENTRY_BYTES = 16 << 20


@dataclass(frozen=True)
class Loaded:
    """The outcome of looking a task up: the entry to reuse, or why there is none (None: nothing stored)."""

    entry: dict[str, Any] | None
    rejected: str | None = None


@cache
def _task_validator() -> jsonschema.protocols.Validator:
    schema = load_schema("report")
    task_schema = {"$schema": schema.get("$schema"), "$defs": schema["$defs"], "$ref": "#/$defs/task"}
    cls = jsonschema.validators.validator_for(schema)
    return cls(task_schema)


def entry_problem(entry: Any, key: dict[str, Any]) -> str | None:
    """Why ``entry`` cannot be the result stored under ``key``, or None if it can."""
    if not isinstance(entry, dict):
        return "the entry is not an object"
    if entry.get("name") != key.get("task"):
        return "the entry names another task"
    body = {k: v for k, v in entry.items() if k != "name"}
    error = next(iter(_task_validator().iter_errors(body)), None)
    if error is not None:
        where = "/" + "/".join(str(p) for p in error.absolute_path)
        return f"the entry breaks the report schema at {where[:120]}"
    if body["split"] != key.get("split") or body["data_digest"].get("sha256") != key.get("data"):
        return "the entry was graded on other data"
    if body["status"] == "scored":
        expected = sorted(key.get("measures") or [])
        if sorted(body["measures"]) != expected:
            return "the entry has other measures than this run asks for"
        pca = body.get("pca") or {}
        if sorted(pca) != sorted(str(d) for d in key.get("pca_dims") or []):
            return "the entry has other PCA dimensions than this run asks for"
        if any(sorted(result["measures"]) != expected for result in pca.values()):
            return "the entry's PCA results have other measures than this run asks for"
    return None


class TaskStore:
    """Reads and writes finished task entries under ``out_dir/tasks``.

    With an ``authenticator`` (a signed run), entries are written with a MAC and
    only entries with a valid MAC under the same key are reused.
    """

    def __init__(self, out_dir: Path, authenticator: StoreAuthenticator | None = None) -> None:
        self.folder = out_dir / "tasks"
        self.authenticator = authenticator

    @staticmethod
    def key(**parts: Any) -> dict[str, Any]:
        """The identity of a task result (plus the grader version and the report schema's).

        The schema version is part of it so that an entry stored before a field was added
        (version 2's ``run_digest``) is graded again rather than reused without it.
        """
        return {"grader": __version__, "report_schema": SCHEMA_VERSION, **parts}

    def _path(self, task: str, key: dict[str, Any]) -> Path:
        digest = hashlib.sha256(jsonio.dumps(key, sort_keys=True, ensure_ascii=True).encode("utf-8")).hexdigest()[:24]
        return self.folder / f"{task}.{digest}.json"

    def lookup(self, task: str, key: dict[str, Any]) -> Loaded:
        """The stored entry for exactly this key if it may be reused, else why not."""
        path = self._path(task, key)
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return Loaded(None)
        except OSError as error:
            return Loaded(None, f"unreadable ({error.strerror or error})")
        if len(raw) > MAX_ENTRY_BYTES:
            return Loaded(None, "larger than any entry the grader writes")
        try:
            stored = jsonio.loads(raw)
        except jsonio.JsonError:
            return Loaded(None, "not valid JSON")
        if not isinstance(stored, dict) or stored.get("key") != key:
            return Loaded(None, "stored under another key")
        entry = stored.get("entry")
        problem = entry_problem(entry, key)
        if problem is not None:
            return Loaded(None, problem)
        if self.authenticator is not None:
            mac = stored.get("mac")
            if not isinstance(mac, dict) or mac.get("alg") != ALGORITHM:
                return Loaded(None, "not authenticated (stored by an unsigned run): a signed report needs results this key vouches for")
            if mac.get("key_id") != self.authenticator.key_id:
                return Loaded(None, "authenticated with another signing key")
            if not self.authenticator.check({"key": key, "entry": entry}, mac.get("value")):
                return Loaded(None, "its MAC does not match: the entry was changed after the grader wrote it")
        assert isinstance(entry, dict)
        return Loaded(_in_measure_order(entry, key))

    def save(self, task: str, key: dict[str, Any], entry: dict[str, Any]) -> Path:
        """Store ``entry`` atomically (with its MAC when this store has an authenticator)."""
        path = self._path(task, key)
        record: dict[str, Any] = {"key": key, "entry": entry}
        if self.authenticator is not None:
            record["mac"] = {"alg": ALGORITHM, "key_id": self.authenticator.key_id, "value": self.authenticator.mac({"key": key, "entry": entry})}
        jsonio.write_json(path, record, indent=1, sort_keys=True, ensure_ascii=True)
        return path


def _in_measure_order(entry: dict[str, Any], key: dict[str, Any]) -> dict[str, Any]:
    """The entry with its measures in the run's order (primary first), as a fresh grade has them."""
    order = [m for m in key.get("measures") or [] if m in entry.get("measures", {})]
    if not order:
        return entry
    reordered = dict(entry)
    reordered["measures"] = {m: entry["measures"][m] for m in order}
    return reordered
