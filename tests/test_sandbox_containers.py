"""The sandbox against misbehaving images: real containers, small limits, exact failure codes.

Each test stages the tiny task of ``tests/sandbox_support.py``, runs one image of
``tests/sandbox_images`` through ``run_and_collect`` (or ``run_container``),
asserts the failure code and what the container reported, and then that the host
is as it was: no container left, no tmpfs mounted, no scratch file, ``/input``
unchanged.
"""

from __future__ import annotations

import io
import os
import threading
import time
import uuid
from pathlib import Path

import docker.errors
import pytest

from grader.errors import TaskFailure
from grader.grading.sandboxed import SandboxedOutput, run_and_collect
from grader.metrics.measures import parse_measure
from grader.metrics.policy import Policy, evaluate
from grader.sandbox.blinding import DOCUMENT, QUERY, blind, pseudonyms
from grader.sandbox.container import Mount, run_container
from tests.sandbox_support import (
    BASE_IMAGE,
    QRELS,
    QUERIES,
    TEST_BLINDING_KEY,
    HostGuard,
    host_still_forks,
    image_of,
    read_log,
    require_docker,
    small_limits,
    stage_small,
    write_beir_task,
)

pytestmark = [pytest.mark.docker(BASE_IMAGE), pytest.mark.usefixtures("docker_engine"), pytest.mark.slow]

NDCG10 = parse_measure("NDCG@10")


class Ran:
    """One run_and_collect call: its output or its failure, the log, the time it took."""

    def __init__(self, output: SandboxedOutput | None, failure: TaskFailure | None, log_path: Path, wall_s: float) -> None:
        self.output = output
        self.failure = failure
        self.log_path = log_path
        self.wall_s = wall_s

    @property
    def log(self) -> str:
        return read_log(self.log_path)

    def code(self) -> str | None:
        return self.failure.code if self.failure else None


def run_image(
    guard: HostGuard,
    name: str,
    *,
    task: str = "valid",
    mode: str = "retrieve",
    image: str | None = None,
    keep_output: Path | None = None,
    environment: dict[str, str] | None = None,
    **limits: object,
) -> Ran:
    """Stage the tiny task as ``task``, run the image on it, and collect what happened."""
    root = guard.root
    staged = stage_small(root / "input", task=task, mode=mode)
    guard.watch(staged.folder)
    scratch = root / "scratch"
    scratch.mkdir(exist_ok=True)
    log_path = root / "logs" / f"{name}.log"
    started = time.monotonic()
    output = failure = None
    try:
        output = run_and_collect(
            image or image_of(name),
            staged,
            mode=mode,
            limits=small_limits(**limits),
            log_path=log_path,
            scratch=scratch,
            keep_output=keep_output,
            environment=environment,
        )
    except TaskFailure as error:
        failure = error
    wall = time.monotonic() - started
    assert list(scratch.iterdir()) == [], f"the /output folder was not removed: {list(scratch.iterdir())}"
    return Ran(output, failure, log_path, wall)


# --------------------------------------------------------------------------- hardening

PROBE_SCRIPT = r"""
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
echo "uid=$(id -u)"
if ( : > /etc/probe ) 2>/dev/null; then echo "etc=writable"; else echo "etc=read-only"; fi
if ( : > /probe/written ) 2>/dev/null; then echo "bind=writable"; else echo "bind=read-only"; fi
if echo hi > /tmp/probe && [ "$(cat /tmp/probe)" = hi ]; then echo "tmp=writable"; else echo "tmp=not-writable"; fi
cp /bin/true /tmp/true && chmod 755 /tmp/true
if /tmp/true 2>/dev/null; then echo "tmp-exec=allowed"; else echo "tmp-exec=denied"; fi
echo "interfaces=$(ls /sys/class/net | tr '\n' ' ')"
echo "home=$HOME"
i=0; while [ ! -e /probe/go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
echo "probe done"
"""


