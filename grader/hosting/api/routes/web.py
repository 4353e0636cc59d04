"""Server-rendered pages (Jinja2, autoescaped): the leaderboard, sign-in with a token, a participant's own page.

Sign-in and the session cookie are :mod:`grader.hosting.api.auth`'s. Every form
carries the session's CSRF token, checked on POST in constant time, and is read
bounded. Another participant's submission answers 404.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from grader.hosting.api.auth import MaybeSignedIn, WebParticipant, require_signed_in, sign_in, sign_out, signed_in
from grader.hosting.api.body import FORM_BYTES, read_bounded
from grader.hosting.api.deps import Ctx
from grader.hosting.api.long_poll import ClaimGate, watch
from grader.hosting.api.paths import base_path
from grader.hosting.clock import iso
from grader.hosting.context import ServerContext
from grader.hosting.errors import HostingError, TeamNotFound, TeamRefused
from grader.hosting.intake import submissions as submissions_service
from grader.hosting.leaderboard import service
from grader.hosting.leaderboard.formatting import FILTERS
from grader.hosting.schedule import End
from grader.hosting.services import notify as notify_service
from grader.hosting.services import progress
from grader.hosting.services import teams as teams_service
from grader.hosting.services.competition import competition_end
from grader.hosting.transparency import log_reads
from grader.hosting.visibility import default_part

router = APIRouter(include_in_schema=False)
TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parents[2] / "leaderboard" / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
)
TEMPLATES.filters.update(FILTERS)


def page(name: str, request: Request, status: int = 200, *, end: End | None = None, scripts: bool = False, **values: Any) -> HTMLResponse:
    """Page ``name``; ``end``: the competition's end as the request already read it (None: read here).

    ``scripts``: the page runs the server's own script files (``script-src 'self'``: never inline, never another origin).
    """
    ctx: ServerContext = request.app.state.context
    end = end or competition_end(ctx)
    html = TEMPLATES.get_template(name).render(
        competition=ctx.competition,
        base=base_path(request.scope),
        csrf=_csrf(request),
        signed_in=signed_in(request),
        ended=end.ended,
        disclosed=end.disclosed,
        ends_at=iso(end.at),
        # The nav's sign-up link: a competition that takes sign-ups (a server of many), until its end.
        signup=ctx.competition.registration != "closed" and ctx.people is not None and not end.ended,
        **values,
    )
    return HTMLResponse(
        html,
        status_code=status,
        headers={
            "Content-Security-Policy": (
                f"default-src 'self'; script-src {SCRIPTS if scripts else NO_SCRIPTS}; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
            ),
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


async def checked_form(request: Request) -> dict[str, list[str]]:
    """The urlencoded form of a POST, after its CSRF token was checked against the session's (403 otherwise)."""
    body = await read_bounded(request, FORM_BYTES)
    form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    sent = (form.get("csrf") or [""])[0]
    expected = request.session.get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise HTTPException(403, "missing or wrong CSRF token; reload the page and try again")
    return form


ASSETS = Path(__file__).resolve().parents[2] / "leaderboard" / "templates"
STYLESHEET = (ASSETS / "board.css").read_text(encoding="utf-8")
#: The participant page's upload script, and the tus-js-client bundle it runs on (vendored: its README says from where).
UPLOAD_SCRIPT = (ASSETS / "upload.js").read_text(encoding="utf-8")
#: The participant page's live progress: it asks ``/me/progress`` and redraws each row's state, score and progress.
PROGRESS_SCRIPT = (ASSETS / "progress.js").read_text(encoding="utf-8")
TUS_CLIENT = ASSETS / "vendor" / "tus-js-client" / "tus.min.js"
NO_SCRIPTS, SCRIPTS = "'none'", "'self'"


@router.get("/assets/board.css")
def stylesheet() -> Response:
    return Response(STYLESHEET, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


@router.get("/assets/upload.js")
def upload_script() -> Response:
    return Response(UPLOAD_SCRIPT, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})


@router.get("/assets/progress.js")
def progress_script() -> Response:
    return Response(PROGRESS_SCRIPT, media_type="text/javascript", headers={"Cache-Control": "max-age=3600"})


