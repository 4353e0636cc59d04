"""What the client reads of a server (competition, quota) is untrusted: type-checked field by field, one ClientError line on a misfit."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from grader.hosting.config import load_competition
from grader.hosting.errors import ClientError
from grader.hosting.intake.refusals import QuotaStatus, quota_refusal, window_refusal
from grader.hosting.participant.competition_rules import ParticipantRules, competition_url, load_rules
from grader.sandbox.limits import SandboxLimits
from tests.hosting.support import write_competition

SOURCE = "http://h/api/v1/competition"


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "c",
        "benchmark": "mini",
        "tasks": None,
        "kinds": ["onnx"],
        "require_training_labels": True,
        "upload_max_bytes": 1 << 20,
        "limits": {**SandboxLimits(time_limit_s=600.0, memory_bytes=4 << 30).as_report(), "gpu": 1},  # a newer server's limit: ignored
        "start": "2020-01-01T00:00:00Z",
        "end": "2099-01-01T00:00:00Z",
    }
    doc.update(changes)
    return doc


def test_a_servers_competition_reads_as_its_file_does(tmp_path: Path) -> None:
    rules = ParticipantRules.from_api(document(), SOURCE)
    assert rules.limits == SandboxLimits(time_limit_s=600.0, memory_bytes=4 << 30)
    assert rules.kinds == ("onnx",) and rules.require_training_labels and rules.upload_max_bytes == 1 << 20
    assert rules.end == datetime(2099, 1, 1, tzinfo=UTC) and rules.source == f"the server's competition {SOURCE}"
    file = write_competition(tmp_path / "c.toml", kinds=["onnx"], require_training_labels=True)
    from_file = load_rules(str(file))
    assert from_file.limits == load_competition(file).limits and from_file.source == f"the competition file {file.resolve()}"
    assert competition_url("http://h/") == competition_url("http://h/api/v1/competition") == SOURCE


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"kinds": "onnx"}, "kinds: not a list of strings"),
        ({"require_training_labels": "yes"}, "require_training_labels: not true or false"),
        ({"upload_max_bytes": -1}, "upload_max_bytes: not a count"),
        ({"upload_max_bytes": True}, "upload_max_bytes: not a count"),
        ({"limits": {"time_limit_s": "600"}}, "limits.time_limit_s: not a positive number"),
        ({"limits": []}, "limits: not an object"),
        ({"end": "tomorrow"}, "Invalid isoformat string"),
        ({"end": "2099-01-01T00:00:00"}, "end: no UTC offset"),
    ],
)
def test_a_misfit_in_the_servers_competition_is_one_client_error(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ClientError) as caught:
        ParticipantRules.from_api(document(**change), SOURCE)
    assert str(caught.value).startswith(f"{SOURCE}: not a competition this grader can read: ") and words in str(caught.value)


def test_quota_answers_round_trip_and_misfits_are_refused() -> None:
    status = QuotaStatus("hidden", 5, 5, 7, 20, 0, 2, datetime(2030, 1, 1, tzinfo=UTC))
    assert QuotaStatus.from_dict(status.as_dict()) == status
    refusal = quota_refusal(status)
    assert (
        refusal is not None
        and refusal.status == 429
        and str(refusal) == ("daily quota used: 5 of 5 hidden submissions in the last 24 h; the next is possible at 2030-01-01T00:00:00Z")
    )
    for bad in (None, {**status.as_dict(), "used_24h": "5"}, {**status.as_dict(), "next_possible_at": "soon"}):
        with pytest.raises(ClientError):
            QuotaStatus.from_dict(bad)
    start, end = datetime(2020, 1, 1, tzinfo=UTC), datetime(2021, 1, 1, tzinfo=UTC)
    assert window_refusal(start, end, datetime(2020, 6, 1, tzinfo=UTC)) is None
    closed = window_refusal(start, end, end)
    assert closed is not None and str(closed) == "the competition closed at 2021-01-01T00:00:00Z; no further submissions are possible"


def test_the_quota_answer_carries_the_hours_refusals_and_the_client_refuses_at_the_limit() -> None:
    drop = datetime(2030, 1, 1, 1, tzinfo=UTC)
    at_limit = QuotaStatus(
        "hidden", 0, 5, 0, 20, 0, 2, None, refused_last_hour=8, errors_last_hour=5, refusals_per_hour=10, infra_per_hour=3, refusals_drop_at=drop
    )
    assert QuotaStatus.from_dict(at_limit.as_dict()) == at_limit
    refusal = quota_refusal(at_limit)  # 8 refused + (5 - 3) platform failures = the limit of 10
    assert refusal is not None and refusal.status == 429 and refusal.retry_at == drop
    assert str(refusal) == (
        "too many refused uploads: 8 refused and 5 ended by a platform failure in the last hour "
        "(at most 10, platform failures beyond 3 counted); the next upload is possible at 2030-01-01T01:00:00Z"
    )
    assert (
        quota_refusal(QuotaStatus("hidden", 0, 5, 0, 20, 0, 2, None, refused_last_hour=9, errors_last_hour=3, refusals_per_hour=10, infra_per_hour=3))
        is None
    )
    older = {k: v for k, v in at_limit.as_dict().items() if k not in ("refusals_per_hour", "infra_per_hour")}  # an older server's answer
    assert quota_refusal(QuotaStatus.from_dict(older)) is None
    with pytest.raises(ClientError, match="refusals_drop_at"):
        QuotaStatus.from_dict({**at_limit.as_dict(), "refusals_drop_at": "soon"})
