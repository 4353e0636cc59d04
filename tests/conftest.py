"""Shared fixtures: small task folders and run files written per test."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result


def write_task(root: Path, *, corpus: list[dict], queries: list[dict], qrels: dict[str, list[tuple[str, str, int]]]) -> Path:
    """Write a BEIR-layout task folder and return it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    for split, rows in qrels.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q, d, r in rows]
        (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def small_task(tmp_path: Path) -> Path:
    """A three-document, two-query task with a test and a dev split."""
    return write_task(
        tmp_path / "toy",
        corpus=[
            {"_id": "d1", "title": "", "text": "def add(a, b): return a + b"},
            {"_id": "d2", "title": "t", "text": "print(1)"},
            {"_id": "d3", "title": "", "text": "x = 1"},
        ],
        queries=[{"_id": "q1", "text": "add two numbers"}, {"_id": "q2", "text": "print"}, {"_id": "q3", "text": "unjudged"}],
        qrels={"test": [("q1", "d1", 1), ("q2", "d2", 2)], "dev": [("q2", "d3", 1)]},
    )


@pytest.fixture
def grader_cli() -> Callable[..., Result]:
    """Invoke the ``grader`` command in-process: ``grader_cli("score", "--qrels", path, ...)`` (arguments are str()-ed)."""
    from tests.cli_support import invoke

    return functools.partial(invoke, expect=None)  # the tests read the exit status themselves


# --------------------------------------------------------------------------- Docker sandbox tests


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "docker(*images): starts real containers; needs a Docker engine and the named images. "
        "Skipped when either is missing, unless GRADER_REQUIRE_DOCKER=1 (CI), which makes that a failure.",
    )
    config.addinivalue_line(
        "markers",
        "board(seeded=False): the hosting tests' ``world`` fixture is the served leaderboard competition "
        "(tests/hosting/leaderboard_world.py), with its demo submissions when seeded.",
    )
    config.addinivalue_line("markers", "sqlite_only: the hosting tests' ``database_url`` is SQLite alone (no PostgreSQL run).")


@pytest.fixture
def docker_engine(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A docker SDK client, once the engine answers and every image named by the test's ``docker`` markers exists.

    Otherwise the test is skipped with the reason, or failed with it when
    ``GRADER_REQUIRE_DOCKER=1`` is set.
    """
    from tests.sandbox_support import require_docker

    images = [image for marker in request.node.iter_markers("docker") for image in marker.args]
    return require_docker(images)


@pytest.fixture
def guard(docker_engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A :class:`tests.sandbox_support.HostGuard`: after a Docker test, ``guard.verify()`` proves nothing was left behind."""
    from tests.sandbox_support import new_guard

    return new_guard(docker_engine, tmp_path, monkeypatch)


# --------------------------------------------------------------------------- the slow rule
# A test that starts a server, a container or a process must be marked slow (tests/slow_rule.py): checked around the
# setup of each test (its fixtures, module- and session-scoped ones included) and around the test itself.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    from tests.slow_rule import guarded

    with guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    from tests.slow_rule import guarded

    with guarded(item):
        return (yield)