@router.get("/assets/tus.min.js")
def tus_client() -> Response:
    return Response(TUS_CLIENT.read_bytes(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


@router.get("/", response_class=HTMLResponse)
def board_page(request: Request, ctx: Ctx, part: str | None = None, phase: str | None = Query(None, max_length=32)) -> HTMLResponse:
    end = competition_end(ctx)
    try:
        if part is None:
            # After the end the final standings are the news: `/` leads with them; the public board stays one link away.
            part = default_part(ended=end.ended, public_data=service.board_public_data(ctx, phase))
        data = service.board_json(ctx, part, ended=end.disclosed, phase=phase)
        shown = service.board_phase(ctx, phase)
    except HostingError as error:  # NotPublished (the private board before the end, no such phase), or no such part
        raise HTTPException(404, str(error)) from None
    partition = service.partition_info(ctx, ended=end.ended)
    return page(
        "board.html",
        request,
        end=end,
        data=data,
        part=part,
        phase=None if shown is None else shown.name,
        partition=partition,
        log=log_reads.log_head(ctx.db, ctx.log),
    )


@router.get("/signin", response_class=HTMLResponse)
def signin_page(request: Request) -> HTMLResponse:
    return page("signin.html", request, error=None)


@router.post("/signin")
async def signin(request: Request, ctx: Ctx) -> Response:
    form = await checked_form(request)
    token = (form.get("token") or [""])[0].strip()
    try:
        await run_in_threadpool(sign_in, request, token)
    except HTTPException as refused:
        error = {
            429: "too many failed sign-ins from this address; try again in a minute",
            404: "this token is not registered in this competition"
            + (" (or its sign-up here waits for the host's approval)" if ctx.competition.registration == "approval" else ""),
        }.get(refused.status_code, "unknown or revoked token")
        return page("signin.html", request, status=refused.status_code, error=error)
    return RedirectResponse(base_path(request.scope) + "/me", status_code=303)


@router.post("/signout")
async def signout(request: Request) -> Response:
    await checked_form(request)
    await run_in_threadpool(sign_out, request)
    return RedirectResponse(base_path(request.scope) + "/", status_code=303)


@router.get("/me", response_class=HTMLResponse)
def own_page(request: Request, ctx: Ctx, who: MaybeSignedIn) -> Response:
    if who is None:
        return RedirectResponse(base_path(request.scope) + "/signin", status_code=303)
    end = competition_end(ctx)
    followed = progress.own_progress(ctx, who)
    lines = {row.id: row.lines for row in followed.rows}
    rows = [
        {**view.model_dump(exclude_unset=True), "progress": lines.get(view.id, [])}
        for view in submissions_service.own_views(ctx, who, ended=end.disclosed)
    ]
    finals, chosen = service.own_finals(ctx, who)
    message = request.session.pop("flash", None)
    code = request.session.pop("team_code", None)  # an invitation code, shown on this one page
    return page(
        "me.html",
        request,
        end=end,
        scripts=not end.ended or followed.live,  # the upload form's script until the end; the progress one while a grade waits or runs
        live=followed.live,
        tag=followed.tag,
        who=who,
        rows=rows,
        finals=finals,
        chosen=chosen,
        limit=ctx.competition.leaderboard.finals,
        rotate=ctx.people is not None,  # a person's token, rotated in every competition of the server
        message=message if isinstance(message, str) else None,
        team=teams_service.page_view(ctx, who.id),
        team_code=code if isinstance(code, str) else None,
        notify=notify_service.overview(ctx, who.id),  # the forms of grader/hosting/api/routes/web_notify.py
    )


#: The longest a ``/me/progress`` watch waits for a change before it answers what it has (the page asks again at once).
WATCH_S = 25.0
#: A tag as ``/me/progress`` answers it (the page sends back the last one it drew).
TAG = r"^[0-9a-f]{0,32}$"


@router.get("/me/progress")
async def own_progress(request: Request, ctx: Ctx, seen: str = Query("", pattern=TAG)) -> progress.PageProgress:
    """What ``/me`` redraws (``assets/progress.js``): the participant's rows once they differ from the tag ``seen``, or after
    :data:`WATCH_S`. A watch holds no thread while it waits (:func:`grader.hosting.api.long_poll.watch`)."""
    who = await run_in_threadpool(require_signed_in, request)
    gate: ClaimGate = request.app.state.watch_gate
    busy = "this page is open in too many windows: close one, or reload later"
    with gate.admit(("watch", who.id), WATCH_S, refusal=busy):
        return await watch(request, gate, ctx.dispatcher, WATCH_S, lambda: progress.own_progress(ctx, who), lambda found: found.tag != seen)


@router.post("/me/finals")
async def choose_finals(request: Request, ctx: Ctx) -> Response:
    form = await checked_form(request)  # the CSRF check first, then who is signed in
    who = await run_in_threadpool(require_signed_in, request)
    try:
        saved = await run_in_threadpool(service.set_finals, ctx, who, form.get("final", []))
    except LookupError:
        raise HTTPException(404, "no such submission") from None
    except HostingError as error:
        request.session["flash"] = f"error: {error}"
        return RedirectResponse(base_path(request.scope) + "/me", status_code=303)
    # Say what was stored, not only that something was: the ids are the participant's own.
    request.session["flash"] = (
        f"final choices saved: {', '.join(saved)} count for the private board"
        if saved
        else "final choices saved: none chosen, so your best public submissions count"
    )
    return RedirectResponse(base_path(request.scope) + "/me", status_code=303)


@router.post("/me/team/{action}")
async def team_action(action: str, request: Request, ctx: Ctx) -> Response:
    """The /me page's team forms: create, invite, join, leave (docs/hosting.md, "Teams"); each says what happened."""
    form = await checked_form(request)  # the CSRF check first, then who is signed in
    who = await run_in_threadpool(require_signed_in, request)
    field = (form.get("name") or form.get("code") or [""])[0]
    try:
        if action == "create":
            await run_in_threadpool(teams_service.create, ctx, who.id, field)
            request.session["flash"] = "team created"
        elif action == "join":
            team = await run_in_threadpool(teams_service.join, ctx, who.id, field.strip())
            request.session["flash"] = f"you joined {team['name']}"
        elif action == "invite":
            code, expires = await run_in_threadpool(teams_service.invite, ctx, who.id)
            request.session["team_code"] = code
            request.session["flash"] = f"invitation code made (single use, expires {iso(expires)}): give it to one person"
        elif action == "leave":
            await run_in_threadpool(teams_service.leave, ctx, who.id)
            request.session["flash"] = "you left the team"
        else:
            raise HTTPException(404, "no such page")
    except (TeamNotFound, TeamRefused) as error:
        request.session["flash"] = f"error: {error}"
    return RedirectResponse(base_path(request.scope) + "/me", status_code=303)


@router.get("/me/submissions/{submission_id}/report")
def own_report(submission_id: str, ctx: Ctx, who: WebParticipant) -> Response:
    submission = submissions_service.own_submission(ctx, who, submission_id)
    if submission is None:
        raise HTTPException(404, "no such submission")
    envelope = service.report_envelope(ctx, submission)
    if envelope is None:
        raise HTTPException(404, "no signed report for this submission")
    return Response(envelope, media_type="application/json", headers={"Content-Disposition": f'attachment; filename="{submission.id}.dsse.json"'})
