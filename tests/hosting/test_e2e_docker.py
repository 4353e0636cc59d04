"""End to end in the real Docker sandbox: `grader serve` (uvicorn subprocess, SQLite), local workers, the real client.

Tests run in file order on one server; the last one ends the competition.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from grader.data.registry import resolve_benchmark
from grader.grading.cost import fingerprint_digest
from grader.hosting.results.recording import WITHHELD
from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.sandbox_support import RUNNER_IMAGE, image_of, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE, image_of("silent"), image_of("hosting-leaker")), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
BROKEN = REPO / "tests" / "broken_submissions" / "docker-silent"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE, image_of("silent"), image_of("hosting-leaker")])
    root = tmp_path_factory.mktemp("hosting-e2e")
    server = Server(write_competition(root / "c.toml", tables={"quotas": {"concurrent": 3}}), root / "state", workers=1).start()
    server.tokens = {name: admin(server.state, "add-participant", name).strip() for name in ("alice", "bob")}  # type: ignore[attr-defined]
    server.ids = {}  # type: ignore[attr-defined]
    server.root = root  # type: ignore[attr-defined]
    yield server
    server.stop()


def leaker(root: Path) -> Path:
    folder = root / "leaker"
    folder.mkdir(exist_ok=True)
    (folder / "submission.json").write_text(
        json.dumps(
            {
                "kind": "docker",
                "name": "leaker",
                "mode": "retrieve",
                "image": image_of("hosting-leaker"),
                "training": {"setting": "zero-shot", "datasets": []},
            }
        )
    )
    return folder


def hidden_query_texts() -> list[str]:
    benchmark = resolve_benchmark("mini")
    texts = []
    for name in benchmark.spec.tasks:
        task = benchmark.task(name)
        judged = task.qrels("test")
        texts.extend(q.text[:60] for q in task.iter_queries() if q.id in judged and len(q.text) >= 30)
    return texts


def everything_alice_can_fetch(server: Server, submission_id: str) -> str:
    """Every route's answer about one submission (the list narrowed to it: a sample run of hers may show logs)."""
    headers = {"Authorization": f"Bearer {server.tokens['alice']}"}  # type: ignore[attr-defined]
    listed = httpx.get(f"{server.url}/api/v1/submissions", headers=headers, timeout=30).json()
    bodies = [json.dumps([view for view in listed if view["id"] == submission_id])]
    for path in (
        f"/api/v1/submissions/{submission_id}",
        f"/api/v1/submissions/{submission_id}/report",
        f"/api/v1/submissions/{submission_id}/logs",
        "/api/v1/quota",
        "/api/v1/competition",
    ):
        bodies.append(httpx.get(server.url + path, headers=headers, timeout=30).text)
    return "\n".join(bodies)


def test_hidden_grade_never_shows_the_containers_stderr(served: Server, docker_engine) -> None:  # type: ignore[no-untyped-def]
    done = grader_cli("submit", str(leaker(served.root)), "--server", served.url, "--wait", env={"GRADER_TOKEN": served.tokens["alice"]})  # type: ignore[attr-defined]
    assert done.returncode == 1, done.stderr
    submission_id = done.stdout.split()[0]
    served.ids["leak-hidden"] = submission_id  # type: ignore[attr-defined]
    assert "failed  NONZERO_EXIT" in done.stdout
    seen = done.stdout + done.stderr + everything_alice_can_fetch(served, submission_id)
    assert "LEAK" not in seen and "hosting-leaker" not in seen
    assert not [text for text in hidden_query_texts() if text in seen]
    # the host has the logs
    logs = list((served.state / "results" / submission_id).rglob("*.log"))
    assert logs and "LEAK" in logs[0].read_text()


def test_sample_run_shows_its_logs(served: Server, docker_engine) -> None:  # type: ignore[no-untyped-def]
    done = grader_cli("submit", str(leaker(served.root)), "--sample", "--server", served.url, "--wait", env={"GRADER_TOKEN": served.tokens["alice"]})  # type: ignore[attr-defined]
    assert done.returncode == 1, done.stderr
    submission_id = done.stdout.split()[0]
    # repr quotes the line: with double quotes when the (random: the pseudonyms order the queries) last text has an apostrophe
    assert "NONZERO_EXIT" in done.stdout and ("last log line: 'LEAK " in done.stdout or 'last log line: "LEAK ' in done.stdout)
    shown = grader_cli("status", submission_id, "--logs", "--server", served.url, env={"GRADER_TOKEN": served.tokens["alice"]})  # type: ignore[attr-defined]
    assert shown.returncode == 0 and "hosting-leaker: split 'dev'" in shown.stdout and shown.stdout.count("LEAK ") > 10
    quota = httpx.get(f"{served.url}/api/v1/quota", headers={"Authorization": f"Bearer {served.tokens['alice']}"}).json()  # type: ignore[attr-defined]
    assert quota["sample"]["used_24h"] == 1 and quota["hidden"]["used_24h"] == 1  # counted apart


