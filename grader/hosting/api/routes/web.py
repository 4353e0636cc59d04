"""Server-rendered pages (Jinja2, autoescaped): the leaderboard, sign-in with a token, a participant's own page.

Sign-in puts the participant's id and a fingerprint of their token hash in a
signed session cookie (Starlette's SessionMiddleware: HttpOnly, SameSite=strict,
key in keys/session.secret, 0600), so a revoked or re-issued token ends the
session. Every form carries the session's CSRF token, checked on POST in
constant time. Another participant's submission answers 404.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from grader.hosting.api.deps import context
from grader.hosting.clock import iso
from grader.hosting.context import ServerContext
from grader.hosting.db.models import Participant
from grader.hosting.errors import HostingError
from grader.hosting.leaderboard import service
from grader.hosting.leaderboard.formatting import FILTERS
from grader.hosting.services import submissions as submissions_service
from grader.hosting.services.participants import authenticate

router = APIRouter(include_in_schema=False)
TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parents[2] / "leaderboard" / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
)
TEMPLATES.filters.update(FILTERS)
MAX_FORM_BYTES = 16_384


def _page(name: str, request: Request, status: int = 200, **values: Any) -> HTMLResponse:
    ctx: ServerContext = request.app.state.context
    html = TEMPLATES.get_template(name).render(
        competition=ctx.competition, csrf=_csrf(request), signed_in=_who(request), ended=ctx.ended(), ends_at=iso(ctx.ends_at()), **values
    )
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            "Content-Security-Policy": "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
        },
    )


def _csrf(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


async def _form(request: Request) -> dict[str, list[str]]:
    """The urlencoded form of a POST, after its CSRF token was checked against the session's (403 otherwise)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(413, "form too large")
    form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    sent = (form.get("csrf") or [""])[0]
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise HTTPException(403, "missing or wrong CSRF token; reload the page and try again")
    return form


def _who(request: Request) -> Participant | None:
    """The signed-in participant: the session's id, while their token (fingerprint) is still the one signed in with."""
    pid, fingerprint = request.session.get("participant"), request.session.get("fingerprint")
    if not isinstance(pid, int) or not isinstance(fingerprint, str):
        return None
    ctx: ServerContext = request.app.state.context
    with ctx.db.session() as session:
        found = session.get(Participant, pid)
        if found is None or found.revoked_at is not None or not hmac.compare_digest(found.token_sha256[:32], fingerprint):
            return None
        session.expunge(found)
        return found


_CSS = (Path(__file__).resolve().parents[2] / "leaderboard" / "templates" / "board.css").read_text(encoding="utf-8")


@router.get("/assets/board.css")
def stylesheet() -> Response:
    return Response(_CSS, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


@router.get("/", response_class=HTMLResponse)
def board_page(request: Request, part: str = "public", ctx: ServerContext = Depends(context)) -> HTMLResponse:
    if part not in ("public", "private") or (part == "private" and not ctx.ended()):
        raise HTTPException(404, "the private leaderboard is published at the end of the competition")
    data = service.board_json(ctx, part)
    partition = service.partition_info(ctx)
    return _page("board.html", request, data=data, part=part, partition=partition)


@router.get("/signin", response_class=HTMLResponse)
def signin_page(request: Request) -> HTMLResponse:
    return _page("signin.html", request, error=None)


@router.post("/signin")
async def signin(request: Request, ctx: ServerContext = Depends(context)) -> Response:
    form = await _form(request)
    token = (form.get("token") or [""])[0].strip()
    address = request.client.host if request.client else "unknown"
    if ctx.limiter.blocked_for(address) > 0:
        return _page("signin.html", request, status=429, error="too many failed sign-ins from this address; try again in a minute")
    found = None
    if token and len(token) <= 200:
        with ctx.db.session() as session:
            found = authenticate(session, token)
            if found is not None:
                pid, fingerprint = found.id, found.token_sha256[:32]
    if found is None:
        ctx.limiter.failed(address)
        return _page("signin.html", request, status=401, error="unknown or revoked token")
    request.session.clear()  # a fresh session (and CSRF token) at sign-in
    request.session.update(participant=pid, fingerprint=fingerprint, csrf=secrets.token_urlsafe(32))
    return RedirectResponse("/me", status_code=303)


@router.post("/signout")
async def signout(request: Request) -> Response:
    await _form(request)
    request.session.clear()
    return RedirectResponse("/", status_code=303)


def _signed_in(request: Request) -> Participant:
    who = _who(request)
    if who is None:
        raise HTTPException(401, "sign in first (/signin)")
    return who


@router.get("/me", response_class=HTMLResponse)
def own_page(request: Request, ctx: ServerContext = Depends(context)) -> Response:
    who = _who(request)
    if who is None:
        return RedirectResponse("/signin", status_code=303)
    rows = [submissions_service.public_view(ctx, s, ended=ctx.ended()) for s in submissions_service.own_submissions(ctx, who)]
    finals, chosen = service.own_finals(ctx, who)
    message = request.session.pop("flash", None)
    return _page(
        "me.html",
        request,
        who=who,
        rows=rows,
        finals=finals,
        chosen=chosen,
        limit=ctx.competition.leaderboard.finals,
        message=message if isinstance(message, str) else None,
    )


@router.post("/me/finals")
async def choose_finals(request: Request, ctx: ServerContext = Depends(context)) -> Response:
    form = await _form(request)
    who = _signed_in(request)
    try:
        service.set_finals(ctx, who, form.get("final", []))
    except LookupError:
        raise HTTPException(404, "no such submission") from None
    except HostingError as error:
        request.session["flash"] = f"error: {error}"
        return RedirectResponse("/me", status_code=303)
    request.session["flash"] = "final choices saved"
    return RedirectResponse("/me", status_code=303)


@router.get("/me/submissions/{submission_id}/report")
def own_report(submission_id: str, request: Request, ctx: ServerContext = Depends(context)) -> Response:
    who = _signed_in(request)
    submission = submissions_service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, "no such submission")
    envelope = service.report_envelope(ctx, submission)
    if envelope is None:
        raise HTTPException(404, "no signed report for this submission")
    return Response(envelope, media_type="application/json", headers={"Content-Disposition": f'attachment; filename="{submission.id}.dsse.json"'})
