"""A competition's blinding key (docs/protocol.md, "What the container sees"; docs/leaderboard.md).

Created 0600 at the first start beside the partition secret, its id recorded
and published from day one (``/api/v1/partition``, ``/api/v1/competition``),
the key itself only after the end; a replaced key file is refused; no job or
claim answer carries the key (workers hold a pseudonymous copy of the data,
tests/hosting/test_worker_data.py); a report staged under another key is not
accepted (a platform failure: the job goes back to the queue).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat

import pytest
from fastapi.testclient import TestClient

from grader.data.registry import resolve_benchmark
from grader.hosting.api.app import create_app
from grader.hosting.errors import HostingError
from grader.hosting.protocol.messages import Job
from grader.hosting.server import ServeOptions, prepare
from grader.hosting.worker.fingerprint import worker_fingerprint
from grader.hosting.worker.shard_loop import fingerprint_digest
from grader.sandbox.blinding import BlindingKey
from tests.hosting.leaderboard_world import seed
from tests.hosting.support import admin, worker_headers
from tests.hosting.world import World

pytestmark = pytest.mark.board


def test_the_key_id_is_public_from_the_start_and_the_key_at_the_end(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    key_file = world.state.root / "keys" / "blinding.secret"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    key = world.ctx.blinding_key
    assert key is not None and bytes.fromhex(key_file.read_text(encoding="ascii").strip()) == key.secret
    before = client.get("/api/v1/partition").json()["blinding"]
    assert before["key_id"] == key.key_id and before["scheme"] == "hmac-sha256-96/v1" and before["key"] is None
    assert client.get("/api/v1/competition").json()["blinding_key_id"] == key.key_id
    for path in ("/", "/api/v1/partition", "/api/v1/competition", "/api/v1/leaderboard"):
        assert key.secret.hex() not in client.get(path).text, f"{path}: the blinding key leaked before the end"
    admin(world.state.root, "end", "--yes", database=world.database)
    after = client.get("/api/v1/partition").json()["blinding"]
    revealed = bytes.fromhex(after["key"])
    # What was committed to is what is revealed: the documented key id, recomputed here.
    assert hashlib.sha256(b"grader blinding key v1\x00" + revealed).hexdigest() == before["key_id"] == after["key_id"]


def test_a_replaced_or_readable_key_file_is_refused(world: World) -> None:
    world.ctx.db.dispose()
    key_file = world.state.root / "keys" / "blinding.secret"
    options = ServeOptions(competition=world.ctx.competition, state_dir=world.state.root, database=world.database, workers=0)
    os.chmod(key_file, 0o644)
    with pytest.raises(HostingError, match="readable by others"):
        prepare(options)
    os.chmod(key_file, 0o600)
    key_file.write_text("cd" * 32 + "\n", encoding="ascii")  # another key than the one whose id was published
    with pytest.raises(HostingError, match="does not match the key id published"):
        prepare(options)


@pytest.mark.slow  # the server scores the posted runs in a child process
def test_no_job_carries_the_key_and_a_report_under_another_key_is_not_accepted(world: World) -> None:
    client = TestClient(create_app(world.ctx))
    key = world.ctx.blinding_key
    assert key is not None
    other = BlindingKey(bytes(32)).report()
    seed(world, "alice", "alice-other-key", 0.5, through=client, blinding=other, expect="requeued")
    headers = worker_headers(world.worker_token)
    assert (
        client.post("/api/v1/worker/fingerprint", json={"fingerprint": worker_fingerprint()}, headers=headers).status_code == 200
    )  # local: unsigned
    response = client.post("/api/v1/worker/claim", json={"wait_s": 0, "fingerprint": fingerprint_digest()}, headers=headers)
    # The claim answer, as sent: no field names the key, and its bytes are nowhere in it (hex or base64).
    assert response.status_code == 200 and "blinding_key" not in response.json()
    assert key.secret.hex() not in response.text and base64.b64encode(key.secret).decode() not in response.text
    job = Job.model_validate_json(response.content)  # as the worker reads it
    assert not hasattr(job, "blinding_key") and key.secret.hex() not in job.model_dump_json()
    # What it names instead: the judged queries' pseudonyms (never a real id) and the copy's digests.
    benchmark = resolve_benchmark(world.ctx.benchmark_target)
    real = {query for name in job.tasks for query in benchmark.task(name).qrels(job.split)}
    named = {query for ids in job.judged.values() for query in ids}
    assert named and all(query[0] == "q" and len(query) == 25 for query in named) and not named & real
    # Under the competition's key the same kind of report is accepted (the default of the seeding helper).
    seed(world, "bob", "bob-right-key", 0.5, through=client)
