"""The leaderboard's caches are sized per competition and bounded overall (grader/hosting/leaderboard/caches.py).

On a server of many competitions one competition's reads must not evict another's verified reports or statistics,
and all of them together stay bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.hosting.leaderboard import values
from grader.hosting.leaderboard.caches import CompetitionCache, competition_of


def test_each_competition_keeps_its_own_entries_up_to_its_bound() -> None:
    cache: CompetitionCache[str, int] = CompetitionCache(per_competition=3, overall=100)
    for index in range(3):
        cache.put(b"a", f"a{index}", index)
    for index in range(50):  # another competition's many reads
        cache.put(b"b", f"b{index}", index)
    assert [cache.get(b"a", f"a{index}") for index in range(3)] == [0, 1, 2]
    assert cache.sizes() == {b"a": 3, b"b": 3} and len(cache) == 6
    # least recently used first out, within a competition
    assert cache.get(b"a", "a0") == 0
    cache.put(b"a", "a3", 3)
    assert cache.get(b"a", "a1") is None and cache.get(b"a", "a0") == 0
    # the same key under another competition is another entry
    assert cache.get(b"b", "a0") is None


def test_all_competitions_together_stay_within_the_overall_bound() -> None:
    cache: CompetitionCache[int, int] = CompetitionCache(per_competition=4, overall=10)
    for competition in range(5):
        for key in range(4):
            cache.put(bytes([competition]), key, key)
    assert len(cache) == 10 and sum(cache.sizes().values()) == 10
    # the least recently read competitions gave way: the last ones are whole
    assert cache.sizes()[bytes([4])] == 4 and cache.sizes()[bytes([3])] == 4
    assert bytes([0]) not in cache.sizes()
    cache.get(bytes([2]), 3)  # read: now the most recent
    cache.put(bytes([5]), 0, 0)
    assert cache.get(bytes([2]), 3) == 3
    cache.clear()
    assert len(cache) == 0 and cache.sizes() == {}


def one_task_report() -> dict[str, Any]:
    """A small valid report with per-query values (what a board row's signed report carries)."""
    from grader.data.benchmark import BenchmarkSpec
    from grader.hosting.clock import utcnow
    from grader.reports.model import build_report

    per_query = {f"q{i}": i / 10 for i in range(10)}
    spec = BenchmarkSpec(name="b", version="1", primary_measure="NDCG@10", tasks=("t",), groups={})
    task = {
        "name": "t",
        "split": "test",
        "data_digest": {"sha256": "0" * 64},
        "status": "scored",
        "failure": None,
        "measures": {"NDCG@10": 0.45},
        "queries": {"judged": 10, "answered": 10, "missing": 0, "extra": 0},
        "per_query": {"measure": "NDCG@10", "values": per_query},
    }
    return build_report(
        benchmark={"name": "b", "version": "1", "primary_measure": "NDCG@10"},
        subject={"name": "s", "kind": "onnx", "digest": {"sha256": "1" * 64}},
        tasks=[task],
        aggregate=spec.aggregate({"t": 0.45}),
        policy="strict",
        started_at=utcnow(),
        finished_at=utcnow(),
    )


def test_twenty_competitions_boards_do_not_evict_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty competitions of 50 board rows each: 1,000 verified reports, more than one competition's bound (512) and what
    the shared cache held before; read again, none is verified twice."""
    from grader.reports.signing import envelope_json, sign_report

    monkeypatch.setattr(values, "_cache", CompetitionCache(per_competition=512, overall=4096))
    verified = []
    real_verify = values.verify_envelope

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        verified.append(args[2] if len(args) > 2 else kwargs.get("source"))
        return real_verify(*args, **kwargs)

    monkeypatch.setattr(values, "verify_envelope", counting)
    report = one_task_report()
    keys = [Ed25519PrivateKey.generate() for _ in range(20)]
    paths: list[tuple[Path, Ed25519PrivateKey]] = []
    for number, key in enumerate(keys):
        envelope = envelope_json(sign_report(report, key))
        for row in range(50):
            path = tmp_path / f"c{number}-{row}.dsse.json"
            path.write_bytes(envelope)
            paths.append((path, key))
    for _round in range(2):
        for path, key in paths:
            values.signed_values(path, key.public_key())
    assert len(verified) == 1000  # each once: the second round came from the cache
    assert set(values._cache.sizes().values()) == {50} and set(values._cache.sizes()) == {competition_of(k.public_key()) for k in keys}
