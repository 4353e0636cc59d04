"""A task's documents under a blinding key, kept for the server's scoring: equal to blinding afresh, used only when the
grader provably wrote them for this corpus and this key (grader/grading/blinded_documents.py)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from grader.data.benchmark import load_benchmark_folder
from grader.data.task import Task
from grader.grading import blinded_documents as kept_module
from grader.grading.blinded_documents import blinded_documents
from grader.grading.scoring import report_from_runs
from grader.hosting.protocol.worker_data import ensure_worker_data
from grader.metrics.measures import parse_measures
from grader.metrics.policy import Policy
from grader.runs.compact import encode_run, has_ties
from grader.runs.run import Run
from grader.sandbox.blinding import DOCUMENT, QUERY, BlindedIds, BlindingKey, blind
from tests.conftest import write_task

KEY = BlindingKey(hashlib.sha256(b"kept documents test").digest())
OTHER_KEY = BlindingKey(hashlib.sha256(b"another competition").digest())
#: Ids a kept file must give back exactly: non-ASCII, a space, a lone surrogate (JSON can carry one), a slash.
IDS = [f"doc{n}" for n in range(40)] + ["ü", "a b", "lone\ud800", "x/../y", "ç∂"]


def _bench(root: Path, ids: list[str] = IDS) -> Path:
    corpus = [{"_id": identifier, "title": "", "text": f"text {n}"} for n, identifier in enumerate(ids)]
    queries = [{"_id": f"q{n}", "text": f"query {n}"} for n in range(5)]
    write_task(root / "t", corpus=corpus, queries=queries, qrels={"test": [(f"q{n}", ids[n], 1) for n in range(5)]})
    (root / "benchmark.json").write_text('{"name": "b", "version": "1", "primary_measure": "NDCG@10", "tasks": ["t"]}', encoding="utf-8")
    return root


def _task(root: Path) -> Task:
    return load_benchmark_folder(root).task("t")  # a fresh Task: nothing it read before is remembered


def _same(a: BlindedIds, b: BlindedIds) -> bool:
    return a.staged == b.staged and a.real == b.real and np.array_equal(a.rows, b.rows) and a.rows.dtype == b.rows.dtype


def _no_corpus_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Task):  # type: ignore[no-untyped-def]
        raise AssertionError("the corpus was read although its blinded documents are kept")

    monkeypatch.setattr(Task, "iter_corpus", refuse)


def _kept_file(folder: Path) -> Path:
    (path,) = folder.glob("*.blinded")
    return path


def test_kept_documents_equal_blinding_afresh_and_spare_the_corpus_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = _bench(tmp_path / "bench"), tmp_path / "kept"
    fresh = blind(KEY, "t", DOCUMENT, IDS)
    assert _same(blinded_documents(_task(root), KEY, folder), fresh)
    path = _kept_file(folder)
    assert path.stat().st_mode & 0o777 == 0o600
    assert "t" not in path.name.split(".")[0]  # named by a digest: no task name reaches the file system
    _no_corpus_reads(monkeypatch)
    assert _same(blinded_documents(_task(root), KEY, folder), fresh)


@pytest.mark.parametrize("where", ["mac", "meta", "arrays", "end"])
def test_a_changed_kept_file_is_ignored_and_blinded_again(tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = _bench(tmp_path / "bench"), tmp_path / "kept"
    blinded_documents(_task(root), KEY, folder)
    path = _kept_file(folder)
    data = bytearray(path.read_bytes())
    first_line, second_line = data.index(b"\n"), data.index(b"\n", data.index(b"\n") + 1)
    at = {"mac": 3, "meta": first_line + 5, "arrays": second_line + len(data) // 2 - second_line // 2, "end": len(data) - 1}[where]
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    reads: list[int] = []
    original = Task.iter_corpus
    monkeypatch.setattr(Task, "iter_corpus", lambda self: reads.append(1) or original(self))
    again = blinded_documents(_task(root), KEY, folder)
    assert reads == [1]  # not trusted: read and blinded again
    assert _same(again, blind(KEY, "t", DOCUMENT, IDS))
    assert path.read_bytes() != bytes(data)  # and kept again, whole


def test_a_file_kept_under_another_key_or_planted_is_not_used(tmp_path: Path) -> None:
    root, folder, elsewhere = _bench(tmp_path / "bench"), tmp_path / "kept", tmp_path / "other"
    blinded_documents(_task(root), KEY, folder)
    blinded_documents(_task(root), OTHER_KEY, elsewhere)
    target = _kept_file(folder)
    shutil.copyfile(_kept_file(elsewhere), target)  # a whole, well-made file, of another key, under this key's name
    assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, IDS))
    # A planted file that swaps two real ids and recomputes nothing it cannot (the MAC needs the key): refused.
    documents = blind(KEY, "t", DOCUMENT, IDS)
    swapped = BlindedIds(documents.staged, (documents.real[1], documents.real[0], *documents.real[2:]), documents.rows)
    kept_module.keep_blinded_documents(_task(root), OTHER_KEY, tmp_path / "forged", swapped)
    forged = _kept_file(tmp_path / "forged").read_bytes()
    mac, _, rest = forged.partition(b"\n")
    target.write_bytes(mac + b"\n" + rest.replace(OTHER_KEY.key_id.encode(), KEY.key_id.encode()))
    assert _same(blinded_documents(_task(root), KEY, folder), documents)


def test_a_changed_corpus_is_blinded_again_not_read_from_the_old_file(tmp_path: Path) -> None:
    root, folder = _bench(tmp_path / "bench"), tmp_path / "kept"
    blinded_documents(_task(root), KEY, folder)
    old = _kept_file(folder)
    renamed = ["renamed", *IDS[1:]]
    _bench(root, renamed)  # the same task, one document id changed
    assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, renamed))
    (new,) = set(folder.glob("*.blinded")) - {old}  # one per corpus: the old one names the old corpus's sha256
    # The old corpus's file (its MAC good) under the new corpus's name: it names another corpus, so it is not used.
    shutil.copyfile(old, new)
    assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, renamed))


def test_a_link_or_an_oversized_file_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder, elsewhere = _bench(tmp_path / "bench"), tmp_path / "kept", tmp_path / "elsewhere"
    blinded_documents(_task(root), KEY, elsewhere)
    folder.mkdir()
    link = folder / _kept_file(elsewhere).name
    os.symlink(_kept_file(elsewhere), link)  # a valid file, but behind a link
    reads: list[str] = []
    monkeypatch.setattr(kept_module, "blind", lambda *args: reads.append("blind") or blind(*args))
    assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, IDS))
    assert reads == ["blind"] and not link.is_symlink()  # replaced by a plain file of its own
    monkeypatch.setattr(kept_module, "SLACK_BYTES", 0)
    monkeypatch.setattr(kept_module, "RATIO", 0)  # every kept file is now past its bound
    assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, IDS))
    assert reads == ["blind", "blind"]


def test_a_report_scored_from_kept_documents_is_the_report_scored_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = _bench(tmp_path / "bench"), tmp_path / "kept"
    rng = random.Random(5)
    queries = [f"q{n}" for n in range(5)]
    rankings = {q: {d: round(rng.random(), 1) for d in rng.sample(IDS[:8], 6)} for q in queries}  # ties included
    documents, judged = blind(KEY, "t", DOCUMENT, IDS), blind(KEY, "t", QUERY, queries)
    to_pseudonym = {real: staged for staged, real in documents.real_of.items()}
    query_pseudonym = {real: staged for staged, real in judged.real_of.items()}
    blinded = Run.from_mapping({query_pseudonym[q]: {to_pseudonym[d]: s for d, s in r.items()} for q, r in rankings.items()})
    data = encode_run(blinded, corpus=documents.staged, queries=judged.staged, depth=10, scores=has_ties(blinded))
    moment = "2026-01-01T00:00:00Z"
    facts = {"subject": {"kind": "onnx", "name": "m", "digest": {"sha256": "0" * 64}}, "sandbox": None, "labels": {}}
    facts |= {"started_at": moment, "finished_at": moment, "tasks": {"t": {"failure": None}}}

    def report(kept: Path | None) -> dict:
        return report_from_runs(
            load_benchmark_folder(root),
            split="test",
            tasks=["t"],
            facts=facts,
            runs={"t": data},
            measures=parse_measures(["NDCG@10", "MRR@10"]),
            policy=Policy.STRICT,
            top_k=10,
            key=KEY,
            kept_documents=kept,
        )

    direct = report(None)
    assert report(folder) == direct  # blinded, then kept
    _no_corpus_reads(monkeypatch)
    assert report(folder) == direct  # from the kept file alone
    assert direct["tasks"]["t"]["measures"]["NDCG@10"] > 0


def test_the_servers_export_keeps_them_apart_from_the_workers_copy_and_drops_stale_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder, copy = _bench(tmp_path / "bench"), tmp_path / "state" / "scoring" / "blinded-documents", tmp_path / "state" / "worker-data"
    (folder).mkdir(parents=True)
    (folder / ("0" * 64 + ".blinded")).write_bytes(b"kept for data this server no longer grades")
    ensure_worker_data(str(root), ["t"], ["test"], KEY, copy, folder)
    assert [p.name for p in folder.iterdir()] == [_kept_file(folder).name]  # the stale file is gone
    assert folder.stat().st_mode & 0o777 == 0o700
    assert not any(p.suffix == ".blinded" for p in copy.rglob("*"))  # the workers' copy never holds the map back
    with monkeypatch.context() as patched:
        _no_corpus_reads(patched)
        assert _same(blinded_documents(_task(root), KEY, folder), blind(KEY, "t", DOCUMENT, IDS))
    # An export without the folder (``grader admin export-worker-data``) keeps nothing.
    ensure_worker_data(str(root), ["t"], ["test"], OTHER_KEY, tmp_path / "remote-copy")
    assert len(list(folder.iterdir())) == 1
