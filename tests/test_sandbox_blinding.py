"""Blinded ids (docs/protocol.md, "What the container sees"): a container cannot read the answer off ids or positions.

On CAT-shaped data (query ``q-<n>`` answered by document ``c-<n>``, the corpus in
id order), submissions that answer by id pattern or by position score as a
random ranking, through real containers (``grader-test-cheater``); honest ones
score as before; re-grading with the same key stages the same ids and gives the
same report; a pseudonym collision is an infrastructure failure, never merged.

The bound: the staged ids and order are a keyed pseudo-random function of the
real ids, so for a ranking that ignores the text the relevant document of each
query sits at a uniformly random rank among the N documents. Its reciprocal rank
at 10 has mean H_10 / N (0.0098 for N = 300) and variance below
(sum of 1/r^2, r <= 10) / N; over 300 queries the mean's standard deviation is
below 0.0042, so 0.05 is about ten of them above the expectation. (The key is
fixed, so each figure is exactly repeatable; the bound just says it is not luck.)
Without blinding each of these submissions scores 1.0.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grader.collect.outputs import TaskOutputs, collect_outputs
from grader.collect.unblind import unblind_outputs, unblind_rows, unblind_run
from grader.data.task import Document, Query
from grader.errors import KeyFileError, SandboxUnavailable, TaskFailure
from grader.failures import FailureCode
from grader.runs.run import Run
from grader.sandbox import blinding as blinding_module
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindingKey, blind, key_id, pseudonyms
from grader.sandbox.blinding_key import BLINDING_KEY_NAME, load_blinding_key, write_blinding_key
from grader.sandbox.staging import stage_task
from tests.cli_support import invoke
from tests.sandbox_support import HostGuard, docker_submission, image_of, read_report, write_beir_task

CHEATER = image_of("cheater")
SCRIPTED = image_of("scripted")
LIMITS = ["--time-limit", "120", "--memory", "512m", "--cpus", "1"]
KEY = BlindingKey(hashlib.sha256(b"tests/test_sandbox_blinding.py").digest())
N = 300
#: H_10 / N + about ten standard deviations (module docstring).
RANDOM_BOUND = 0.05
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon".split()


def cat_shaped(root: Path, tasks: list[str]) -> Path:
    """A benchmark whose every task pairs ``q-<n>`` with ``c-<n>`` (n zero-padded), the corpus in id order."""
    rng = random.Random(7)
    documents = [Document(f"c-{n:04d}", "", " ".join(rng.choices(WORDS, k=8))) for n in range(N)]
    queries = [Query(f"q-{n:04d}", " ".join(rng.choices(WORDS, k=4))) for n in range(N)]
    qrels = {f"q-{n:04d}": {f"c-{n:04d}": 1} for n in range(N)}
    for name in tasks:
        write_beir_task(root / name, documents=documents, queries=queries, qrels=qrels, splits=("test",))
    spec = {"name": "cat-shaped", "version": "1", "primary_measure": "MRR@10", "measures": ["MRR@10", "NDCG@10"], "tasks": tasks}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


# --------------------------------------------------------------------------- pseudonyms, staging, the way back


def test_pseudonyms_follow_the_documented_rule() -> None:
    name = b"t"
    message = b"grader blinding v1\x00" + b"q" + len(name).to_bytes(4, "big") + name + b"q-0001"
    expected = "q" + hmac.new(KEY.secret, message, hashlib.sha256).hexdigest()[:24]
    assert pseudonyms(KEY, "t", QUERY, ["q-0001"]) == [expected]
    assert KEY.key_id == hashlib.sha256(b"grader blinding key v1\x00" + KEY.secret).hexdigest() == key_id(KEY.secret)
    # The same id as a query and as a document, in another task, or under another key: unrelated pseudonyms.
    same = "x-1"
    names = {pseudonyms(KEY, "t", QUERY, [same])[0][1:], pseudonyms(KEY, "t", DOCUMENT, [same])[0][1:], pseudonyms(KEY, "u", QUERY, [same])[0][1:]}
    names.add(pseudonyms(BlindingKey(bytes(32)), "t", QUERY, [same])[0][1:])
    assert len(names) == 4
    assert KEY.secret.hex() not in repr(KEY) and KEY.key_id[:16] in repr(KEY)


def test_staging_is_a_function_of_the_ids_and_the_key_never_of_file_order(tmp_path: Path) -> None:
    rng = random.Random(3)
    documents = [Document(f"c-{n:04d}", "", f"text {n}") for n in range(50)]
    queries = [Query(f"q-{n:04d}", f"query {n}") for n in range(20)]

    def staged_bytes(folder: Path, key: BlindingKey, docs: list[Document], qs: list[Query]) -> dict[str, bytes]:
        stage_task(folder, task="t", split="test", mode="retrieve", top_k=10, queries=qs, documents=docs, key=key)
        return {name: (folder / name).read_bytes() for name in ("task.json", "queries.jsonl", "corpus.jsonl")}

    first = staged_bytes(tmp_path / "a", KEY, documents, queries)
    shuffled_docs, shuffled_queries = documents[:], queries[:]
    rng.shuffle(shuffled_docs)
    rng.shuffle(shuffled_queries)
    assert staged_bytes(tmp_path / "b", KEY, shuffled_docs, shuffled_queries) == first  # file order changes nothing
    other = staged_bytes(tmp_path / "c", BlindingKey(bytes(range(32))), documents, queries)
    assert other["corpus.jsonl"] != first["corpus.jsonl"]
    staged = [json.loads(line) for line in first["corpus.jsonl"].decode().splitlines()]
    ids = [record["_id"] for record in staged]
    assert ids == sorted(ids) and all(i.startswith("d") and len(i) == 25 for i in ids)
    assert b"c-0" not in first["corpus.jsonl"] and b"q-0" not in first["queries.jsonl"]
    # Each text travels with its own pseudonym.
    by_pseudonym = dict(zip(pseudonyms(KEY, "t", DOCUMENT, [d.id for d in documents]), documents))
    assert all(by_pseudonym[r["_id"]].text == r["text"] for r in staged)


def test_runs_and_vectors_come_back_under_the_real_ids(tmp_path: Path) -> None:
    documents = [Document(f"c-{n}", "", f"text {n}") for n in range(6)]
    queries = [Query(f"q-{n}", f"query {n}") for n in range(3)]
    staged = stage_task(tmp_path / "in", task="t", split="test", mode="retrieve", top_k=10, queries=queries, documents=documents, key=KEY)
    doc_of = dict(zip(staged.documents.real, staged.documents.staged))
    query_of = dict(zip(staged.queries.real, staged.queries.staged))
    # Ties (score 1.0 for c-1 and c-4) must end up in trec order under the real ids: c-4 before c-1.
    blinded = Run.from_mapping({query_of["q-2"]: {doc_of["c-1"]: 1.0, doc_of["c-4"]: 1.0, doc_of["c-0"]: 0.5}, query_of["q-0"]: {doc_of["c-5"]: 2.0}})
    run = unblind_run(blinded, queries=staged.queries, documents=staged.documents)
    assert run.query_ids == ("q-0", "q-2")
    assert run.ranking("q-2") == [("c-4", 1.0), ("c-1", 1.0), ("c-0", 0.5)]
    assert run.ranking("q-0") == [("c-5", 2.0)]
    # Vectors: row r of the staged file is staged.documents.real[r]; unblinding gives the task's order.
    rows = np.array([[float(staged.documents.real[r][2:])] for r in range(len(documents))], dtype=np.float32)
    assert unblind_rows(rows, staged.documents)[:, 0].tolist() == [float(n) for n in range(6)]


def test_outputs_are_validated_under_the_pseudonyms_then_mapped_back(tmp_path: Path) -> None:
    """The collect stage: an id the container was not given (a real one) is OUTPUT_INVALID; a valid run comes back under the real ids."""
    documents = [Document(f"c-{n}", "", f"text {n}") for n in range(4)]
    queries = [Query(f"q-{n}", f"query {n}") for n in range(2)]
    staged = stage_task(tmp_path / "in", task="t", split="test", mode="retrieve", top_k=10, queries=queries, documents=documents, key=KEY)
    doc_of = dict(zip(staged.documents.real, staged.documents.staged))
    query_of = dict(zip(staged.queries.real, staged.queries.staged))
    out = tmp_path / "out"
    out.mkdir()

    def collect(lines: list[dict[str, Any]]) -> TaskOutputs:
        (out / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        return collect_outputs(out, mode="retrieve", query_ids=staged.query_ids, doc_ids=staged.doc_ids, top_k=10, max_bytes=1 << 20)

    with pytest.raises(TaskFailure) as caught:
        collect([{"query_id": "q-0", "hits": [{"id": "c-0", "score": 1.0}]}])
    assert caught.value.code is FailureCode.OUTPUT_INVALID
    outputs = collect([{"query_id": query_of["q-1"], "hits": [{"id": doc_of["c-3"], "score": 1.0}, {"id": doc_of["c-2"], "score": 0.5}]}])
    back = unblind_outputs(outputs, queries=staged.queries, documents=staged.documents)
    assert back.run is not None and back.run.query_ids == ("q-1",) and back.run.ranking("q-1") == [("c-3", 1.0), ("c-2", 0.5)]


def test_a_pseudonym_collision_stops_staging_and_is_never_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blinding_module, "PSEUDONYM_HEX", 1)  # 16 possible pseudonyms: 40 ids must collide
    documents = [Document(f"c-{n}", "", "x") for n in range(40)]
    with pytest.raises(SandboxUnavailable, match="two document ids share the pseudonym"):
        stage_task(tmp_path / "in", task="t", split="test", mode="retrieve", top_k=10, queries=[Query("q-1", "x")], documents=documents, key=KEY)
    assert not (tmp_path / "in").exists()  # checked before anything is written
    with pytest.raises(SandboxUnavailable, match="two query ids"):
        blind(KEY, "t", QUERY, [f"q-{n}" for n in range(40)])


# --------------------------------------------------------------------------- key files and keygen


def test_key_files_are_private_hex_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "blinding.key"
    written = write_blinding_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_blinding_key(path).key_id == written.key_id
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_blinding_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="readable by others"):
        load_blinding_key(path)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(KeyFileError):
        load_blinding_key(link)
    bad = tmp_path / "bad.key"
    bad.write_text("not hex at all\n")
    os.chmod(bad, 0o600)
    with pytest.raises(KeyFileError, match="not a hex blinding key") as error:
        load_blinding_key(bad)
    assert "not hex at all" not in str(error.value)
    short = tmp_path / "short.key"
    short.write_text("00" * 8)
    os.chmod(short, 0o600)
    with pytest.raises(KeyFileError, match="too short"):
        load_blinding_key(short)


def test_keygen_writes_the_blinding_key_and_adds_it_beside_an_older_pair(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    result = invoke("keygen", "--out", keys)
    assert stat.S_IMODE(os.stat(keys / BLINDING_KEY_NAME).st_mode) == 0o600
    assert f"blinding key id: {load_blinding_key(keys / BLINDING_KEY_NAME).key_id}" in result.stdout
    (keys / BLINDING_KEY_NAME).unlink()  # a pair made before blinding existed
    added = invoke("keygen", "--out", keys)
    assert "beside the existing pair" in added.stdout and (keys / BLINDING_KEY_NAME).is_file()
    assert invoke("keygen", "--out", keys, expect=None).exit_code != 0  # everything there: nothing overwritten


# --------------------------------------------------------------------------- real containers


def _mrr(out: Path, task: str) -> float:
    return float(read_report(out)["tasks"][task]["measures"]["MRR@10"])


@pytest.mark.slow
@pytest.mark.docker(CHEATER)
def test_answering_by_id_pattern_or_position_scores_as_random(guard: HostGuard, tmp_path: Path) -> None:
    bench = cat_shaped(tmp_path / "bench", ["by-id", "by-position", "encode-by-position"])
    key = tmp_path / "blinding.key"
    write_blinding_key(key, KEY)
    retrieve = docker_submission(tmp_path / "retrieve", CHEATER)
    encode = docker_submission(tmp_path / "encode", CHEATER, mode="encode")
    out_retrieve, out_encode = tmp_path / "out-retrieve", tmp_path / "out-encode"
    common = ["--benchmark", bench, "--sandbox", "docker", "--quiet", "--blinding-key", key, *LIMITS]
    invoke("run", retrieve, "--tasks", "by-id,by-position", "--out", out_retrieve, *common)
    invoke("run", encode, "--tasks", "encode-by-position", "--out", out_encode, *common)
    scores = {"by-id": _mrr(out_retrieve, "by-id"), "by-position": _mrr(out_retrieve, "by-position")}
    scores["encode-by-position"] = _mrr(out_encode, "encode-by-position")
    assert all(value < RANDOM_BOUND for value in scores.values()), scores
    # The container saw pseudonyms only: its log names the first staged ids.
    log = (out_retrieve / "logs" / "by-id.log").read_text(encoding="utf-8")
    assert "q-0" not in log and "c-0" not in log and f"first ids '{blind(KEY, 'by-id', QUERY, [f'q-{n:04d}' for n in range(N)]).staged[0]}'" in log
    assert read_report(out_retrieve)["sandbox"]["blinding"] == {"scheme": "hmac-sha256-96/v1", "key_id": KEY.key_id}
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(CHEATER, SCRIPTED)
def test_regrading_with_the_same_key_stages_the_same_ids_and_grade(guard: HostGuard, tmp_path: Path) -> None:
    bench = cat_shaped(tmp_path / "bench", ["by-id", "valid"])
    key = tmp_path / "blinding.key"
    write_blinding_key(key, KEY)
    cheater = docker_submission(tmp_path / "cheater", CHEATER)
    honest = docker_submission(tmp_path / "honest", SCRIPTED)
    common = ["--benchmark", bench, "--sandbox", "docker", "--quiet", *LIMITS]
    for label in ("one", "two"):  # two OUT folders, one key: nothing reused from a store
        invoke("run", cheater, "--tasks", "by-id", "--out", tmp_path / f"cheater-{label}", "--blinding-key", key, *common)
    first, second = read_report(tmp_path / "cheater-one"), read_report(tmp_path / "cheater-two")
    assert first["tasks"] == second["tasks"] and first["sandbox"]["blinding"] == second["sandbox"]["blinding"]
    logs = [(tmp_path / f"cheater-{label}" / "logs" / "by-id.log").read_text(encoding="utf-8") for label in ("one", "two")]
    assert logs[0] == logs[1]  # the same first staged ids
    # Without --blinding-key an unsigned run keeps its own key in OUT (0600) and reuses it on a rerun.
    own = tmp_path / "cheater-own"
    invoke("run", cheater, "--tasks", "by-id", "--out", own, *common)
    own_key = load_blinding_key(own / BLINDING_KEY_NAME)
    assert stat.S_IMODE(os.stat(own / BLINDING_KEY_NAME).st_mode) == 0o600
    assert read_report(own)["sandbox"]["blinding"]["key_id"] == own_key.key_id != KEY.key_id
    assert (own / "logs" / "by-id.log").read_text(encoding="utf-8") != logs[0]
    # An honest submission (word overlap) scores the same under any key: the text decides, not the ids.
    invoke("run", honest, "--tasks", "valid", "--out", tmp_path / "honest-one", "--blinding-key", key, *common)
    invoke("run", honest, "--tasks", "valid", "--out", tmp_path / "honest-two", *common)
    one, two = read_report(tmp_path / "honest-one"), read_report(tmp_path / "honest-two")
    assert one["sandbox"]["blinding"]["key_id"] != two["sandbox"]["blinding"]["key_id"]
    assert one["tasks"]["valid"]["measures"] == two["tasks"]["valid"]["measures"]
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(SCRIPTED)
def test_a_collision_in_a_grade_is_infra_and_not_stored(guard: HostGuard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blinding_module, "PSEUDONYM_HEX", 1)
    bench = cat_shaped(tmp_path / "bench", ["valid"])
    out = tmp_path / "out"
    invoke("run", docker_submission(tmp_path / "honest", SCRIPTED), "--benchmark", bench, "--sandbox", "docker", "--out", out, "--quiet", *LIMITS)
    failure = read_report(out)["tasks"]["valid"]["failure"]
    assert failure["code"] == "INFRA" and "share the pseudonym" in failure["message"]
    assert not (out / "tasks").exists() or not any((out / "tasks").iterdir())  # an INFRA task is graded again, never resumed
    guard.verify()


@pytest.mark.slow
@pytest.mark.docker(SCRIPTED)
def test_a_signed_run_needs_the_blinding_key_beside_its_signing_key_and_the_key_is_part_of_the_stored_result(
    guard: HostGuard, tmp_path: Path
) -> None:
    from grader.reports.keys import write_keypair

    bench = cat_shaped(tmp_path / "bench", ["valid"])
    honest = docker_submission(tmp_path / "honest", SCRIPTED)
    keys = tmp_path / "keys"
    write_keypair(keys)  # a pair made the old way: no blinding.key beside it
    out = tmp_path / "out"
    common = ["--benchmark", bench, "--sandbox", "docker", "--quiet", *LIMITS]
    refused = invoke("run", honest, "--out", out, "--key", keys / "grader.key", *common, expect=None)
    assert refused.exit_code != 0 and "no blinding key here" in refused.stderr and "grader keygen --out" in refused.stderr
    assert not (out / "report.dsse.json").exists()
    invoke("keygen", "--out", keys)  # adds it
    invoke("run", honest, "--out", out, "--key", keys / "grader.key", *common)
    signed_key = load_blinding_key(keys / BLINDING_KEY_NAME).key_id
    assert read_report(out)["sandbox"]["blinding"]["key_id"] == signed_key
    # The same OUT under another key: nothing stored under the first key is reused.
    other = tmp_path / "other.key"
    write_blinding_key(other, KEY)
    invoke("run", honest, "--out", out, "--blinding-key", other, *common)
    assert read_report(out)["sandbox"]["blinding"]["key_id"] == KEY.key_id
    assert len(list((out / "tasks").glob("valid.*.json"))) == 2  # one stored result per key
    guard.verify()
