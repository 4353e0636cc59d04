"""Request bodies, read only after authentication and never past a cap.

A route that takes a body declares no body parameter (FastAPI would read and
parse it before any dependency runs, so an anonymous caller could make the server
hold a body of any size). It calls :func:`parse` in its own code, after the
authentication dependency has passed: the body is read from the stream up to a
cap (413 past it, or at once when ``Content-Length`` declares more), read as
strictly as any file (:func:`grader.jsonio.loads`: no duplicate keys, no NaN,
bounded depth), then validated into the route's Pydantic model (422).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TypeVar

from fastapi import HTTPException, Request
from pydantic import BaseModel, ValidationError

from grader import jsonio

#: Caps of the JSON bodies (a few small fields) and of the web pages' forms. A worker's result has its
#: own, computed from its job (:mod:`grader.hosting.results.result_size`); an upload, the competition's ``max_bytes``.
JSON_BYTES = 16 << 10
FORM_BYTES = 16 << 10

Model = TypeVar("Model", bound=BaseModel)


def too_large(limit: int) -> HTTPException:
    """The 413 of a body over ``limit`` bytes."""
    return HTTPException(413, f"request body larger than {limit} bytes")


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes: 413 past it, without reading on (nor at all, if declared longer)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise too_large(limit) if declared.isdigit() else HTTPException(400, "malformed Content-Length")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def parse(request: Request, model: type[Model], limit: int = JSON_BYTES) -> Model:
    """The body as ``model``: read bounded, parsed strictly, validated (422 with the reason otherwise)."""
    raw = await read_bounded(request, limit)
    try:
        data = jsonio.loads(raw)
    except jsonio.JsonError as error:
        raise HTTPException(422, f"request body: {error.what}") from None
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise HTTPException(422, error.errors(include_url=False, include_context=False, include_input=False)) from None


async def receive_to_file(request: Request, path: Path, cap: int, what: str) -> tuple[str, int]:
    """Stream ``request``'s body into ``path`` (via a hidden ``.part`` file, renamed when whole), at most ``cap`` bytes: (sha256, size).

    A declared ``Content-Length`` over ``cap`` is refused (413) before a byte is read, and a body that passes
    ``cap`` while streaming is refused there; nothing half-written is left at ``path`` either way.
    """
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > cap):
        raise HTTPException(413, f"{what} is at most {cap} bytes")
    digest, size = hashlib.sha256(), 0
    part = path.with_name(f".{path.name}.part")
    try:
        with open(part, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    raise HTTPException(413, f"{what} is at most {cap} bytes")
                digest.update(chunk)
                out.write(chunk)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return digest.hexdigest(), size