def test_hardening_is_in_force(guard: HostGuard, tmp_path: Path) -> None:
    """No capabilities, no-new-privileges, non-root, read-only root, noexec /tmp, no network, the limits set."""
    probe = tmp_path / "probe"
    probe.mkdir()
    # The probe waits (up to 120 s) until the test has seen it running: room for a loaded engine, within the limit.
    limits = small_limits(time_limit_s=180.0)
    log_path = tmp_path / "probe.log"
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["outcome"] = run_container(
                BASE_IMAGE,
                mounts=[Mount(probe, "/probe", True)],
                limits=limits,
                log_path=log_path,
                command=["/bin/sh", "-c", PROBE_SCRIPT],
                user="10001",
            )
        except Exception as error:  # surfaced below
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    try:
        attrs = None
        deadline = time.monotonic() + 120
        while attrs is None and time.monotonic() < deadline and thread.is_alive():
            for container in guard.own_containers():
                try:
                    container.reload()
                except docker.errors.NotFound:  # removed between list and inspect: the thread's result says why
                    continue
                if container.attrs["State"].get("Running"):
                    attrs = container.attrs
            time.sleep(0.05)
    finally:
        (probe / "go").touch()
        thread.join(180)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    assert attrs is not None, "never saw the container running"

    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Privileged"] is False
    assert host["PidsLimit"] == limits.pids
    # A tmpfs /tmp is charged to memory, so its cap is added to the limit (disk-backed /tmp: see test_sandbox_lifecycle).
    memory = limits.memory_bytes + limits.tmp_bytes
    assert host["Memory"] == memory and host["MemorySwap"] == memory
    assert host["NanoCpus"] == int(limits.cpus * 1e9)
    assert host["Init"] is True
    assert "noexec" in host["Tmpfs"]["/tmp"] and f"size={limits.tmp_bytes}" in host["Tmpfs"]["/tmp"]
    assert {(u["Name"], u["Hard"]) for u in host["Ulimits"]} == {("nofile", limits.nofile), ("fsize", limits.output_bytes)}
    assert attrs["Config"]["User"] == "10001"
    assert attrs["Config"]["Labels"].get("dev.grader.sandbox") == "1"
    assert [(m["Destination"], m["RW"]) for m in attrs["Mounts"] if m["Type"] == "bind"] == [("/probe", False)]

    outcome = result["outcome"]
    assert outcome.exit_code == 0 and not outcome.timed_out and not outcome.oom_killed  # type: ignore[attr-defined]
    lines: dict[str, str] = {}
    for line in read_log(log_path).splitlines():
        key, sep, value = line.partition(":") if line.startswith("Cap") or line.startswith("NoNewPrivs") else line.partition("=")
        if sep:
            lines[key + (":" if sep == ":" else "")] = value.strip()
    for capability in ("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"):
        assert int(lines[capability], 16) == 0, f"{capability} {lines[capability]}"
    assert lines["NoNewPrivs:"] == "1"
    assert lines["uid"] != "0" and lines["uid"] == "10001"
    assert lines["etc"] == "read-only"
    assert lines["bind"] == "read-only"
    assert lines["tmp"] == "writable"
    assert lines["tmp-exec"] == "denied"
    assert lines["interfaces"].split() == ["lo"]
    assert lines["home"] == "/tmp"
    assert sorted(p.name for p in probe.iterdir()) == ["go"]
    guard.verify()


# --------------------------------------------------------------------------- escape attempts


@pytest.mark.docker(image_of("egress"))
def test_egress_gets_nowhere(guard: HostGuard) -> None:
    ran = run_image(guard, "egress")
    assert ran.code() == "NONZERO_EXIT", ran.failure
    assert "exit status 1" in ran.failure.detail
    assert "no route out" in ran.failure.detail
    log = ran.log
    # No route at all (only a loopback interface: network mode none), not a firewall's timeout.
    for attempt in ("tcp connect 1.1.1.1:53", "tcp connect 8.8.8.8:53", "tcp connect 1.1.1.1:443", "udp dns 1.1.1.1:53"):
        assert f"egress: {attempt}: refused ([Errno 101] Network is unreachable)" in log, log
    assert "egress: dns example.com: refused (" in log
    for success in ("CONNECTED", "RESOLVED", "ANSWERED", "GOT OUT"):
        assert success not in log
    guard.verify()


