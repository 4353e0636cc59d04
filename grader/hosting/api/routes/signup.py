"""Sign-up and a person's own token rotation, on the web (docs/hosting.md, "Sign-up"): forms as the other pages' are
(the session's CSRF token, read bounded), the token shown once on a page nothing caches. The decisions are
:mod:`grader.hosting.services.signup`'s.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from grader.hosting.api.auth import person_session, signup_address, verify
from grader.hosting.api.deps import Ctx
from grader.hosting.api.routes.web import checked_form, page
from grader.hosting.errors import HostingError
from grader.hosting.identity.principal import Role
from grader.hosting.services import signup as service

router = APIRouter(include_in_schema=False)
#: A page holding a token: never kept by a browser's cache or a proxy's.
NO_STORE = {"Cache-Control": "no-store"}


def _field(form: dict[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[0]


def _signup_page(request: Request, ctx: Ctx, status: int = 200, *, error: str | None = None, name: str = "", email: str = "") -> HTMLResponse:
    rules = ctx.competition.rules or ""
    return page(
        "signup.html",
        request,
        status,
        error=error,
        rules=rules,
        rules_sha256=service.rules_sha256(rules),
        approval=ctx.competition.registration == service.APPROVAL,
        signup_name=name[:100],
        email=email[:254],
    )


@router.get("/signup", response_class=HTMLResponse)
async def signup_page(request: Request, ctx: Ctx) -> HTMLResponse:
    if not await run_in_threadpool(service.sign_up_open, ctx):
        raise HTTPException(404, "this competition takes no sign-up")
    return await run_in_threadpool(_signup_page, request, ctx)


@router.post("/signup")
async def signup(request: Request, ctx: Ctx) -> Response:
    form = await checked_form(request)
    if not await run_in_threadpool(service.sign_up_open, ctx):
        raise HTTPException(404, "this competition takes no sign-up")
    name, email = _field(form, "name").strip(), _field(form, "email")
    bucket = signup_address(request)
    wait = ctx.signups.blocked_for(bucket)
    if wait > 0:
        return _signup_page(request, ctx, 429, error=f"too many sign-ups from this address; try again in {wait / 60:.0f} min", name=name, email=email)
    if _field(form, "accept") != "yes":
        return _signup_page(request, ctx, 422, error="accept the rules to sign up", name=name, email=email)
    ctx.signups.failed(bucket)  # every attempt counts: refusals probe names, and each success is an account
    try:
        made = await run_in_threadpool(service.sign_up, ctx, name, email, _field(form, "rules_sha256"))
    except service.SignupClosed:
        raise HTTPException(404, "this competition takes no sign-up") from None
    except HostingError as error:
        return _signup_page(request, ctx, 422, error=str(error), name=name, email=email)
    note = (
        "You are registered: sign in with this token."
        if made.state == service.APPROVED
        else "Your sign-up waits for the host's approval: this token opens the competition once approved."
    )
    response = page("token.html", request, heading="Signed up", token=made.token, note=note)
    response.headers.update(NO_STORE)
    return response


@router.post("/signup/join")
async def join(request: Request, ctx: Ctx) -> Response:
    """A person of the server (their token) signs up here too."""
    form = await checked_form(request)
    if not await run_in_threadpool(service.sign_up_open, ctx):
        raise HTTPException(404, "this competition takes no sign-up")
    if _field(form, "accept") != "yes":
        return _signup_page(request, ctx, 422, error="accept the rules to sign up")
    token = _field(form, "token").strip()
    try:  # as a sign-in checks it: a token nobody holds is a failure counted per address, one registered here is done
        await run_in_threadpool(verify, request, Role.PARTICIPANT, token)
    except HTTPException as refused:
        if refused.status_code != 404:  # 404: a person of the server not registered here, who may join
            words = "too many failed sign-ins from this address; try again in a minute" if refused.status_code == 429 else "unknown or revoked token"
            return _signup_page(request, ctx, refused.status_code, error=words)
    else:
        return _signup_page(request, ctx, 409, error="this token is registered here already: sign in with it")
    try:
        state = await run_in_threadpool(service.join, ctx, token, _field(form, "rules_sha256"))
    except service.SignupClosed:
        raise HTTPException(404, "this competition takes no sign-up") from None
    except HostingError as error:
        return _signup_page(request, ctx, 422, error=str(error))
    return page("joined.html", request, state=state, approved=state == service.APPROVED)


@router.post("/me/token")
async def rotate(request: Request) -> Response:
    await checked_form(request)  # the CSRF check first, then who is signed in
    ctx = request.app.state.context
    session = person_session(request)
    if session is None:
        raise HTTPException(401, "sign in first (/signin)")
    try:
        token = await run_in_threadpool(service.rotate_own_token, ctx, *session)
    except service.SignupClosed:
        raise HTTPException(404, "no token to rotate here") from None
    except HostingError:
        raise HTTPException(401, "sign in first (/signin)") from None
    request.session.clear()  # this session ended with the old token, as every other one of the person's did
    response = page("token.html", request, heading="New token", token=token, note="Your old token no longer works; you are signed out everywhere.")
    response.headers.update(NO_STORE)
    return response