def test_scored_and_failed_and_the_signed_report_matches_grader_run(served: Server, docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice = {"GRADER_TOKEN": served.tokens["alice"]}  # type: ignore[attr-defined]
    scored = grader_cli("submit", str(EXAMPLE), "--server", served.url, "--wait", env=alice)
    assert scored.returncode == 0, scored.stderr
    scored_id = scored.stdout.split()[0]
    assert f"{scored_id}  scored  public score " in scored.stdout
    # the worker's log has a line per task step, in the words a participant sees (grader.hosting.protocol.progress)
    worker_log = "".join(path.read_text() for path in sorted((served.state / "run").glob("local-*.log")))
    for task in resolve_benchmark("mini").spec.tasks:
        assert re.search(rf"task {task}: encoding \d+ documents\n", worker_log), worker_log[-3000:]
        assert f"task {task}: searching\n" in worker_log and re.search(rf"task {task}: ranked in \d+ s\n", worker_log)
    failed = grader_cli("submit", str(BROKEN), "--server", served.url, "--wait", env=alice)
    assert failed.returncode == 1, failed.stderr
    assert "failed  OUTPUT_MISSING" in failed.stdout
    # another participant gets 404 for alice's submission
    assert grader_cli("status", scored_id, "--server", served.url, env={"GRADER_TOKEN": served.tokens["bob"]}).returncode == 6  # type: ignore[attr-defined]
    # before the end, only the public part's report leaves the server (signed by the host, no per-query values)
    (tmp_path / "host.pub").write_bytes(httpx.get(f"{served.url}/host-key.pub").content)
    early = grader_cli("status", scored_id, "--report", str(tmp_path / "early.json"), "--server", served.url, env=alice)
    assert early.returncode == 0, early.stderr
    public = grader_cli("verify", str(tmp_path / "early.json"), "--key", str(tmp_path / "host.pub"), "--json")
    assert public.returncode == 0, public.stderr
    public_report = json.loads(public.stdout)
    assert public_report["labels"]["part"]["name"] == "public" and all("per_query" not in t for t in public_report["tasks"].values())
    assert f"score {public_report['aggregate']['score']:.4f}" in scored.stdout  # the score shown is the public part's

    direct = grader_cli(
        "run",
        str(EXAMPLE),
        "--benchmark",
        "mini",
        "--split",
        "test",
        "--sandbox",
        "docker",
        "--time-limit",
        "60",
        "--memory",
        "2g",
        "--cpus",
        "1",
        "--out",
        str(tmp_path / "direct"),
        # Under a key of its own (OUT/blinding.key), not the competition's: a grade does not depend on the key
        # (docs/protocol.md, Ties at the depth), so the served report must still equal it.
    )
    assert direct.returncode == 0, direct.stderr
    expected = json.loads((tmp_path / "direct" / "report.json").read_text())

    admin(served.state, "end", "--yes")
    got = grader_cli("status", scored_id, "--report", str(tmp_path / "report.dsse.json"), "--server", served.url, env=alice)
    assert got.returncode == 0, got.stderr
    verified = grader_cli("verify", str(tmp_path / "report.dsse.json"), "--key", str(tmp_path / "host.pub"), "--json")
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["aggregate"] == expected["aggregate"]
    assert {name: entry["measures"] for name, entry in report["tasks"].items()} == {
        name: entry["measures"] for name, entry in expected["tasks"].items()
    }
    assert report["subject"]["digest"] == expected["subject"]["digest"]
    # The worker sent only rankings; the server scored them: every per-query value is the direct run's, bit for bit.
    assert {name: entry["per_query"] for name, entry in report["tasks"].items()} == {
        name: entry["per_query"] for name, entry in expected["tasks"].items()
    }
    assert {name: entry["queries"] for name, entry in report["tasks"].items()} == {
        name: entry["queries"] for name, entry in expected["tasks"].items()
    }
    assert report["ranking"] == expected["ranking"] and report["policy"] == expected["policy"]
    assert report["labels"]["fingerprint"]["execution_provider"] == "CPUExecutionProvider"  # the worker's machine is named
    # What ranking cost the worker: its word, labelled so, checked by the server against its own counts, the machine
    # named by the fingerprint the worker bound; scoring is the server's, not in it. No figure is compared: they vary.
    cost = report["cost"]
    assert cost["source"] == "worker" and cost["machine"]["fingerprint"] == fingerprint_digest(report["labels"]["fingerprint"])
    assert {name: (entry["texts"], entry["queries"]) for name, entry in cost["tasks"].items()} == {
        name: (entry["texts"], entry["queries"]) for name, entry in expected["cost"]["tasks"].items()
    }
    assert all(entry["wall_s"]["score"] is None and entry["missing"]["score_s"] for entry in cost["tasks"].values())
    # The local worker graded the state's pseudonymous copy (no judgements) under the competition's key, not the direct run's.
    assert report["sandbox"]["blinding"]["key_id"] != expected["sandbox"]["blinding"]["key_id"]
    assert "cut_by_pseudonym" not in report["ranking"]
    assert (served.state / "worker-data" / "worker-data.json").is_file() and not list((served.state / "worker-data").rglob("*.tsv*"))
    runs = sorted((served.state / "runs" / scored_id).rglob("*.run"))  # type: ignore[attr-defined]
    assert [path.stem for path in runs] == sorted(expected["tasks"]), (runs, admin(served.state, "history", scored_id))
    assert all(path.read_bytes()[:4] == b"GRUN" for path in runs)
    # after the end the hidden leaker's report is public too, and still carries no stderr
    leak_id = served.ids["leak-hidden"]  # type: ignore[attr-defined]
    admin(served.state, "report", leak_id, "--out", str(tmp_path / "leak.dsse.json"))
    leaked = grader_cli("verify", str(tmp_path / "leak.dsse.json"), "--key", str(tmp_path / "host.pub"), "--json")
    assert leaked.returncode == 0 and "LEAK" not in leaked.stdout and WITHHELD in leaked.stdout
    assert "LEAK" not in everything_alice_can_fetch(served, leak_id)
