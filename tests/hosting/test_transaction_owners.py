"""Only the services open transactions: no route, page, CLI command, server or worker module calls ``Database.session()``."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The services (grader/hosting/services/ and the services of the server-side contexts, and the leaderboard's service
#: and its part-score store; the notifications' sender, which reads and ends the outbox's rows in its own
#: transactions, off every request), and the one read of the host's early end (the visibility rules themselves read nothing).
OWNERS = (
    "grader/hosting/services/",
    "grader/hosting/identity/",
    "grader/hosting/directory/",
    "grader/hosting/intake/",
    "grader/hosting/queue/",
    "grader/hosting/results/",
    "grader/hosting/transparency/",
    "grader/hosting/notify/",
    "grader/hosting/leaderboard/",
    "grader/hosting/schedule.py",
    "grader/hosting/db/session.py",
)


def _opens_a_session(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "session" and not node.args
    ]


def test_only_services_open_transactions() -> None:
    offenders = []
    for path in sorted((REPO / "grader").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith(OWNERS):
            continue
        offenders += [f"{relative}:{line}" for line in _opens_a_session(ast.parse(path.read_text(encoding="utf-8")))]
    assert offenders == []


def test_the_check_sees_a_session_opened_in_a_route() -> None:
    assert _opens_a_session(ast.parse("def route(ctx):\n    with ctx.db.session() as session:\n        pass\n")) == [2]
