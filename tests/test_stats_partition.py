"""The keyed public/private partition: deterministic, secret-dependent, the stated size, re-derivable from the rule."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from grader.errors import UsageError
from grader.stats.partition import commitment, new_secret, partition, public_count, query_tag, reveal_matches

SECRET = bytes(range(32))
IDS = [f"q{i}" for i in range(10_000)]


def test_partition_is_deterministic_and_covers_every_query_once() -> None:
    first = partition(SECRET, "text2code", IDS)
    again = partition(SECRET, "text2code", list(reversed(IDS)))
    assert first == again
    assert set(first.public) | set(first.private) == set(IDS)
    assert not set(first.public) & set(first.private)
    assert len(first.public) == 3000  # 0.3 of 10,000 exactly


def test_partition_depends_on_the_secret_and_the_task() -> None:
    base = set(partition(SECRET, "text2code", IDS).public)
    other_secret = set(partition(bytes(32), "text2code", IDS).public)
    other_task = set(partition(SECRET, "code2code", IDS).public)
    for other in (other_secret, other_task):
        # Independent draws overlap in about 0.3 * 3000 = 900 queries, not 3000.
        assert 750 < len(base & other) < 1050


def test_public_part_is_spread_over_the_queries() -> None:
    public = partition(SECRET, "t", IDS).public
    # Neither a prefix of the sorted ids nor clumped: each tenth of the ids holds 300 +- 60 public queries.
    tenths = [sum(1 for q in public if int(q[1:]) // 1000 == k) for k in range(10)]
    assert all(240 <= count <= 360 for count in tenths), tenths


def test_partition_reproduces_from_the_published_rule() -> None:
    ids = ["a", "b", "c", "d", "e", "f", "g"]
    task = "task-é"

    def tag(query: str) -> bytes:
        name = task.encode()
        return hmac.new(SECRET, len(name).to_bytes(4, "big") + name + query.encode(), hashlib.sha256).digest()

    assert query_tag(SECRET, task, "a") == tag("a")
    ranked = sorted(ids, key=tag)
    k = 2  # floor(0.3 * 7 + 0.5) = 2
    assert partition(SECRET, task, ids) == partition(SECRET, task, ids)
    assert partition(SECRET, task, ids).public == tuple(sorted(ranked[:k]))


@pytest.mark.parametrize(
    ("total", "fraction", "expected"),
    [(10_000, 0.3, 3000), (7, 0.3, 2), (5, 0.3, 2), (2, 0.3, 1), (3, 0.01, 1), (3, 0.99, 2), (1, 0.3, 0), (1, 0.6, 1), (881, "0.5", 441)],
)
def test_public_count(total: int, fraction: float | str, expected: int) -> None:
    assert public_count(total, fraction) == expected


def test_fraction_and_secret_are_checked() -> None:
    with pytest.raises(UsageError):
        partition(SECRET, "t", IDS, 0)
    with pytest.raises(UsageError):
        partition(SECRET, "t", IDS, 1.0)
    with pytest.raises(UsageError):
        partition(b"short", "t", IDS)


def test_commitment_and_reveal() -> None:
    secret = new_secret()
    assert len(secret) == 32 and secret != new_secret()
    published = commitment(secret)
    assert published == hashlib.sha256(secret).hexdigest()
    assert reveal_matches(secret, published) and reveal_matches(secret, published.upper())
    assert not reveal_matches(SECRET, published)
