"""The pieces of the HTTP guards on their own: route caps, the result cap, the repeated-line log limit."""

from __future__ import annotations

import logging

from grader.hosting.api.body import FORM_BYTES, JSON_BYTES
from grader.hosting.api.body_caps import RouteCaps, _rule
from grader.hosting.repeat_throttle import RepeatThrottle
from grader.hosting.results.grading_adapter import LOG_TAIL_BYTES
from grader.hosting.results.result_size import EXTRA_LOGS, PER_QUERY_BYTES, result_cap


def test_route_caps_match_whole_paths_by_method() -> None:
    caps = RouteCaps(
        (
            _rule("POST", "/api/v1/worker/jobs/{submission_id}/result", 3 << 20),
            _rule("POST", "/signin", FORM_BYTES),
            _rule("POST", "/api/v1/submissions", 1 << 20),
        )
    )
    assert caps.cap("POST", "/api/v1/worker/jobs/s1/result") == 3 << 20
    assert caps.cap("POST", "/api/v1/worker/jobs/a/b/result") == JSON_BYTES  # one segment only
    assert caps.cap("GET", "/api/v1/worker/jobs/s1/result") == JSON_BYTES  # a route that reads no body
    assert caps.cap("POST", "/api/v1/submissions") == 1 << 20
    assert caps.cap("POST", "/api/v1/submissions/x") == JSON_BYTES
    assert caps.cap("POST", "/signin") == FORM_BYTES


def test_result_cap_grows_with_judged_queries_and_tasks() -> None:
    empty = result_cap([])
    one = result_cap([["q1"]])
    assert one - empty == len('"q1"') + PER_QUERY_BYTES + 16 * 1024 + 6 * LOG_TAIL_BYTES
    many = result_cap([[f"q{i}" for i in range(100_000)]] * 10)
    # ten tasks of 100,000 queries: the per-query values dominate; tens of megabytes, not hundreds
    assert 64 << 20 > many > 10 * 100_000 * PER_QUERY_BYTES
    assert empty >= 6 * LOG_TAIL_BYTES * EXTRA_LOGS


def test_repeated_lines_pass_a_few_times_then_are_counted() -> None:
    limit = RepeatThrottle(burst=3, window_s=3600)

    def record(message: str, name: str = "asyncio") -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, None)

    passed = [limit.filter(record("socket.accept() out of system resource")) for _ in range(1000)]
    assert passed.count(True) == 3
    # another kind of line, or another logger, has its own budget
    assert limit.filter(record("Exception in callback X\nhandle: <0x1>"))
    assert limit.filter(record("Exception in callback X\nhandle: <0x2>"))  # same first line, other details
    assert limit.filter(record("socket.accept() out of system resource", name="uvicorn.error"))
    # after the window, the first line through says how many were dropped
    limit.window_s = 0
    again = record("socket.accept() out of system resource")
    assert limit.filter(again)
    assert "997 more like this" in again.getMessage()
