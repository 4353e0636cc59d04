"""A competition that requires training labels: the server's 422 says exactly which label is missing, and accepts them once declared.

The real app (in process, its own database and state folder) receives the example
ONNX submission with its manifest's training labels removed or cut short, as
``grader submit`` sends it (a tar.gz body).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from grader.hosting.api.app import create_app
from grader.hosting.config import load_competition
from grader.hosting.identity.participants import create_participant
from grader.hosting.server import ServeOptions, prepare
from tests.hosting.support import REPO, write_competition

EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    root = tmp_path_factory.mktemp("labels")
    competition = load_competition(write_competition(root / "c.toml", require_training_labels=True, kinds=["onnx"]))
    ctx, _db = prepare(ServeOptions(competition=competition, state_dir=root / "state", workers=0))
    with ctx.db.session() as session:
        token = create_participant(session, "alice", None)[1]
    with TestClient(create_app(ctx)) as test_client:
        yield test_client, token
    ctx.db.dispose()


def upload(client: TestClient, token: str, manifest: dict) -> tuple[int, str]:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("model.onnx", "tokenizer.json"):
            tar.add(EXAMPLE / name, arcname=name)
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("submission.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    response = client.post("/api/v1/submissions", content=buffer.getvalue(), headers={"Authorization": f"Bearer {token}"})
    body = response.json()
    return response.status_code, body["detail"] if response.status_code == 422 else json.dumps(body)


@pytest.mark.slow
def test_the_refusal_names_the_missing_label_and_declared_labels_pass(client: tuple[TestClient, str]) -> None:
    test_client, token = client
    base = json.loads((EXAMPLE / "submission.json").read_text())
    no_training = {k: v for k, v in base.items() if k != "training"}
    status, detail = upload(test_client, token, no_training)
    assert status == 422
    assert detail == (
        "invalid submission: submission.json: training: missing: this competition requires a declared training setting "
        '("training": {"setting": "zero-shot"} or {"setting": "fine-tuned", "datasets": ["..."]}; grader pack --training-setting writes it)'
    )
    status, detail = upload(test_client, token, {**no_training, "training": {"setting": "fine-tuned"}})
    assert status == 422
    assert detail == (
        'invalid submission: submission.json: training.datasets: missing: a "fine-tuned" submission must name the datasets it was trained on here '
        "(this competition requires training labels)"
    )
    for training in ({"setting": "zero-shot"}, {"setting": "fine-tuned", "datasets": ["mini/train"]}):
        status, answer = upload(test_client, token, {**no_training, "training": training})
        assert status == 201, answer
        assert json.loads(answer)["state"] in ("received", "queued")