@pytest.mark.docker(image_of("snoop"))
def test_snoop_finds_no_judgements(guard: HostGuard, tmp_path: Path) -> None:
    """The task's qrels sit on the host next to its corpus; nothing of them is visible inside."""
    from grader.data.task import Task
    from grader.grading.interfaces import load_task_inputs
    from grader.sandbox.staging import stage_task

    task_root = write_beir_task(tmp_path / "bench" / "secret-task")
    inputs = load_task_inputs(Task(task_root), "test")
    assert (task_root / "qrels" / "test.tsv").read_text().startswith("query-id\tcorpus-id")
    staged = stage_task(
        tmp_path / "input",
        task="secret-task",
        split="test",
        mode="retrieve",
        top_k=10,
        queries=inputs.queries,
        documents=inputs.documents,
        key=TEST_BLINDING_KEY,
    )
    guard.watch(staged.folder, task_root)
    log_path = tmp_path / "snoop.log"
    output = run_and_collect(image_of("snoop"), staged, mode="retrieve", limits=small_limits(time_limit_s=60), log_path=log_path, scratch=tmp_path)
    log = read_log(log_path)
    assert "snoop: scanned" in log and ", 0 findings" in log, log
    assert "found (" not in log
    run = output.outputs.run
    assert sorted(run.query_ids) == sorted(q.id for q in QUERIES)
    scores = [score for query in run.query_ids for _, score in run.ranking(query)]
    assert scores and all(score == 0.0 for score in scores), scores
    # What is mounted: /input (read-only), /output, /tmp; never the task folder itself.
    assert str(task_root) not in log
    assert sorted(p.name for p in staged.folder.iterdir()) == ["corpus.jsonl", "queries.jsonl", "task.json"]
    guard.verify()


@pytest.mark.docker(image_of("write-input"))
def test_writing_to_input_is_refused(guard: HostGuard) -> None:
    ran = run_image(guard, "write-input")
    assert ran.code() == "NONZERO_EXIT", ran.failure
    assert "exit status 3" in ran.failure.detail
    assert "every write refused" in ran.failure.detail
    log = ran.log
    for attempt in (
        "create /input/pwned",
        "overwrite /input/queries.jsonl",
        "chmod /input/task.json",
        "mkdir /input/dir",
        "create /etc/pwned (root fs)",
        "create /app/pwned (root fs)",
    ):
        assert f"write-input: {attempt}: refused (" in log, log
    # The mount itself is read-only (not merely files the user does not own).
    assert "write-input: create /input/pwned: refused (Read-only file system)" in log
    assert "write-input: create /etc/pwned (root fs): refused (Read-only file system)" in log
    assert "WRITTEN" not in log
    guard.verify()  # /input on the host is byte-for-byte what was staged


# --------------------------------------------------------------------------- resource limits


@pytest.mark.docker(image_of("forkbomb"))
def test_fork_bomb_is_bounded_by_the_pids_limit(guard: HostGuard) -> None:
    pids = 48
    ran = run_image(guard, "forkbomb", pids=pids, time_limit_s=120)
    assert ran.code() == "NONZERO_EXIT", ran.failure
    assert "exit status 1" in ran.failure.detail
    detail = ran.failure.detail
    assert "forkbomb: refused after" in detail and "NOT REFUSED" not in ran.log
    children = int(detail.split("refused after ")[1].split()[0])
    assert 0 < children < pids, detail
    assert ran.wall_s < 100  # ended by itself, refused, long before the limit (the margin is for a loaded engine)
    host_still_forks()
    guard.verify()  # stopped and removed


@pytest.mark.docker(image_of("memhog"))
def test_memory_hog_is_oom_killed(guard: HostGuard) -> None:
    ran = run_image(guard, "memhog", memory_bytes=256 << 20, time_limit_s=30)
    assert ran.code() == "OOM", ran.failure
    log = ran.log
    assert "memhog: holding 100 MB" in log
    assert "NOT KILLED" not in log and "memhog: holding 300 MB" not in log
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(image_of("sleeper"))
def test_sleeper_is_killed_at_the_time_limit(guard: HostGuard) -> None:
    limit = 3.0
    ran = run_image(guard, "sleeper", time_limit_s=limit)
    assert ran.code() == "TIMEOUT", ran.failure
    assert "killed after the 3 s time limit" in ran.failure.detail
    assert "sleeper: sleeping 3600 s" in ran.log
    # The grader's timer, not the container: killed at the limit, not after the 3600 s sleep nor after a failed kill
    # (30 s more of waiting). The margin covers staging, two ext4 images, create/start/remove on a loaded engine.
    assert limit <= ran.wall_s < limit + 20, ran.wall_s
    guard.verify()


