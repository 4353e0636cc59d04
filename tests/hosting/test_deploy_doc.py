"""docs/deploy.md as an operator types it, and docs/deploy-compose.yml kept consistent with it.

Shell blocks in docs/deploy.md carry a marker on the line before the fence (parsed by
tests/doc_walk_support.py, shared with the walk of the host's and the participant's pages,
tests/hosting/test_docs_walk.py): ``<!-- test -->`` (run here, in order, each with
``bash -eu`` from the repository root), ``<!-- test: background -->`` (a long-running
command: started here, stopped at the end) or ``<!-- not tested here: why -->``. An
unmarked shell block fails the first test. This is the operator's path;
the host's and the participant's are walked in tests/hosting/test_docs_walk.py.
The walk-through runs against a throw-away PostgreSQL cluster and a redis-server
started from the configuration file the page writes; ``sudo [-u USER] CMD`` runs
as ``CMD`` (the throw-away servers belong to the test's user).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from grader.cli.main import cli
from tests import doc_walk_support as doc_walk
from tests.doc_walk_support import SUDO as PREAMBLE
from tests.doc_walk_support import Block, blocks
from tests.hosting.support import REPO, free_port

DEPLOY = REPO / "docs" / "deploy.md"
COMPOSE = REPO / "docs" / "deploy-compose.yml"


def shell_blocks() -> list[Block]:
    return doc_walk.shell_blocks(DEPLOY)


def test_every_shell_block_of_deploy_md_is_marked_tested_or_says_why_not() -> None:
    found = shell_blocks()
    unmarked = [f"docs/deploy.md:{b.line}" for b in found if b.marker is None]
    assert not unmarked, f"shell blocks without <!-- test --> or <!-- not tested here: why -->: {unmarked}"
    assert sum(b.marker == "<!-- test -->" for b in found) >= 5 and sum(b.marker == "<!-- test: background -->" for b in found) == 3


def test_the_marker_check_fails_on_an_unmarked_block() -> None:
    page = "text\n\n<!-- test -->\n```sh\necho a\n```\n\n```sh\necho b\n```\n\n<!-- not tested here:  -->\n```bash\necho c\n```\n"
    assert [b.marker for b in blocks(page)] == ["<!-- test -->", None, None]  # an empty reason is no reason


# -- the compose file --------------------------------------------------------------------------------------------


def _walkthrough_text() -> str:
    return "".join(b.code for b in shell_blocks() if b.marker and b.marker.startswith("<!-- test"))


def _grader_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if isinstance(s.get("command"), list) and s["command"][:1] == ["grader"]}


def _options_of(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


def test_the_compose_file_runs_the_walkthroughs_commands_with_its_variables() -> None:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    walk = _walkthrough_text()
    services = _grader_services(compose)
    subcommands = {name: s["command"][1] for name, s in services.items()}
    assert sorted(subcommands.values()) == ["serve", "worker", "worker"]  # a server and two workers, as deploy.md
    key_dirs = []
    for name, service in services.items():
        argv = service["command"]
        command = cli.commands[argv[1]]
        options = _options_of(command)
        assert f"grader {argv[1]}" in walk, f"{name}: deploy.md's walk-through runs no `grader {argv[1]}`"
        for word in argv[2:]:
            if word.startswith("--"):
                assert word in options, f"{name}: `grader {argv[1]}` has no option {word}"
                assert word in walk or word == "--host", f"{name}: {word} is not in deploy.md's walk-through"
        # the settings come from the same variables as deploy.md's environment file, and each is an option's envvar
        envvars = {p.envvar for p in options.values() if isinstance(p.envvar, str)}
        for variable in service.get("environment", {}):
            assert variable in envvars, f"{name}: `grader {argv[1]}` reads no {variable}"
            assert variable in walk, f"{name}: {variable} is not set in deploy.md's walk-through"
        assert not any("PASSWORD" in word or "redis://" in word or "postgresql://" in word for word in argv), f"{name}: a secret on argv"
        if argv[1] == "worker":
            key_dirs.append(argv[argv.index("--key-dir") + 1] + "|" + next(v for v in service["volumes"] if v.endswith(":/keys")))
    assert len(set(key_dirs)) == 2  # each worker its own key folder (its own volume)
    # Redis as deploy.md configures it: a password from the environment, never on argv, no persistence
    redis = " ".join(compose["services"]["redis"]["command"])
    walk_redis = next(b.code for b in shell_blocks() if "requirepass" in b.code)
    for setting in ('save ""', "appendonly no", "requirepass"):
        assert setting in redis and setting in walk_redis, setting
    assert "--requirepass" not in redis  # written to a file by the shell's printf (a builtin), not put on redis-server's argv


# -- the walk-through ------------------------------------------------------------------------------------------


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for(path: Path, pattern: str, process: subprocess.Popen[bytes], what: str, limit_s: float = 180) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        if re.search(pattern, text):
            return text
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}:\n{text[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{what}: no {pattern!r} within {limit_s} s:\n{text[-3000:]}")


@pytest.fixture
def background() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in reversed(started):
        _stop(process)


@pytest.mark.slow
def test_the_walkthrough_from_a_bare_machine_runs_as_written(tmp_path: Path, postgres_cluster, background: list[subprocess.Popen[bytes]]) -> None:  # type: ignore[no-untyped-def]
    redis_server = shutil.which("redis-server")
    assert redis_server, "redis-server missing (the setup installs it)"
    home = tmp_path / "srv"
    home.mkdir()
    env = {
        **os.environ,
        "PATH": f"{doc_walk.grader_on_path(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "GRADER_HOME": str(home),
        "PGHOST": "127.0.0.1",
        "PGPORT": str(postgres_cluster.port),
        "PGUSER": postgres_cluster.user,  # what `sudo -u postgres` gives on Debian: the cluster's superuser
        "PGDATABASE": "postgres",
        "REDIS_PORT": str(free_port()),
        "GRADER_PORT": str(free_port()),
        "REDIS_CONF": str(tmp_path / "redis-grader.conf"),
    }
    for variable in ("GRADER_DATABASE", "GRADER_BROKER", "GRADER_STATE", "GRADER_SERVER", "GRADER_COMPETITION", "GRADER_WORKER_TOKEN"):
        env.pop(variable, None)
    outputs: dict[int, str] = {}
    logs: dict[int, Path] = {}
    redis: subprocess.Popen[bytes] | None = None
    for block in shell_blocks():
        if block.marker == "<!-- test -->":
            done = subprocess.run(["bash", "-eu", "-c", PREAMBLE + block.code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"docs/deploy.md:{block.line} failed ({done.returncode}):\n{block.code}\n{done.stdout}\n{done.stderr}"
            outputs[block.line] = done.stdout
        elif block.marker == "<!-- test: background -->":
            log = tmp_path / f"block-{block.line}.log"
            with open(log, "wb") as out:
                background.append(
                    subprocess.Popen(
                        ["bash", "-eu", "-c", PREAMBLE + block.code], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
            logs[block.line] = log
        if redis is None and Path(env["REDIS_CONF"]).exists():
            # Debian's service would start it (an untested block): here, redis-server with the file the page wrote
            redis = subprocess.Popen(
                [redis_server, env["REDIS_CONF"], "--dir", str(tmp_path), "--daemonize", "no", "--logfile", str(tmp_path / "redis.log")],
                start_new_session=True,
            )
            background.insert(0, redis)
    secrets = dict(line.split("=", 1) for line in (home / "env").read_text(encoding="ascii").splitlines() if "PASSWORD=" in line)
    assert len(secrets) == 2 and all(len(v) == 48 for v in secrets.values())

    serve, worker1, worker2 = (background[i] for i in (1, 2, 3))
    serve_log, worker1_log, worker2_log = (logs[line] for line in sorted(logs))
    first = _wait_for(serve_log, r"serving competition", serve, "grader serve")
    start = next(line for line in first.splitlines() if "serving competition" in line)
    assert f"database: postgresql://grader:***@127.0.0.1:{env['PGPORT']}/grader" in start
    assert f"broker: redis://:***@127.0.0.1:{env['REDIS_PORT']}/0" in start and start.endswith("local workers: 0")
    for log, process, name in ((worker1_log, worker1, "worker-1"), (worker2_log, worker2, "worker-2")):
        _wait_for(log, r"\bready\b", process, name)
    admin_out = outputs[max(outputs)]  # the last tested block: step 8, in a shell that sourced the file
    assert re.search(r"worker-1\s+remote\s+key=yes", admin_out) and re.search(r"worker-2\s+remote\s+key=yes", admin_out)
    assert (home / "alice.token").stat().st_size > 20  # step 8 printed a participant's token into the file

    # passwords and tokens only in files of mode 0600 and in environments, never on a command line
    for path in (home / "env", home / "worker-1.token", home / "worker-2.token"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    tokens = [(home / f"worker-{i}.token").read_text(encoding="ascii").strip() for i in (1, 2)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        for secret in [*secrets.values(), *tokens]:
            assert secret not in argv, f"a secret on the command line of process {pid}: {argv[:200]!r}"

    # a new shell that did not source the file: the refusal names the variable to set
    bare = {k: v for k, v in env.items() if not k.startswith("GRADER_") or k == "GRADER_HOME"}
    refused = subprocess.run(["grader", "admin", "--state", str(home / "state"), "list"], env=bare, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "no competition database here" in refused.stderr and "GRADER_DATABASE" in refused.stderr
