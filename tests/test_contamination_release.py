"""The release rule against the probing attack (grader/integrity/release.py, docs/security.md).

A hidden split is written here from the test's own generator (tests/contamination_support.py): 200 test queries,
each with one relevant function; the "public pool" a participant knows holds those functions and as many
others. The attacker sketches one candidate per submission and reads what is released.
"""

from __future__ import annotations

import math
import random

import pytest

from grader.data.task import Task
from grader.integrity.audit import audit_task
from grader.integrity.release import LEVELS, MIN_COUNT, leakage_bits, release
from grader.integrity.sketch_build import build_sketch
from tests.conftest import write_task
from tests.contamination_support import disguised_copy, snippet

TEST_QUERIES = 200


@pytest.fixture(scope="module")
def hidden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Task, list, list]:
    """The hidden task, the pool's members (relevant functions of test queries) and non-members."""
    rng = random.Random(2026)
    functions = [snippet(rng, rng.randint(6, 14)) for _ in range(2 * TEST_QUERIES)]
    members, others = functions[:TEST_QUERIES], functions[TEST_QUERIES:]
    corpus = [{"_id": f"d{i}", "title": "", "text": item.render()} for i, item in enumerate(members)]
    # Query texts are three words: under the text view's minimum, never audited themselves.
    queries = [{"_id": f"q{i}", "text": f"find {item.name} quickly"} for i, item in enumerate(members)]
    qrels = {"test": [(f"q{i}", f"d{i}", 1) for i in range(TEST_QUERIES)]}
    root = write_task(tmp_path_factory.mktemp("hidden") / "hidden", corpus=corpus, queries=queries, qrels=qrels)
    return Task(root, name="hidden"), members, others


def test_one_candidate_per_sketch_learns_nothing_of_membership(hidden: tuple[Task, list, list]) -> None:
    task, members, others = hidden
    rng = random.Random(1)
    shown: dict[bool, set] = {True: set(), False: set()}
    raw: dict[bool, set[int]] = {True: set(), False: set()}
    for is_member, pool in ((True, members[:15]), (False, others[:15])):
        for candidate in pool:
            overlap = audit_task(task, "test", build_sketch([disguised_copy(candidate, rng)]))
            raw[is_member].add(overlap.touched)
            shown[is_member].add(tuple(sorted(release(overlap).as_dict().items())))
    # The comparison itself tells members apart (so the rule, not a blind comparison, is what hides them) ...
    assert raw == {True: {1}, False: {0}}
    # ... and what is released is one and the same value for every candidate, member or not: withheld.
    assert shown[True] == shown[False] and len(shown[True]) == 1
    (released,) = shown[True]
    assert dict(released)["touched"] is None and dict(released)["test_queries"] == TEST_QUERIES


def test_figures_cover_the_whole_split_rounded_down_to_the_step(hidden: tuple[Task, list, list]) -> None:
    task, members, others = hidden
    rng = random.Random(2)
    planted = 57  # copies of 57 members among 50 non-members: the truth the test made
    sketch = build_sketch([disguised_copy(item, rng) for item in members[:planted]] + [item.render() for item in others[:50]])
    overlap = audit_task(task, "test", sketch)
    assert overlap.test_queries == TEST_QUERIES and overlap.touched == planted
    step = max(MIN_COUNT, math.ceil(TEST_QUERIES / LEVELS))
    released = release(overlap)
    assert (released.step, released.touched, released.share) == (step, planted // step * step, planted // step * step / TEST_QUERIES)


def test_a_probe_holding_step_minus_one_known_members_learns_one_bit_within_the_bound(hidden: tuple[Task, list, list]) -> None:
    # The documented limit of the rule (docs/security.md): once g - 1 members are known, one candidate per
    # submission is told apart. Each release still carries at most leakage_bits(n) bits.
    task, members, others = hidden
    rng = random.Random(3)
    known = [disguised_copy(item, rng) for item in members[: MIN_COUNT - 1]]
    member_probe = release(audit_task(task, "test", build_sketch([*known, disguised_copy(members[100], rng)])))
    other_probe = release(audit_task(task, "test", build_sketch([*known, disguised_copy(others[100], rng)])))
    assert (member_probe.touched, other_probe.touched) == (MIN_COUNT, None)
    assert 1.0 <= leakage_bits(TEST_QUERIES)


@pytest.mark.parametrize("test_queries", [1, 9, 10, 200, 999, 1000, 5000, 123_457])
def test_a_release_takes_at_most_levels_plus_one_values_and_the_bound_says_how_many_bits(test_queries: int) -> None:
    from grader.integrity.contamination import SplitOverlap

    values = set()
    for touched in range(test_queries + 1):
        overlap = SplitOverlap("t", "test", test_queries, test_queries, 0, test_queries, 0, touched)
        values.add(release(overlap).touched)
    assert len(values) <= LEVELS + 1
    assert leakage_bits(test_queries) == pytest.approx(math.log2(len(values)))
    # Nothing below the minimum count is ever shown.
    assert all(value is None or value >= MIN_COUNT for value in values)


def test_a_withheld_figure_says_below_what_and_a_released_one_its_step() -> None:
    from grader.integrity.contamination import SplitOverlap

    withheld = release(SplitOverlap("t", "test", 881, 800, 3, 881, 5, 8))
    shown = release(SplitOverlap("t", "test", 881, 800, 30, 881, 20, 47))
    assert withheld.line() == "t (test): fewer than 10 of 881 test queries touched (withheld below 10)"
    assert shown.line() == "t (test): at least 40 of 881 test queries touched (4.5%; counts in steps of 10)"