@pytest.mark.docker(BASE_IMAGE)
def test_a_failed_wait_call_does_not_end_a_running_container(guard: HostGuard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's wait call can fail while the container still runs (a dropped connection): the grader waits again.

    Before, the task counted as finished at once: the running container was read as ``exit status None``
    (NONZERO_EXIT, the submission's fault) and removed under a grader that was still running.
    Fault injection on the real engine: the SDK's first wait call raises, as a dropped connection would.
    """
    import requests.exceptions
    from docker.models.containers import Container

    real_wait = Container.wait
    calls: list[str] = []

    def flaky_wait(self: Container, **kwargs: object) -> object:
        calls.append(self.id)
        if len(calls) == 1:
            raise requests.exceptions.ConnectionError("connection dropped (injected)")
        return real_wait(self, **kwargs)

    monkeypatch.setattr(Container, "wait", flaky_wait)
    go = tmp_path / "go"
    go.mkdir()
    script = "i=0; while [ ! -e /go/now ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done; echo done; exit 7"
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["outcome"] = run_container(
                BASE_IMAGE, mounts=[Mount(go, "/go", True)], limits=small_limits(time_limit_s=180.0), command=["/bin/sh", "-c", script], user="10001"
            )
        except Exception as error:  # surfaced below
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    try:
        # Either the grader waits again (a second call) or it wrongly ends the task (the thread ends): no timing involved.
        deadline = time.monotonic() + 120
        while len(calls) < 2 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        (go / "now").touch()
        thread.join(180)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    outcome = result["outcome"]
    assert outcome.exit_code == 7 and not outcome.timed_out, outcome  # type: ignore[attr-defined]
    assert len(calls) == 2 and len(set(calls)) == 1
    guard.verify()


@pytest.mark.docker(image_of("bigwriter"))
def test_writing_past_the_output_cap(guard: HostGuard) -> None:
    cap = 4 << 20
    ran = run_image(guard, "bigwriter", output_bytes=cap)
    assert ran.code() == "OUTPUT_TOO_LARGE", ran.failure
    assert f"{cap}-byte cap" in ran.failure.detail
    log = ran.log
    assert "bigwriter: refused" in log and "NOT REFUSED" not in log
    written = int(log.split("bigwriter: run.jsonl: ")[1].split()[0])
    assert written <= cap >> 20
    guard.verify()


# --------------------------------------------------------------------------- links out of /output


@pytest.mark.docker(image_of("symlink-out"))
@pytest.mark.parametrize("mode", ["retrieve", "encode"])
def test_symlinked_outputs_are_refused(guard: HostGuard, tmp_path: Path, mode: str) -> None:
    """run.jsonl -> /etc/passwd, corpus.npy -> /proc/self/environ: refused, never read on the host."""
    kept = tmp_path / "kept"
    ran = run_image(guard, "symlink-out", mode=mode, keep_output=kept)
    assert ran.code() == "OUTPUT_INVALID", ran.failure
    name = "run.jsonl" if mode == "retrieve" else "corpus.npy"
    assert ran.failure.detail == f"/output/{name} is a symbolic link; write a regular file"
    assert list(kept.iterdir()) == []  # nothing was copied through the links
    host_passwd = Path("/etc/passwd").read_text(encoding="utf-8")
    assert host_passwd.splitlines()[0] not in str(ran.failure)
    guard.verify()


@pytest.fixture(scope="module")
def link_image() -> object:
    """A throw-away image whose entry point links /output/run.jsonl to $LINK_TARGET (removed afterwards)."""
    client = require_docker([BASE_IMAGE])
    tag = f"grader-test-linkto:{uuid.uuid4().hex[:12]}"
    dockerfile = f'FROM {BASE_IMAGE}\nUSER 10001\nENTRYPOINT ["/bin/sh", "-c", "ln -s \\"$LINK_TARGET\\" /output/run.jsonl"]\n'
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, network_mode="none", rm=True, forcerm=True)
    yield tag
    client.images.remove(tag, force=True)


def test_symlink_to_a_host_file_is_not_followed(guard: HostGuard, tmp_path: Path, link_image: str) -> None:
    secret_text = f"TOP-SECRET-{uuid.uuid4().hex}"
    secret = tmp_path / "host-secret.txt"
    secret.write_text(f'{{"query_id": "q1", "hits": [{{"id": "d1", "score": 1.0}}]}}\n{secret_text}\n', encoding="utf-8")
    secret.chmod(0o644)
    kept = tmp_path / "kept"
    guard.watch(secret)
    # An access time older than the modification time: with relatime, any read would move it.
    mtime = secret.stat().st_mtime_ns
    atime = mtime - 10**10
    os.utime(secret, ns=(atime, mtime))
    ran = run_image(guard, "linkto", image=link_image, keep_output=kept, environment={"LINK_TARGET": str(secret)})
    assert ran.code() == "OUTPUT_INVALID", ran.failure
    assert ran.failure.detail == "/output/run.jsonl is a symbolic link; write a regular file"
    assert secret_text not in str(ran.failure) and secret_text not in ran.log
    assert list(kept.iterdir()) == []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink() and path != secret:
            assert secret_text.encode() not in path.read_bytes(), path
    assert secret.stat().st_atime_ns == atime
    guard.verify()


# --------------------------------------------------------------------------- what the container wrote


@pytest.mark.docker(image_of("scripted"))
@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("malformed", "/output/run.jsonl:3: invalid JSON"),
        ("nan", "/output/run.jsonl:1: NaN is not a valid score"),
        ("unknown-doc", "document 'no-such-document' is not in the corpus"),
        ("duplicate", "/output/run.jsonl:1: /hits/1/id: document '{first_best}' appears twice"),
        ("unknown-query", "query_id: 'no-such-query' is not one of the staged queries"),
    ],
)
def test_invalid_runs_are_output_invalid(guard: HostGuard, behaviour: str, expected: str) -> None:
    ran = run_image(guard, "scripted", task=behaviour)
    assert ran.code() == "OUTPUT_INVALID", ran.failure
    # Messages name the ids the container wrote: pseudonyms. The first staged query's best document, by name:
    first_query = blind(TEST_BLINDING_KEY, behaviour, QUERY, sorted(q.id for q in QUERIES)).real[0]
    best = next(iter(QRELS[first_query]))
    expected = expected.format(first_best=pseudonyms(TEST_BLINDING_KEY, behaviour, DOCUMENT, [best])[0])
    assert expected in ran.failure.detail, ran.failure.detail
    assert f"scripted: behaviour {behaviour!r}" in ran.log
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
def test_valid_run_is_read(guard: HostGuard) -> None:
    ran = run_image(guard, "scripted", task="valid")
    assert ran.failure is None, ran.failure
    run = ran.output.outputs.run
    assert sorted(run.query_ids) == sorted(QRELS)
    assert {q: run.ranking(q)[0][0] for q in run.query_ids} == {q: next(iter(d)) for q, d in QRELS.items()}
    assert evaluate(QRELS, run, [NDCG10]).mean(NDCG10) == 1.0
    assert ran.output.outcome.exit_code == 0
    assert ran.output.output_enforcement in ("disk-image", "fsize-ulimit")
    guard.verify()


@pytest.mark.docker(image_of("scripted"))
def test_half_the_queries_is_scored_and_missing_ones_count_zero_under_strict(guard: HostGuard) -> None:
    ran = run_image(guard, "scripted", task="half")
    assert ran.failure is None, ran.failure
    run = ran.output.outputs.run
    answered = sorted(run.query_ids)
    # "half" answers the first half of the queries as staged: sorted by pseudonym (docs/protocol.md).
    staged = blind(TEST_BLINDING_KEY, "half", QUERY, sorted(q.id for q in QUERIES))
    first_half = sorted(staged.real[: len(QUERIES) // 2])
    assert answered == first_half
    strict = evaluate(QRELS, run, [NDCG10], Policy.STRICT)
    coir = evaluate(QRELS, run, [NDCG10], Policy.COIR)
    assert strict.counts.judged == 4 and strict.counts.answered == 2 and strict.counts.missing == 2
    assert strict.counts.evaluated == 4 and coir.counts.evaluated == 2
    assert coir.mean(NDCG10) == 1.0
    assert strict.mean(NDCG10) == 0.5
    per_query = dict(zip(strict.per_query.query_ids, strict.per_query.values[NDCG10].tolist()))
    assert per_query == {q.id: 1.0 if q.id in first_half else 0.0 for q in QUERIES}
    guard.verify()


@pytest.mark.docker(image_of("silent"))
def test_silent_image_is_output_missing(guard: HostGuard) -> None:
    ran = run_image(guard, "silent")
    assert ran.code() == "OUTPUT_MISSING", ran.failure
    assert ran.failure.detail == "/output/run.jsonl was not written"
    guard.verify()


@pytest.mark.docker(image_of("silent"))
def test_silent_encoder_is_output_missing(guard: HostGuard) -> None:
    ran = run_image(guard, "silent", mode="encode")
    assert ran.code() == "OUTPUT_MISSING", ran.failure
    assert ran.failure.detail == "/output/corpus.npy was not written"
    guard.verify()
