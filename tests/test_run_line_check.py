"""The fast run-line check accepts exactly what the run schema accepts."""

from __future__ import annotations

import copy
import random

import pytest

from grader.runs.line_check import is_valid_run_line
from grader.schemas import validator

VALID = {"query_id": "q1", "hits": [{"id": "d1", "score": 1.5}, {"id": "d2", "score": -3}]}


def _mutations(rng: random.Random) -> list[object]:
    """Valid lines and single-point corruptions of every kind the schema distinguishes."""
    values: list[object] = [None, True, False, 0, 1.5, "", "x", [], {}, [1], {"a": 1}]
    out: list[object] = [copy.deepcopy(VALID), {"query_id": "q", "hits": []}]
    for value in values:
        for key in ("query_id", "hits"):
            line = copy.deepcopy(VALID)
            line[key] = value
            out.append(line)
        for key in ("id", "score"):
            line = copy.deepcopy(VALID)
            line["hits"][rng.randrange(2)][key] = value
            out.append(line)
        line = copy.deepcopy(VALID)
        line["hits"].append(value)
        out.append(line)
    for extra in ({"extra": 1}, {"rank": 3}):
        line = copy.deepcopy(VALID)
        line.update(extra)
        out.append(line)
        line = copy.deepcopy(VALID)
        line["hits"][0].update(extra)
        out.append(line)
    for missing in ("query_id", "hits"):
        line = copy.deepcopy(VALID)
        del line[missing]
        out.append(line)
    for missing in ("id", "score"):
        line = copy.deepcopy(VALID)
        del line["hits"][1][missing]
        out.append(line)
    out += [None, [], "line", 3, {"hits": [], "query_id": "q", "x": None}]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_fast_check_agrees_with_the_schema(seed: int) -> None:
    schema = validator("run")
    for line in _mutations(random.Random(seed)):
        assert is_valid_run_line(line) == schema.is_valid(line), line
