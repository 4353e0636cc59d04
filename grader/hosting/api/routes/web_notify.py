"""The /me page's notification forms (docs/hosting.md, "Notifications"): set or clear the webhook and the e-mail address.

Forms as the page's others are (the session's CSRF token, read bounded, then who is signed in); each outcome is one
flash line on /me, except a webhook set, whose new signing secret is shown once, on a page no cache keeps (never
through the session cookie, which the browser holds readable). The decisions are :mod:`grader.hosting.services.notify`'s.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from grader.hosting.api.auth import require_signed_in
from grader.hosting.api.deps import Ctx
from grader.hosting.api.paths import base_path
from grader.hosting.api.routes.web import checked_form, page
from grader.hosting.errors import NotifySettingRefused
from grader.hosting.services import notify as service

router = APIRouter(include_in_schema=False)
#: A page holding a secret: never kept by a browser's cache or a proxy's.
NO_STORE = {"Cache-Control": "no-store"}
#: What each form's field may hold at most (the API's bounds).
URL_CHARS, EMAIL_CHARS = 2048, 254


@router.post("/me/notify/{action}")
async def notify_action(action: str, request: Request, ctx: Ctx) -> Response:
    """``webhook`` (set, the secret shown once), ``webhook-clear``, ``email``, ``email-clear``; each says what happened."""
    form = await checked_form(request)  # the CSRF check first, then who is signed in
    who = await run_in_threadpool(require_signed_in, request)
    field = (form.get("url") or form.get("address") or [""])[0].strip()
    try:
        if action == "webhook":
            secret = await run_in_threadpool(service.set_webhook, ctx, who.id, _bounded(field, URL_CHARS, "a webhook URL"))
            response = page("notify_secret.html", request, url=field, secret=secret)
            response.headers.update(NO_STORE)
            return response
        if action == "webhook-clear":
            await run_in_threadpool(service.clear_webhook, ctx, who.id)
            request.session["flash"] = "webhook cleared"
        elif action == "email":
            await run_in_threadpool(service.set_email, ctx, who.id, _bounded(field, EMAIL_CHARS, "an e-mail address"))
            request.session["flash"] = f"e-mail set: {field}"
        elif action == "email-clear":
            await run_in_threadpool(service.set_email, ctx, who.id, None)
            request.session["flash"] = "e-mail cleared"
        else:
            raise HTTPException(404, "no such page")
    except NotifySettingRefused as error:
        request.session["flash"] = f"error: {error}"
    return RedirectResponse(base_path(request.scope) + "/me", status_code=303)


def _bounded(value: str, limit: int, what: str) -> str:
    if len(value) > limit:
        raise NotifySettingRefused(f"{what} is at most {limit} characters")
    return value
