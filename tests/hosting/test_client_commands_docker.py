"""The participant's commands against one real `grader serve` (a local worker, the Docker sandbox), the real CLI in a subprocess.

`submit --wait` prints its final line once and, off a terminal, a few plain
progress lines; `status` and `submissions` label each score (public until the
end, then private and full too); `quota` and `finals` need no curl; an unknown
id exits 6, apart from "unreachable" (5). Tests run in file order; the last one
ends the competition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.slow, pytest.mark.docker(RUNNER_IMAGE)]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
SCORE = r"\d\.\d{4}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str], dict[str, str]]]:
    require_docker([RUNNER_IMAGE])
    root = tmp_path_factory.mktemp("client-commands")
    server = Server(write_competition(root / "c.toml", tasks=["text2code"]), root / "state", workers=1).start()
    env = {"GRADER_TOKEN": admin(server.state, "add-participant", "alice").strip(), "GRADER_SERVER": server.url}
    ids: dict[str, str] = {}
    try:
        yield server, env, ids
    finally:
        server.stop()


def cli(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    return grader_cli(*args, env=env, timeout=600)


def test_submit_wait_prints_the_final_line_once_and_plain_progress_in_a_log(served) -> None:  # type: ignore[no-untyped-def]
    _server, env, ids = served
    done = cli(env, "submit", str(EXAMPLE), "--wait")
    assert done.returncode == 0, done.stderr
    submission_id = done.stdout.splitlines()[0]
    ids["scored"] = submission_id
    both = done.stdout.splitlines() + done.stderr.splitlines()
    finals = [line for line in both if line.startswith(f"{submission_id}  scored")]
    assert len(finals) == 1 and finals[0] in done.stdout.splitlines()
    assert re.fullmatch(rf"{submission_id}  scored  public score {SCORE}", finals[0])
    assert "\r" not in done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("upload: ")]
    assert 2 <= len(progress) <= 5 and progress[-1].endswith("(100 %)"), done.stderr


def test_status_submissions_and_quota_label_what_they_print(served) -> None:  # type: ignore[no-untyped-def]
    _server, env, ids = served
    status = cli(env, "status", ids["scored"])
    assert status.returncode == 0, status.stderr
    assert re.fullmatch(rf"{ids['scored']}  scored  public score {SCORE}\n", status.stdout)
    listed = cli(env, "submissions")
    assert listed.returncode == 0 and re.match(rf"{ids['scored']}  scored  public score {SCORE}  hidden  ", listed.stdout)
    quota = cli(env, "quota")
    assert quota.returncode == 0, quota.stderr
    assert quota.stdout.splitlines() == [
        "hidden: 1 of 5 in the last 24 h; 1 of 20 in total; 0 of at most 2 being graded",
        "sample: 0 of 5 in the last 24 h; 0 of at most 2 being graded",
        "refused uploads: 0 of at most 10 in the last hour",
    ]


def test_finals_are_shown_and_chosen_and_an_unknown_id_exits_6(served) -> None:  # type: ignore[no-untyped-def]
    _server, env, ids = served
    shown = cli(env, "finals")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"finals (by default: your best public ones; at most 2): {ids['scored']}\n"
    chosen = cli(env, "finals", ids["scored"])
    assert chosen.returncode == 0 and chosen.stdout == f"finals (saved: chosen by you; at most 2): {ids['scored']}\n"
    assert cli(env, "finals").stdout == f"finals (chosen by you; at most 2): {ids['scored']}\n"
    for args in (("status", "s_nosuchid"), ("finals", "s_nosuchid")):
        unknown = cli(env, *args)
        assert unknown.returncode == 6, unknown.stderr
        assert unknown.stderr.startswith("error: server answered 404: no such submission")
    unreachable = cli({**env, "GRADER_SERVER": "http://127.0.0.1:9"}, "status", ids["scored"])
    assert unreachable.returncode == 5 and "cannot reach" in unreachable.stderr


def test_after_the_end_status_prints_public_private_and_full_scores(served) -> None:  # type: ignore[no-untyped-def]
    server, env, ids = served
    admin(server.state, "end", "--yes")
    status = cli(env, "status", ids["scored"])
    assert status.returncode == 0, status.stderr
    assert re.fullmatch(rf"{ids['scored']}  scored  public score {SCORE}  private score {SCORE}  full score {SCORE}\n", status.stdout)
    listed = cli(env, "submissions")
    assert re.match(rf"{ids['scored']}  scored  public score {SCORE}  private score {SCORE}  full score {SCORE}  hidden  ", listed.stdout)
    late = cli(env, "finals", ids["scored"])
    assert late.returncode == 5 and "409" in late.stderr
