"""docs/security.md cannot drift: every test it names exists, every claim names one, and its figure is measured here.

A citation is ``tests/<path>.py::test_name`` in backquotes. One that the tree
does not hold yet (its branch is not merged) carries `` (pending: BRANCH)``
right after it; once the test exists the marker must go, so the doc never says
"pending" of a test that is there, and never names a test that is not.

The one figure the doc states as inherent, what one published 4-decimal public
score tells a participant about the public/private partition, is measured by
the last test with the server's own partition and part-scoring code.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from grader.stats.aggregate import ScoreTable
from grader.stats.partition import partition, public_count

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
CITATION = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`(?: \(pending: ([\w-]+)\))?")
#: Published numbers are rounded to this many decimals until the end (docs/leaderboard.md).
DECIMALS = 4


def citations(text: str) -> list[tuple[str, str, str | None]]:
    """Every (file, test function, pending branch or None) the text names."""
    return [(m.group(1), m.group(2), m.group(3)) for m in CITATION.finditer(text)]


def defined_tests(path: Path) -> set[str]:
    """Names of the test functions a test file defines, at module level or in a class."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in tree.body:
        bodies = [node] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        if isinstance(node, ast.ClassDef):
            bodies = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        found.update(f.name for f in bodies if f.name.startswith("test"))
    return found


def citation_problems(text: str, root: Path) -> list[str]:
    """What is wrong with the citations of ``text`` against the tree at ``root`` (empty when nothing is)."""
    problems = []
    for file, name, pending in citations(text):
        path = root / file
        exists = path.is_file() and name in defined_tests(path)
        if pending is None and not exists:
            problems.append(f"{file}::{name} is cited but does not exist")
        if pending is not None and exists:
            problems.append(f"{file}::{name} exists now: remove its '(pending: {pending})'")
    return problems


def claim_lines(text: str) -> list[str]:
    """The doc's claims: every list item (a line starting with '- ', continuation lines joined) and table row."""
    items: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line)
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        else:
            inside = False
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return items + rows[1:]  # a table's rows are claims too; its first row is the header


def test_every_cited_test_exists_and_no_pending_marker_is_stale() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(citations(text)) >= 30, "the doc names too few tests: was the citation form changed?"
    assert citation_problems(text, ROOT) == []


def test_every_claim_names_a_test() -> None:
    claims = claim_lines(DOC.read_text(encoding="utf-8"))
    assert len(claims) >= 20
    assert [claim[:80] for claim in claims if not CITATION.search(claim)] == []


def test_the_checker_catches_a_missing_test_and_a_stale_marker(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_here():\n    pass\n\nclass TestC:\n    def test_in_class(self):\n        pass\n")
    assert citation_problems("`tests/test_x.py::test_here` `tests/test_x.py::test_in_class`", tmp_path) == []
    assert citation_problems("`tests/test_x.py::test_gone` (pending: edge)", tmp_path) == []
    assert citation_problems("`tests/test_x.py::test_gone`", tmp_path) == ["tests/test_x.py::test_gone is cited but does not exist"]
    assert citation_problems("`tests/test_y.py::test_here`", tmp_path) == ["tests/test_y.py::test_here is cited but does not exist"]
    assert citation_problems("`tests/test_x.py::test_here` (pending: edge)", tmp_path) == [
        "tests/test_x.py::test_here exists now: remove its '(pending: edge)'"
    ]


def decodable_probes(public: int) -> int:
    """Probes whose membership one rounded public mean gives exactly: weights 1, 1/2, ..., 2^-(k-1), spacing 2^-(k-1)/public > 10^-4."""
    return 1 + math.floor(math.log2(10**DECIMALS / public - 1e-9))


@pytest.mark.parametrize(("total", "fraction"), [(13, "0.3"), (1000, "0.3"), (52, "0.1")])
def test_one_published_score_gives_the_membership_of_log2_of_10000_over_public_queries(total: int, fraction: str) -> None:
    """One submission, one published 4-decimal public mean, k queries' membership read off exactly.

    The attacker answers every query but the probes wrongly (value 0) and probe j
    with value 2^-j (a measure whose per-query values it can steer, for queries it
    can answer). The public mean is then (sum of the public probes' weights) / n_pub;
    rounded to 4 decimals it still tells every subset apart while the spacing
    2^-(k-1) / n_pub exceeds 10^-4: k = 1 + floor(log2(10^4 / n_pub)), 12 for a
    public part of 4 queries, 6 for 300. k = 1 is the one-query difference.
    """
    public = public_count(total, fraction)
    probes = decodable_probes(public)
    assert probes == {4: 12, 300: 6, 5: 11}[public]
    ids = [f"q{i:04d}" for i in range(total)]
    weights = {ids[j]: 2.0**-j for j in range(probes)}
    values = {"task": {q: weights.get(q, 0.0) for q in ids}}
    for seed in range(25):
        secret = bytes([seed]) * 32
        public_ids = set(partition(secret, "task", ids, fraction).public)
        kept = {"task": {q: v for q, v in values["task"].items() if q in public_ids}}
        published = round(ScoreTable.from_values(["entry"], "mrr", [kept]).score(0), DECIMALS)
        steps = round(published * public * 2 ** (probes - 1))
        decoded = {ids[j] for j in range(probes) if steps >> (probes - 1 - j) & 1}
        assert decoded == public_ids & set(weights), seed
