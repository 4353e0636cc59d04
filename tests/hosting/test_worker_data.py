"""A worker's data copy (docs/deploy.md, "Workers' data"): pseudonymous ids, no judgements, mapped back by the server.

On CAT-shaped data (query ``q-<n>`` answered by document ``c-<n>``: ids that are
judgements in disguise), the copy ``grader admin export-worker-data`` writes holds no
qrels and no real id, and its files are in pseudonym order. A worker stages it as it
is, and what its containers see is byte for byte what a direct ``grader run`` stages
under the competition's key, so the id-pattern and position attacks of
tests/test_sandbox_blinding.py fail against a worker as they fail there. A worker's run
indexes the copy's canonical order; the server maps it back to the real ids, ties
broken by the real ids as a direct run breaks them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

from grader.data.benchmark import load_benchmark_folder
from grader.data.task import Document, Query
from grader.errors import SandboxUnavailable
from grader.grading.scoring import real_run
from grader.hosting.protocol.worker_data import copy_key, export_worker_data, pseudonymous_judged
from grader.runs.compact import encode_run, has_ties
from grader.runs.run import Run
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindingKey, Preblinded, blind
from grader.sandbox.staging import stage_task
from tests.hosting.support import admin
from tests.sandbox_support import write_beir_task

KEY = BlindingKey(hashlib.sha256(b"tests/hosting/test_worker_data.py").digest())
N = 200
PSEUDONYM = re.compile(r'"_id": "([qd][0-9a-f]{24})"')


def cat_shaped(root: Path) -> Path:
    """One task pairing ``q-<n>`` with ``c-<n>``, the corpus in id order; half the queries judged in ``test``, a few in ``dev``."""
    rng = random.Random(3)
    documents = [Document(f"c-{n:04d}", f"title {n}", " ".join(rng.choices("abcdefgh", k=6))) for n in range(N)]
    queries = [Query(f"q-{n:04d}", " ".join(rng.choices("abcdefgh", k=3))) for n in range(N)]
    write_beir_task(
        root / "cat", documents=documents, queries=queries, qrels={f"q-{n:04d}": {f"c-{n:04d}": 1} for n in range(0, N, 2)}, splits=("test",)
    )
    (root / "cat" / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq-0001\tc-0001\t1\n", encoding="utf-8")
    spec = {"name": "cat-shaped", "version": "1", "primary_measure": "MRR@10", "measures": ["MRR@10"], "tasks": ["cat"]}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def test_the_copy_has_no_judgements_no_real_id_and_its_files_in_pseudonym_order(tmp_path: Path) -> None:
    source = load_benchmark_folder(cat_shaped(tmp_path / "bench"))
    out = tmp_path / "copy"
    written = export_worker_data(source, ["cat"], ["test", "dev"], KEY, out)
    assert written["cat"].documents == N and written["cat"].queries == N // 2 + 1  # the judged ones only: test's and dev's q-0001
    files = sorted(path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file())
    assert files == ["benchmark.json", "cat/corpus.jsonl", "cat/corpus.order", "cat/queries.jsonl", "worker-data.json"]
    # corpus.order (binary: line numbers, offsets, line digests) holds no id at all; tests/test_shard_input.py reads it.
    text = {name: (out / name).read_text(encoding="utf-8") for name in files if name != "cat/corpus.order"}
    everything = "".join(text.values())
    # No real id anywhere (as a value or inside one), nor the key; the key's public id only.
    assert not re.search(r"[qc]-\d{4}", everything) and KEY.secret.hex() not in everything
    assert json.loads(text["worker-data.json"])["blinding"] == {"scheme": "hmac-sha256-96/v1", "key_id": KEY.key_id}
    for name, kind in (("cat/corpus.jsonl", DOCUMENT), ("cat/queries.jsonl", QUERY)):
        lines = text[name].splitlines()
        ids = [json.loads(line)["_id"] for line in lines]
        assert ids == sorted(ids) and all(PSEUDONYM.search(line) for line in lines) and {i[0] for i in ids} == {kind}
    # The pseudonyms are the key's, so the server (which keeps the key) can map back; the texts are the benchmark's.
    real_queries = [f"q-{n:04d}" for n in (*range(0, N, 2), 1)]
    copy = load_benchmark_folder(out).task("cat")
    assert sorted(q.id for q in copy.iter_queries()) == list(blind(KEY, "cat", QUERY, real_queries).staged)
    by_pseudonym = {blind(KEY, "cat", DOCUMENT, [d.id]).staged[0]: d for d in source.task("cat").iter_corpus()}
    assert all((d.title, d.text) == (by_pseudonym[d.id].title, by_pseudonym[d.id].text) for d in copy.iter_corpus())
    assert copy_key(out) == Preblinded(KEY.key_id)
    with pytest.raises(Exception, match="not an empty folder"):
        export_worker_data(source, ["cat"], ["test"], KEY, out)  # an export never overwrites


def test_a_worker_stages_its_copy_exactly_as_a_direct_run_stages_the_real_data(tmp_path: Path) -> None:
    """So an id-pattern or position attack sees on a worker exactly what it sees in tests/test_sandbox_blinding.py: pseudonyms."""
    source = load_benchmark_folder(cat_shaped(tmp_path / "bench")).task("cat")
    export_worker_data(load_benchmark_folder(tmp_path / "bench"), ["cat"], ["test"], KEY, tmp_path / "copy")
    copy = load_benchmark_folder(tmp_path / "copy").task("cat")
    judged_real, judged_copy = set(source.qrels("test")), set(pseudonymous_judged(KEY, "cat", source.qrels("test")))
    common = {"task": "cat", "split": "test", "mode": "retrieve", "top_k": 10}
    direct = stage_task(
        tmp_path / "direct",
        queries=[q for q in source.iter_queries() if q.id in judged_real],
        documents=list(source.iter_corpus()),
        key=KEY,
        **common,
    )
    worker = stage_task(
        tmp_path / "worker",
        queries=[q for q in copy.iter_queries() if q.id in judged_copy],
        documents=list(copy.iter_corpus()),
        key=copy_key(tmp_path / "copy"),
        **common,
    )
    for name in ("task.json", "queries.jsonl", "corpus.jsonl"):
        assert (direct.folder / name).read_bytes() == (worker.folder / name).read_bytes(), name
    assert direct.blinding == worker.blinding == KEY.report()
    # Data with the benchmark's own ids is never staged as a copy (it would reach the container unblinded).
    with pytest.raises(SandboxUnavailable, match="not a pseudonym"):
        stage_task(tmp_path / "real", queries=list(source.iter_queries()), documents=list(source.iter_corpus()), key=Preblinded(KEY.key_id), **common)


@pytest.mark.parametrize("ties", [False, True])
def test_the_server_maps_a_pseudonymous_run_back_with_ties_broken_by_the_real_ids(tmp_path: Path, ties: bool) -> None:
    task = load_benchmark_folder(cat_shaped(tmp_path / "bench")).task("cat")
    judged = sorted(task.qrels("test"))
    rng = random.Random(5)
    corpus = [f"c-{n:04d}" for n in range(N)]
    # What a direct run holds under the real ids (trec order: score descending, ties by id descending).
    real = {q: {d: float(rng.randint(0, 3) if ties else rng.random()) for d in rng.sample(corpus, 20)} for q in judged}
    expected = Run.from_mapping(real)
    documents, queries = blind(KEY, "cat", DOCUMENT, corpus), blind(KEY, "cat", QUERY, judged)
    to_doc = {r: p for p, r in documents.real_of.items()}
    to_query = {r: p for p, r in queries.real_of.items()}
    worker_run = Run.from_mapping({to_query[q]: {to_doc[d]: s for d, s in hits.items()} for q, hits in real.items()})
    assert has_ties(worker_run) is ties  # scores travel only when a tie needs them
    data = encode_run(worker_run, corpus=documents.staged, queries=queries.staged, depth=1000, scores=has_ties(worker_run))
    got = real_run(task, data, judged, depth=1000, key=KEY)
    assert list(got.query_ids) == list(expected.query_ids)
    for i in range(len(judged)):
        hits = [got.doc_vocab[c] for c in got.doc_codes[got.offsets[i] : got.offsets[i + 1]]]
        assert hits == [expected.doc_vocab[c] for c in expected.doc_codes[expected.offsets[i] : expected.offsets[i + 1]]]
    if ties:
        assert np.array_equal(got.scores, expected.scores)


def test_admin_export_worker_data_uses_the_competitions_key(tmp_path: Path) -> None:
    from grader.hosting.keyring.blinding_key import ensure_competition_blinding_key
    from tests.hosting.support import write_competition

    competition = write_competition(tmp_path / "c.toml")
    state = tmp_path / "state"
    (state / "keys").mkdir(parents=True)
    with pytest.raises(Exception, match="no blinding key yet"):
        admin(state, "export-worker-data", "--out", str(tmp_path / "none"), "--competition", str(competition))
    key = ensure_competition_blinding_key(state / "keys")
    said = admin(state, "export-worker-data", "--out", str(tmp_path / "copy"), "--competition", str(competition))
    assert "pseudonymous ids, no judgements" in said and copy_key(tmp_path / "copy") == Preblinded(key.key_id)
    assert not [p for p in (tmp_path / "copy").rglob("*") if "qrels" in p.name or p.suffix == ".tsv"]
    assert os.listdir(tmp_path / "copy")
