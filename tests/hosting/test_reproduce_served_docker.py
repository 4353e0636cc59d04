"""``grader reproduce`` of a host-signed report served by a real `grader serve` (how a benchmark maintainer checks a result).

The example ONNX submission is graded through the server (uvicorn subprocess, SQLite, one local Docker worker) on
mini's text2code. After the end, its participant fetches the full signed report as participants do (``grader status
ID --report FILE``), and the maintainer runs ``grader reproduce`` on it with the host's public key: the worker graded
pseudonymous data under the competition's blinding key, the server computed the run digest under the real ids, and a
re-grade here (under a new key) agrees. A changed submission (its embedding table perturbed) is named at the first
query, in byte order of its id, whose per-query value differs: derived here from the two reports' values, not from
the comparison under test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.hosting.support import REPO, Server, admin, grader_cli, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"
TASK = "text2code"


def perturbed(folder: Path) -> Path:
    """The example submission with its token table perturbed (seeded noise): another encoder, some rankings differ."""
    shutil.copytree(EXAMPLE, folder)
    model = onnx.load(str(folder / "model.onnx"))
    (table,) = model.graph.initializer
    values = numpy_helper.to_array(table)
    noise = np.random.default_rng(7).standard_normal(values.shape).astype(np.float32) * float(np.abs(values).mean())
    table.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(values + noise), table.name))
    onnx.save(model, str(folder / "model.onnx"))
    return folder


def served_report(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """Grade the example through a real server, end the competition, fetch the signed report: (report, host key, its payload)."""
    server = Server(write_competition(tmp_path / "c.toml", tasks=[TASK]), tmp_path / "state", workers=1).start()
    try:
        env = {"GRADER_TOKEN": admin(server.state, "add-participant", "alice").strip()}
        submitted = grader_cli("submit", str(EXAMPLE), "--server", server.url, "--wait", env=env)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        submission_id = submitted.stdout.split()[0]
        admin(server.state, "end", "--yes")  # the full report (every query) leaves the server only after the end
        host_key = tmp_path / "host.pub"
        host_key.write_bytes(httpx.get(f"{server.url}/host-key.pub", timeout=30).content)
        envelope = tmp_path / "served.dsse.json"
        got = grader_cli("status", submission_id, "--report", str(envelope), "--server", server.url, env=env)
        assert got.returncode == 0, got.stderr
    finally:
        server.stop()
    verified = grader_cli("verify", str(envelope), "--key", str(host_key), "--json")
    assert verified.returncode == 0, verified.stderr
    return envelope, host_key, json.loads(verified.stdout)


def test_a_served_report_reproduces_and_a_changed_submission_is_named_at_its_first_query(tmp_path: Path) -> None:
    require_docker([RUNNER_IMAGE])
    envelope, host_key, report = served_report(tmp_path)
    # What makes it a served grade: a worker's machine named, pseudonyms staged under the competition's key, every query.
    assert "fingerprint" in report["labels"] and report["sandbox"]["kind"] == "docker" and "blinding" in report["sandbox"]
    assert report["labels"].get("part") is None and sorted(report["tasks"]) == [TASK]

    again = tmp_path / "again"
    agreed = grader_cli("reproduce", str(envelope), str(EXAMPLE), "--key", str(host_key), "--quiet", "--out", str(again))
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    assert agreed.stdout.startswith(f"reproduced: {envelope}: 1 task(s), every run digest, status and measure equal\n")
    regraded = json.loads((again / "report.json").read_text(encoding="utf-8"))
    assert regraded["tasks"][TASK]["run_digest"] == report["tasks"][TASK]["run_digest"]
    assert regraded["sandbox"]["blinding"]["key_id"] != report["sandbox"]["blinding"]["key_id"]  # staged under another key

    changed = perturbed(tmp_path / "changed")
    other = tmp_path / "other"
    refused = grader_cli("reproduce", str(envelope), str(changed), "--key", str(host_key), "--quiet", "--out", str(other))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    # Independently of the comparison: the first query id (byte order) whose value differs between the two reports.
    before = report["tasks"][TASK]["per_query"]["values"]
    after = json.loads((other / "report.json").read_text(encoding="utf-8"))["tasks"][TASK]["per_query"]["values"]
    first = min((q for q in before.keys() | after.keys() if before.get(q) != after.get(q)), key=lambda q: q.encode("utf-8"))
    assert refused.stderr.startswith(f"error: {envelope}: not reproduced: query: task {TASK} query {first!r}: the ranking differs"), refused.stderr
    assert refused.stderr.endswith(f"NDCG@10 {before.get(first)!r} in the report, {after.get(first)!r} re-graded\n")
    assert refused.stderr.count("\n") == 1  # one line
