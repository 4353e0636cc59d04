"""A result post's timeouts reach whichever httpx build the worker's client is.

The worker passes them per request; starlette's TestClient (the in-process server of many tests)
is an ``httpx2.Client`` where httpx2 is installed, and httpx2 2.17 refuses an ``httpx.Timeout``
object (CI failed on it). The plain tuple means the same to both.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient

from grader.hosting.worker.loop import RESULT_TIMEOUT

EXPECTED = {"connect": 5.0, "read": 900.0, "write": 900.0, "pool": 900.0}


def test_the_result_timeout_is_connect_5_s_and_900_s_for_the_rest_on_either_client() -> None:
    assert httpx.Timeout(RESULT_TIMEOUT) == httpx.Timeout(900.0, connect=5.0)
    for client in (httpx.Client(base_url="http://grader.example"), TestClient(FastAPI())):
        with client:
            request = client.build_request("POST", "/api/v1/worker/jobs/s1/result", timeout=RESULT_TIMEOUT)
            assert request.extensions["timeout"] == EXPECTED, type(client).__mro__
