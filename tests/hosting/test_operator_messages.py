"""What the server, the workers and `grader admin` tell the operator (server and admin side).

Each test breaks if the message it pins goes back to misleading: the reaper's warning
for a queue behind a busy worker, a silent worker, Celery's `--uid` advice, two names
for one worker, two digests without a word, a misaligned host board that asks for
the competition file again, admin commands that import the numeric stack, a benchmark
folder looked up in the working directory, and a final choice saved without saying which.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from grader.cli.main import cli
from grader.hosting.api.app import create_app
from grader.hosting.config import load_competition
from grader.hosting.queue.lifecycle import reap
from grader.hosting.server import ServeOptions, log_waiting, masked, prepare, start_line
from tests.hosting.support import REPO, write_competition
from tests.hosting.world import World

pytestmark = [pytest.mark.board(seeded=True), pytest.mark.sqlite_only]


def admin(world: World, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["admin", "--state", str(world.state.root), *args])
    return result.exit_code, result.output


# -- the reaper --------------------------------------------------------------------------------------------------


def test_jobs_queued_behind_a_busy_worker_are_no_warning_but_jobs_nobody_claims_are(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="grader.hosting")
    log_waiting(["s1", "s2"], running=1)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] and "2 job(s) queued while 1 run" in caplog.text
    caplog.clear()
    log_waiting(["s1"], running=0)
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "no worker is grading" in caplog.text
    caplog.clear()
    log_waiting([], running=0)
    assert caplog.records == []


def test_a_reaper_pass_counts_the_jobs_under_a_live_lease(world: World) -> None:
    from grader.hosting.queue.dispatch import LocalDispatcher
    from grader.hosting.queue.lifecycle import claim, rejudge_submission

    done = reap(world.ctx.db, LocalDispatcher(), redispatch_s=30)
    assert done.running == 0  # the seeded world has only finished jobs
    sid = world.by_name("bob-lsa").id
    assert rejudge_submission(world.ctx.db, LocalDispatcher(), sid, max_attempts=5)
    assert claim(world.ctx.db, worker_id=1, lease_s=600) is not None
    assert reap(world.ctx.db, LocalDispatcher(), redispatch_s=30).running == 1


# -- workers -----------------------------------------------------------------------------------------------------


def test_a_worker_logs_each_task_and_its_progress(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from grader.hosting.results.grade_progress import GradeProgress, read_progress

    caplog.set_level(logging.INFO, logger="grader.worker")
    progress = GradeProgress(["text2code", "code2code"], tmp_path / "progress.json", log_every_s=3600)
    progress.task_started("text2code", documents=120, queries=30)
    advance = progress.progress("text2code: corpus", 120)
    advance(10)  # within the period: quiet in the log
    advance(110)  # the last: always said, and written
    assert read_progress(tmp_path / "progress.json")[0].encoded == 120
    progress.stage("text2code", "searching")
    progress.task_finished("text2code", {"status": "ranked", "failure": None}, resumed=False)
    progress.task_finished("code2code", {"status": "failed", "failure": {"code": "TIMEOUT"}}, resumed=False)
    progress.task_started("unnamed", documents=5, queries=1)  # a task the job did not name: never reported
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "task text2code: encoding 120 documents"
    assert messages[1] == "task text2code: encoding 120 of 120 documents" and len(messages) == 5
    assert messages[2] == "task text2code: searching"
    assert re.fullmatch(r"task text2code: ranked in \d+ s", messages[3])
    assert re.fullmatch(r"task code2code: failed in \d+ s \(TIMEOUT\)", messages[4])
    assert [(p.task, p.phase.value) for p in read_progress(tmp_path / "progress.json")] == [("text2code", "ranked"), ("code2code", "failed")]


def test_grading_on_a_host_uses_the_progress_the_heartbeat_sends() -> None:
    import inspect

    from grader.hosting.results import grading_adapter

    assert "GradeProgress(request.tasks, work_dir / PROGRESS_FILE)" in inspect.getsource(grading_adapter.grade_upload)


def test_celerys_uid_advice_is_replaced(caplog: pytest.LogCaptureFixture) -> None:
    import os

    from celery.exceptions import SecurityWarning

    from grader.hosting.worker.celery_worker import quiet_celery_root_advice

    caplog.set_level(logging.WARNING, logger="grader.worker")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_celery_root_advice()
        warnings.warn(SecurityWarning("Please specify a different user using the --uid option."), stacklevel=1)
    assert not [w for w in seen if "--uid" in str(w.message)]
    if os.geteuid() == 0:
        assert "running as root" in caplog.text and "--uid" not in caplog.text


# -- grader admin ------------------------------------------------------------------------------------------------


def test_history_names_a_worker_as_reports_do_and_says_why_the_digests_differ(world: World) -> None:
    sid = world.by_name("alice-encoder-v2").id
    status, output = admin(world, "history", sid)
    assert status == 0, output
    assert "worker seed-worker: attempt 1 claimed" in output and not re.search(r"worker:\d", output)
    assert "upload: 1 bytes, sha256 " in output and "the upload's sha256 is of the archive's bytes as sent" in output


def test_the_host_board_is_aligned_and_needs_no_competition_file_after_serve(world: World) -> None:
    status, output = admin(world, "leaderboard")
    assert status == 2 and "pass --competition FILE (or set GRADER_COMPETITION)" in output  # no server start noted a file
    _ctx, db = prepare(ServeOptions(world.ctx.competition, world.state.root, workers=0, competition_file=world.state.root.parent / "c.toml"))
    db.dispose()
    status, output = admin(world, "leaderboard")  # as `grader serve --competition c.toml` started it
    assert status == 0, output
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    table = lines[header : lines.index("", header) if "" in lines[header:] else len(lines)]
    starts = {column: lines[header].index(column) for column in ("score", "participant", "submission")}
    for line in table[1:]:
        for column, at in starts.items():
            assert line[at - 1] == " " and line[at] != " ", (column, line)  # each column starts where its header does


@pytest.mark.slow
def test_admin_commands_import_only_what_they_use(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from grader.cli.main import cli\n"
        f"result = CliRunner().invoke(cli, ['admin', '--state', {str(tmp_path)!r}, 'list'])\n"
        "assert 'no competition database here' in result.output, result.output\n"
        "print(sorted(m for m in ('numpy', 'scipy', 'numba', 'onnx', 'onnxruntime', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_full_command_list_still_loads_every_module() -> None:
    names = set(cli.commands)
    assert {"admin", "reveal-check", "run", "compare", "submit", "status", "worker"} <= names
    assert CliRunner().invoke(cli, ["--help"]).exit_code == 0


def test_a_benchmark_folder_next_to_the_file_is_found_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.data.registry import data_root, resolve_benchmark

    here = tmp_path / "competition"
    shutil.copytree(data_root("mini"), here / "bench")
    (here / "bench" / "benchmark.json").unlink()  # task folders only
    competition = load_competition(write_competition(here / "c.toml", benchmark="bench"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = competition.benchmark_target()
    assert Path(target) == (here / "bench").resolve()
    assert set(resolve_benchmark(target).spec.tasks) == {"text2code", "code2text", "code2code"}
    # a registered name without a folder next to the file stays the registered benchmark
    assert load_competition(write_competition(tmp_path / "other.toml")).benchmark_target() == "mini"


def test_the_own_page_confirms_which_final_choices_were_saved(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    client.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/signin").text)
    assert csrf
    client.post("/signin", data={"token": world.tokens["alice"], "csrf": csrf.group(1)})
    v1 = world.by_name("alice-encoder-v1").id
    form = re.search(r'name="csrf" value="([^"]+)"', client.get("/me").text)
    assert form
    page = client.post("/me/finals", data={"final": v1, "csrf": form.group(1)}).text
    assert f"final choices saved: {v1} count for the private board" in page
    assert re.search(rf'id="saved-finals"><code>{v1}</code></span>', page)
    page = client.post("/me/finals", data={"csrf": form.group(1)}).text
    assert "none chosen, so your best public submissions count" in page and 'id="saved-finals"' not in page


# -- grader serve's start line -----------------------------------------------------------------------------------


def test_the_start_line_names_database_broker_and_workers_with_passwords_masked(tmp_path: Path) -> None:
    competition = load_competition(write_competition(tmp_path / "c.toml"))
    options = ServeOptions(
        competition,
        tmp_path / "state",
        workers=2,
        database="postgresql://grader:s3cret@db.example:5432/grader",
        broker="redis://:hunter2@127.0.0.1:6379/0",
    )
    line = start_line(options, "http://127.0.0.1:8000", tmp_path / "state")
    assert "s3cret" not in line and "hunter2" not in line
    assert "database: postgresql://grader:***@db.example:5432/grader" in line
    assert "broker: redis://:***@127.0.0.1:6379/0" in line and line.endswith(
        f"local workers: 2 (their logs: {tmp_path / 'state' / 'run'}/local-N.log)"
    )
    plain = start_line(ServeOptions(competition, tmp_path / "state"), "http://127.0.0.1:8000", tmp_path / "state")
    assert f"database: SQLite in {tmp_path / 'state'}" in plain and "broker: none" in plain and "local workers: 1 (their logs: " in plain
    assert masked("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
