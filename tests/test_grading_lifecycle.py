"""``grader run`` trusts nothing read back from OUT, owns OUT alone, and limits an in-process encoder.

Each test is a failure that held on the old main:

* a forged stored result was signed; a stored entry from an unsigned run, or one
  that is malformed or breaks the schema, crashed the run or was reused;
* ``--keep-embeddings`` in an existing OUT wrote no embeddings;
* the resume line showed ``MAP@...`` (the alphabetically first measure), not the primary one;
* two runs on one OUT both proceeded;
* a ``SandboxUnavailable`` during a task ended the run;
* ``--sandbox none`` ignored ``--time-limit`` and ``--memory``, and ``auto`` said nothing;
  ``grader check``'s sample run of an ONNX model ran in the checking process itself, without those limits.

Real parts: real ONNX models (built here) in onnxruntime, real child processes, real locks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from grader.cli.main import cli
from grader.reports.keys import write_keypair
from tests.conftest import write_task
from tests.onnx_models import embedding_table, onnx_submission

REPO = Path(__file__).resolve().parent.parent
MEASURES = ["NDCG@10", "MAP@100", "MRR@10"]  # primary first; alphabetically MAP@100 comes first


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "tiny"
    corpus = [{"_id": f"d{i}", "title": "", "text": f"w{i} w{i + 10} w{i + 20}"} for i in range(8)]
    queries = [{"_id": f"q{i}", "text": f"w{i} w{i + 20}"} for i in range(4)]
    rows = [(f"q{i}", f"d{i}", 1) for i in range(4)]
    qrels = {"test": rows, "dev": rows}  # dev: the public sample split grader check runs on
    for name in ("alpha", "beta"):
        write_task(root / name, corpus=corpus, queries=queries, qrels=qrels)
    spec = {"name": "tiny", "version": "1", "primary_measure": "NDCG@10", "measures": MEASURES, "tasks": ["alpha", "beta"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return onnx_submission(tmp_path_factory.mktemp("sub") / "model")


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    private, _public = write_keypair(tmp_path_factory.mktemp("keys"))
    return private


def run(submission: Path, benchmark: Path, out: Path, *extra: str, expect: int = 0):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        cli, ["run", str(submission), "--benchmark", str(benchmark), "--out", str(out), "--threads", "1", "--sandbox", "none", *extra]
    )
    assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def verified_report(out: Path, key: Path) -> dict:
    """The report ``grader verify`` accepts from OUT's signed envelope."""
    public = key.parent / "grader.pub"
    result = CliRunner().invoke(cli, ["verify", str(out / "report.dsse.json"), "--key", str(public), "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def stored(out: Path, task: str) -> Path:
    (path,) = (out / "tasks").glob(f"{task}.*.json")
    return path


def resumed(stderr: str) -> set[str]:
    return set(re.findall(r"^(\w+): .*\(stored result, resumed\)$", stderr, flags=re.MULTILINE))


# --------------------------------------------------------------------------- the task store


@pytest.mark.slow
def test_a_forged_stored_result_is_not_signed(tmp_path: Path, benchmark: Path, submission: Path, key: Path) -> None:
    out = tmp_path / "out"
    run(submission, benchmark, out, "--key", str(key))
    true_alpha = json.loads(stored(out, "alpha").read_text())["entry"]["measures"]["NDCG@10"]
    record = json.loads(stored(out, "alpha").read_text())
    record["entry"]["measures"]["NDCG@10"] = 0.999
    stored(out, "alpha").write_text(json.dumps(record))
    second = run(submission, benchmark, out, "--key", str(key))
    assert resumed(second.stderr) == {"beta"}
    assert "alpha: stored result not reused (its MAC does not match" in second.stderr
    report = verified_report(out, key)
    assert report["tasks"]["alpha"]["measures"]["NDCG@10"] == true_alpha != 0.999


@pytest.mark.slow
def test_a_signed_run_does_not_reuse_results_of_an_unsigned_run(tmp_path: Path, benchmark: Path, submission: Path, key: Path) -> None:
    out = tmp_path / "out"
    run(submission, benchmark, out)
    record = json.loads(stored(out, "beta").read_text())
    record["entry"]["measures"]["NDCG@10"] = 0.25  # whoever can write OUT could have done this
    stored(out, "beta").write_text(json.dumps(record))
    signed = run(submission, benchmark, out, "--key", str(key))
    assert resumed(signed.stderr) == set()
    assert "beta: stored result not reused (not authenticated" in signed.stderr
    assert verified_report(out, key)["tasks"]["beta"]["measures"]["NDCG@10"] != 0.25
    # And another key's results are not this key's either.
    (tmp_path / "other").mkdir()
    other, _ = write_keypair(tmp_path / "other")
    third = run(submission, benchmark, out, "--key", str(other))
    assert resumed(third.stderr) == set() and "authenticated with another signing key" in third.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda r: r["entry"].pop("measures"), "breaks the report schema"),
        (lambda r: r["entry"].update(measures={"NDCG@10": 1.5, "MAP@100": 0.5, "MRR@10": 0.5}), "breaks the report schema"),
        (lambda r: r["entry"]["measures"].pop("NDCG@10"), "other measures"),
        (lambda r: r.update(entry=[1, 2]), "not an object"),
        (lambda r: r["entry"].update(status="failed"), "breaks the report schema"),
        (lambda r: r["entry"].update(split="dev"), "other data"),
    ],
)
def test_a_malformed_stored_entry_is_graded_again_not_fatal(tmp_path: Path, benchmark: Path, submission: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    run(submission, benchmark, out, "--tasks", "alpha")
    good = json.loads((out / "report.json").read_text())["tasks"]["alpha"]
    record = json.loads(stored(out, "alpha").read_text())
    damage(record)
    stored(out, "alpha").write_text(json.dumps(record))
    again = run(submission, benchmark, out, "--tasks", "alpha")
    assert resumed(again.stderr) == set()
    assert reason in again.stderr
    assert json.loads((out / "report.json").read_text())["tasks"]["alpha"] == good


@pytest.mark.slow
def test_deeply_nested_stored_entry_is_graded_again(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    run(submission, benchmark, out, "--tasks", "alpha")
    stored(out, "alpha").write_text("[" * 200_000 + "]" * 200_000)
    again = run(submission, benchmark, out, "--tasks", "alpha")
    assert "alpha: stored result not reused (not valid JSON)" in again.stderr


@pytest.mark.slow
def test_keep_embeddings_in_an_existing_out_writes_them(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    run(submission, benchmark, out)
    assert not (out / "embeddings").exists()
    run(submission, benchmark, out, "--keep-embeddings")
    for task in ("alpha", "beta"):
        assert {p.name for p in (out / "embeddings" / task).iterdir()} == {"queries.npy", "corpus.npy", "ids.json"}
    # Resumed with the flag: the embeddings are there, so the stored results are reused...
    assert resumed(run(submission, benchmark, out, "--keep-embeddings").stderr) == {"alpha", "beta"}
    # ...unless they were deleted meanwhile.
    for path in (out / "embeddings" / "beta").iterdir():
        path.unlink()
    again = run(submission, benchmark, out, "--keep-embeddings")
    assert resumed(again.stderr) == {"alpha"} and "beta: stored result not reused (its embeddings are missing" in again.stderr
    assert (out / "embeddings" / "beta" / "corpus.npy").is_file()


@pytest.mark.slow
def test_every_output_changing_option_is_in_the_store_key(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    run(submission, benchmark, out, "--tasks", "alpha")
    for extra in (
        ["--top-k", "5"],
        ["--policy", "coir"],
        ["--measure", "NDCG@10"],
        ["--pca-dims", "4"],
        ["--keep-embeddings"],
        ["--time-limit", "300"],
        ["--memory", "2g"],
        ["--split", "test", "--threads", "2"],
    ):
        result = run(submission, benchmark, out, "--tasks", "alpha", *extra)
        assert resumed(result.stderr) == set(), extra
    assert resumed(run(submission, benchmark, out, "--tasks", "alpha").stderr) == {"alpha"}


@pytest.mark.slow
def test_the_resume_line_shows_the_primary_measure(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    first = run(submission, benchmark, out, "--tasks", "alpha")
    fresh = re.search(r"^alpha: scored (\S+) = ", first.stderr, flags=re.MULTILINE)
    second = run(submission, benchmark, out, "--tasks", "alpha")
    again = re.search(r"^alpha: scored (\S+) = (\S+) \(stored result, resumed\)$", second.stderr, flags=re.MULTILINE)
    assert fresh and again and fresh[1] == again[1] == "NDCG@10"


# --------------------------------------------------------------------------- the OUT lock


@pytest.mark.slow
def test_a_second_run_on_a_locked_out_names_the_holder_and_writes_nothing(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    from grader.grading.lock import LOCK_NAME

    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from grader.grading.lock import locked_out_dir\n"
            "with locked_out_dir(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)",  # killed below
            str(out),
        ],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        before = sorted(p.name for p in out.iterdir())
        result = run(submission, benchmark, out, expect=75)
        assert f"another grader run is using this folder (pid {holder.pid} on " in result.stderr
        assert sorted(p.name for p in out.iterdir()) == before == [LOCK_NAME]
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the killed holder's lock: the folder is usable again.
    run(submission, benchmark, out)
    assert (out / "report.json").is_file()


@pytest.mark.slow
def test_two_real_runs_into_one_out_leave_one_submissions_report_and_signature(tmp_path: Path, benchmark: Path, key: Path) -> None:
    """The observation itself: two ``grader run --key`` of different submissions into one OUT.

    Before the lock both proceeded and, in 2 of 20 trials, report.json described one
    submission while report.dsse.json was signed for the other. Here the first run
    holds OUT for at least its 4 s time limit (a model that loops), so the second is
    certain to start while the first is running.
    """
    from grader.submissions.digest import submission_digest

    slow = _hostile_submission(tmp_path / "slow", "loop")
    fast = onnx_submission(tmp_path / "fast")
    out = tmp_path / "out"
    args = ["--benchmark", str(benchmark), "--out", str(out), "--key", str(key), "--sandbox", "none", "--threads", "1", "--tasks", "alpha"]
    first = subprocess.Popen(
        [sys.executable, "-c", "from grader.cli.main import main; main()", "run", str(slow), *args, "--time-limit", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 120
        lock = out / ".grader.lock"
        while not (lock.is_file() and f'"pid": {first.pid}' in lock.read_text(encoding="utf-8")):
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        second = CliRunner().invoke(cli, ["run", str(fast), *args])
        assert second.exit_code == 75, (second.exit_code, second.stderr)
        assert f"another grader run is using this folder (pid {first.pid} on " in second.stderr
        _, stderr = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr.decode(errors="replace")
    # report.json and the signed envelope both describe the first submission, and only it.
    report = json.loads((out / "report.json").read_text())
    signed = verified_report(out, key)
    assert report == signed
    assert signed["subject"]["digest"]["sha256"] == submission_digest(slow) != submission_digest(fast)
    assert signed["tasks"]["alpha"]["failure"]["code"] == "TIMEOUT"
    # Once the first is done, the second may use OUT; then both files describe the second.
    run(fast, benchmark, out, "--key", str(key), "--tasks", "alpha")
    report = json.loads((out / "report.json").read_text())
    assert report == verified_report(out, key) and report["subject"]["digest"]["sha256"] == submission_digest(fast)


# --------------------------------------------------------------------------- INFRA per task


@pytest.mark.slow
def test_sandbox_unavailable_during_a_task_is_infra_for_that_task(
    tmp_path: Path, benchmark: Path, submission: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grader.errors import SandboxUnavailable
    from grader.grading.inprocess import ChildProcessOnnx

    real_rank = ChildProcessOnnx.rank

    def flaky(self, inputs, options, reporter):  # type: ignore[no-untyped-def]
        if inputs.task.name == "alpha":
            raise SandboxUnavailable("the engine lost the container: connection reset")
        return real_rank(self, inputs, options, reporter)

    monkeypatch.setattr(ChildProcessOnnx, "rank", flaky)
    out = tmp_path / "out"
    result = run(submission, benchmark, out)
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"]["alpha"]["failure"] == {"code": "INFRA", "message": "the engine lost the container: connection reset"}
    assert report["tasks"]["beta"]["status"] == "scored"
    assert "alpha: FAILED INFRA" in result.stderr
    # An engine fault is not the submission's result: the next run grades the task again.
    monkeypatch.setattr(ChildProcessOnnx, "rank", real_rank)
    again = run(submission, benchmark, out)
    assert resumed(again.stderr) == {"beta"}
    assert json.loads((out / "report.json").read_text())["tasks"]["alpha"]["status"] == "scored"


# --------------------------------------------------------------------------- in-process limits


def _hostile_submission(folder: Path, kind: str) -> Path:
    """The tiny lookup encoder plus a zero-valued term that either loops ~forever or allocates ~1 GiB per batch."""
    table = embedding_table()
    onnx_submission(folder, table=table)

    def const(name, value, dtype=np.float32):  # type: ignore[no-untyped-def]
        return numpy_helper.from_array(np.array(value, dtype=dtype), name)

    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["tokens"], axis=0),
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["ids_f"], ["ids_sum"], keepdims=0),
        helper.make_node("Mul", ["ids_sum", "zero"], ["seed"]),  # data-dependent, so nothing is folded at load
    ]
    initializers = [numpy_helper.from_array(table, "table"), const("zero", 0.0), const("one", 1.0)]
    if kind == "loop":
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one_b"], ["v_out"])],
            "body",
            [
                helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                helper.make_tensor_value_info("v_in", TensorProto.FLOAT, []),
            ],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])],
            initializer=[const("one_b", 1.0)],
        )
        nodes.append(helper.make_node("Loop", ["trips", "always", "seed"], ["looped"], body=body))
        initializers += [const("trips", 10**12, np.int64), const("always", True, np.bool_)]
        nodes.append(helper.make_node("Mul", ["looped", "zero"], ["nothing"]))
    else:
        nodes.append(helper.make_node("Expand", ["seed", "huge_shape"], ["huge"]))  # 256 Mi floats = 1 GiB, filled
        nodes.append(helper.make_node("ReduceSum", ["huge"], ["huge_sum"], keepdims=0))
        nodes.append(helper.make_node("Mul", ["huge_sum", "zero"], ["nothing"]))
        initializers.append(const("huge_shape", [256 << 20], np.int64))
    nodes.append(helper.make_node("Add", ["tokens", "nothing"], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", table.shape[1]])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    return folder


def _leftover_children() -> list[int]:
    """Encoder child processes of this test process still alive."""
    mine = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == mine
                and b"grader.grading.inprocess" in (entry / "cmdline").read_bytes()
            ):
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


@pytest.mark.slow
def test_in_process_encoder_is_killed_at_the_time_limit(tmp_path: Path, benchmark: Path) -> None:
    looping = _hostile_submission(tmp_path / "looping", "loop")
    out = tmp_path / "out"
    started = time.monotonic()
    result = run(looping, benchmark, out, "--time-limit", "3", "--tasks", "alpha")
    assert time.monotonic() - started < 120  # not the 10^12 iterations (generous: a loaded CI machine starts the child slowly)
    failure = json.loads((out / "report.json").read_text())["tasks"]["alpha"]["failure"]
    assert failure == {"code": "TIMEOUT", "message": "killed after the 3 s time limit"}, result.stderr
    assert _leftover_children() == []


@pytest.mark.slow
def test_in_process_encoder_is_killed_at_the_memory_limit(tmp_path: Path, benchmark: Path) -> None:
    hog = _hostile_submission(tmp_path / "hog", "alloc")
    out = tmp_path / "out"
    run(hog, benchmark, out, "--memory", "500m", "--tasks", "alpha")
    report = json.loads((out / "report.json").read_text())
    failure = report["tasks"]["alpha"]["failure"]
    assert failure["code"] == "OOM", failure
    peak = int(re.search(r"resident memory (\d+) bytes", failure["message"])[1])
    assert peak > 500 << 20 and peak < 1 << 30  # killed on the way up, before the whole GiB was touched
    assert report["sandbox"]["isolated"] is False and report["sandbox"]["limits"]["memory_bytes"] == 500 << 20
    assert _leftover_children() == []


def check(submission: Path, benchmark: Path, *extra: str, expect: int = 1):  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        cli, ["check", str(submission), "--benchmark", str(benchmark), "--tasks", "alpha", "--threads", "1", "--sandbox", "none", "--json", *extra]
    )
    assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
    return {step["step"]: step for step in json.loads(result.stdout)["steps"]}


@pytest.mark.slow
def test_check_samples_in_the_same_limited_child_process(tmp_path: Path, benchmark: Path) -> None:
    """grader check's sample run goes through the encoder child of grading: killed at --time-limit, at --memory."""
    started = time.monotonic()
    steps = check(_hostile_submission(tmp_path / "looping", "loop"), benchmark, "--time-limit", "3")
    assert time.monotonic() - started < 30  # not the 10^12 iterations
    assert steps["intake"]["status"] == "passed" and "in a child process" in steps["intake"]["reason"]
    sample = steps["sample run"]
    assert sample["status"] == "failed" and sample["reason"] == "alpha: TIMEOUT: killed after the 3 s time limit", sample
    assert sample["hint"] == "make it faster or ask the host for a longer --time-limit"
    steps = check(_hostile_submission(tmp_path / "hog", "alloc"), benchmark, "--memory", "500m")
    sample = steps["sample run"]
    assert sample["status"] == "failed" and sample["reason"].startswith("alpha: OOM: "), sample
    peak = int(re.search(r"resident memory (\d+) bytes", sample["reason"])[1])
    assert 500 << 20 < peak < 1 << 30
    assert _leftover_children() == []
    # The same limits let a well-behaved model through: the limits decided above, not the check.
    steps = check(onnx_submission(tmp_path / "fine"), benchmark, "--time-limit", "60", "--memory", "500m", expect=0)
    assert steps["sample run"]["status"] == "passed" and steps["sample score"]["status"] == "passed"


@pytest.mark.slow
def test_the_same_hog_scores_when_the_limit_allows_it(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    """The limit, not the model, decided above: a well-behaved model under the same small limits scores."""
    out = tmp_path / "out"
    run(submission, benchmark, out, "--memory", "500m", "--time-limit", "60")
    report = json.loads((out / "report.json").read_text())
    assert {t["status"] for t in report["tasks"].values()} == {"scored"}


def test_in_process_refuses_limits_it_cannot_enforce(tmp_path: Path, benchmark: Path, submission: Path) -> None:
    out = tmp_path / "out"
    result = run(submission, benchmark, out, "--runtime", "runsc", expect=2)
    assert "--runtime: only the Docker sandbox can honour this" in result.stderr
    assert not (out / "report.json").exists()


@pytest.mark.slow
def test_in_process_cpus_pins_the_encoder(tmp_path: Path, benchmark: Path, submission: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cpus 1 in-process: the child runs on one core (its affinity, read while it runs), and the report says so."""
    from grader.grading.inprocess import ChildProcessOnnx

    seen: list[set[int]] = []
    real = ChildProcessOnnx._run_child

    def spy(self, work, progress, log_path):  # type: ignore[no-untyped-def]
        import threading

        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                for entry in Path("/proc").iterdir():
                    try:
                        if entry.name.isdigit() and str(work).encode() in (entry / "cmdline").read_bytes():
                            seen.append(os.sched_getaffinity(int(entry.name)))
                    except OSError:
                        continue
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            return real(self, work, progress, log_path)
        finally:
            stop.set()
            watcher.join()

    monkeypatch.setattr(ChildProcessOnnx, "_run_child", spy)
    out = tmp_path / "out"
    run(submission, benchmark, out, "--cpus", "1", "--tasks", "alpha")
    report = json.loads((out / "report.json").read_text())
    assert report["sandbox"]["limits"]["cpus"] == 1.0 and "pinned to 1 core" in report["sandbox"]["limits"]["enforcement"]
    assert report["tasks"]["alpha"]["status"] == "scored"
    assert seen and all(len(cores) == 1 for cores in seen[1:]) and len(seen[-1]) == 1


@pytest.mark.slow
def test_auto_says_which_sandbox_it_chose_and_why(tmp_path: Path, benchmark: Path, submission: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.grading import backends  # where the sandbox is chosen

    monkeypatch.setattr(backends, "RUNNER_IMAGE", "grader-runner:no-such-tag-for-this-test")
    result = CliRunner().invoke(
        cli, ["run", str(submission), "--benchmark", str(benchmark), "--out", str(tmp_path / "out"), "--threads", "1", "--sandbox", "auto"]
    )
    assert result.exit_code == 0, result.stderr
    assert re.search(
        r"^sandbox: none \((no Docker engine answers|the runner image grader-runner:no-such-tag-for-this-test is missing).*NOT isolated",
        result.stderr,
        flags=re.MULTILINE,
    )
    assert json.loads((tmp_path / "out" / "report.json").read_text())["sandbox"]["isolated"] is False


@pytest.mark.slow
def test_sigterm_stops_an_in_process_run_and_its_encoder(tmp_path: Path, benchmark: Path) -> None:
    looping = _hostile_submission(tmp_path / "looping", "loop")
    out = tmp_path / "out"
    grader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from grader.cli.main import main; main()",
            "run",
            str(looping),
            "--benchmark",
            str(benchmark),
            "--out",
            str(out),
            "--sandbox",
            "none",
            "--threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    children = _wait_encoder_children(grader)
    os.kill(grader.pid, signal.SIGTERM)
    _, stderr = grader.communicate(timeout=30)
    assert grader.returncode == 128 + signal.SIGTERM, stderr
    assert b"stopped by SIGTERM" in stderr
    assert all(not Path(f"/proc/{pid}").exists() or _parent(Path(f"/proc/{pid}")) != grader.pid for pid in children)
    assert not (out / "report.json").exists()


@pytest.mark.slow
def test_sigkill_of_the_grader_kills_its_encoder_and_the_next_start_sweeps_the_staged_texts(
    tmp_path: Path, benchmark: Path, submission: Path
) -> None:
    looping = _hostile_submission(tmp_path / "looping", "loop")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)}
    command = [
        sys.executable,
        "-c",
        "from grader.cli.main import main; main()",
        "run",
        "--benchmark",
        str(benchmark),
        "--sandbox",
        "none",
        "--threads",
        "1",
    ]
    grader = subprocess.Popen(
        [*command, str(looping), "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env
    )
    children = _wait_encoder_children(grader)
    staged = [p for p in scratch.iterdir() if p.name.startswith("grader-encode-")]
    assert staged and (staged[0] / "job.json").is_file()
    os.kill(grader.pid, signal.SIGKILL)
    grader.wait()
    gone_by = time.monotonic() + 30  # PDEATHSIG acts at once; the bound only leaves room for a loaded machine
    while any(_is_encoder(Path(f"/proc/{pid}")) for pid in children):
        assert time.monotonic() < gone_by, "the encoder outlived its grader"
        time.sleep(0.1)
    assert staged[0].exists()  # nobody cleaned up yet ...
    subprocess.run([*command, str(submission), "--out", str(tmp_path / "out2")], check=True, cwd=REPO, env=env, capture_output=True)
    assert not staged[0].exists()  # ... until the next start swept it


def _is_encoder(proc: Path) -> bool:
    """Whether ``proc`` (a /proc entry) is a live in-process encoder child; False once it is gone (read races its exit)."""
    try:
        return b"grader.grading.inprocess" in proc.joinpath("cmdline").read_bytes()
    except OSError:
        return False


def _wait_encoder_children(grader: subprocess.Popen[bytes], timeout: float = 180.0) -> list[int]:
    """Pids of ``grader``'s in-process encoder children, once there is one (not any short-lived child it runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert grader.poll() is None, f"the grader ended (exit {grader.returncode}) before its encoder started"
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == grader.pid and _is_encoder(p)]
        if children:
            return children
        time.sleep(0.1)
    raise AssertionError("the encoder child never started")


def _parent(proc: Path) -> int | None:
    try:
        return int(proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
