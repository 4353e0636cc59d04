"""A request's path as this competition's routes see it, whether the app is served alone or under ``/c/<name>``."""

from __future__ import annotations

from starlette.types import Scope


def route_path(scope: Scope) -> str:
    """``scope``'s path less its ``root_path`` (the prefix a server of many competitions serves this one under)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


def base_path(scope: Scope) -> str:
    """The prefix this competition's pages are served under ("" when it is served alone): links and redirects start with it."""
    return str(scope.get("root_path", ""))
