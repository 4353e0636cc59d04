"""The claim of a worker of many competitions, on the server's own app: ``POST /api/v1/worker/claim`` (docs/protocol.md).

The worker names the competitions it serves (it holds each one's data copy); the server asks each one's own claim
service, in the fair order of :mod:`grader.hosting.services.fair_claim`, and answers the job, which names its
competition. Everything else about the job (heartbeat, upload, runs, result) goes to that competition's routes.
The body is read bounded and validated before anything else; the worker's token is checked in each competition it
names, as that competition's own claim route checks it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool

from grader.hosting.api.auth import bearer
from grader.hosting.api.body import parse
from grader.hosting.api.long_poll import AnyOf, ClaimGate, long_poll
from grader.hosting.identity.ratelimit import client_bucket
from grader.hosting.identity.tokens import token_digest
from grader.hosting.protocol.messages import SERVER_CLAIM_PATH, Job, ServerClaimRequest
from grader.hosting.services import fair_claim
from grader.hosting.services.fair_claim import RoundRobin, Seat, SeatRefused

router = APIRouter(tags=["workers"])


def _seats(served: dict[str, Any], names: list[str], token: str, fingerprint: str, bucket: str) -> list[Seat]:
    return [fair_claim.seat(name, served[name][0], token, fingerprint, bucket) for name in names]


@router.post(
    SERVER_CLAIM_PATH,
    summary="Take a job of any of the competitions named, in the server's fair order (204 when none within wait_s)",
    response_model=Job,
    responses={
        204: {"description": "no job within wait_s"},
        404: {"description": "a competition named is not served here"},
        429: {"description": "this worker has its most claims in progress"},
    },
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": ServerClaimRequest.model_json_schema()}}}},
)
async def claim_any(request: Request) -> Job | Response:
    body = await parse(request, ServerClaimRequest)
    served = dict(request.app.state.competitions.served)  # a copy: the server may add or retire competitions meanwhile
    names = sorted(set(body.competitions))
    missing = [name for name in names if name not in served]
    if missing:
        raise HTTPException(404, f"no competition {missing[0]!r} on this server (served: {', '.join(sorted(served)) or 'none'})")
    token = bearer(request)
    bucket = client_bucket(request.client.host) if request.client else "unknown"
    try:
        seats = await run_in_threadpool(_seats, served, names, token, body.fingerprint, bucket)
    except SeatRefused as refused:
        headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after else None
        if refused.status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        raise HTTPException(refused.status, str(refused), headers=headers) from None
    gate: ClaimGate = request.app.state.claim_gate
    turn: RoundRobin = request.app.state.turn
    # One worker is one token on every competition it serves: its claims in progress are counted across them all.
    with gate.admit(token_digest(token), body.wait_s):
        job = await long_poll(request, gate, AnyOf(s.ctx.dispatcher for s in seats), body.wait_s, lambda: fair_claim.look(seats, turn))
    return Response(status_code=204) if job is None else job
