"""The route dependency that hands each route the server's context (authentication: :mod:`grader.hosting.api.auth`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from grader.hosting.context import ServerContext


def context(request: Request) -> ServerContext:
    """The server's context."""
    return request.app.state.context  # type: ignore[no-any-return]


#: A route parameter annotated ``Ctx`` receives the server's context.
Ctx = Annotated[ServerContext, Depends(context)]
