"""Shard jobs' work and the server's merge give the unsharded compact run, bit for bit, in-process.

The query job encodes the queries once; each shard job (a fresh encoder: another "worker")
ranks its shard against those vectors and returns a compact run with float64 scores over the
whole corpus's canonical indexes; the server merges the runs in any order. The encoder is the
batch-dependent test model (``tests/onnx_models.batch_mean_model``), which ``tests/test_shards.py``
shows catches a cut inside a chunk. Expected bytes come from the unsharded path (encode all,
:func:`search_run`, :func:`encode_run`), which ``tests/test_search.py`` checks against brute force.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from grader.data.task import Document, Query, document_text
from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.grading.shard_work import encode_query_job, rank_shard_job, shard_count
from grader.metrics.measures import default_measures
from grader.metrics.policy import evaluate
from grader.retrieval.encoder import BatchPolicy, OnnxEncoder
from grader.retrieval.search import search_run
from grader.retrieval.shard_exchange import merge_compact_runs, unpack_vectors, vectors_size
from grader.retrieval.shard_run import BLOCK_COPIES
from grader.runs.compact import canonical_order, decode_run, encode_run
from grader.runs.ties import cut_at_depth, keep_boundary_ties, tie_slack
from grader.submissions.manifest import OnnxManifest, load_manifest
from tests.onnx_models import batch_dependent_submission, embedding_table, words

CHUNK = 8
K = 10
POLICY = BatchPolicy(max_batch_tokens=24, max_batch_size=4, chunk_size=CHUNK)
SEARCH_MEMORY = 3 * BLOCK_COPIES * 8 * 4  # 3-row blocks at dimension 8


def _data() -> tuple[list[Document], list[Query], dict[str, dict[str, int]]]:
    rng = random.Random(11)
    texts = [words(*(rng.randrange(61) for _ in range(rng.randrange(1, 9)))) for _ in range(45)]
    texts += [texts[rng.randrange(45)] for _ in range(8)]  # equal texts under other ids
    ids = [f"d{n:03d}" for n in rng.sample(range(1000), len(texts))]
    documents = [Document(doc_id, "", text) for doc_id, text in zip(ids, texts)]
    queries = [Query(f"q{n}", words(*(rng.randrange(61) for _ in range(rng.randrange(1, 5))))) for n in range(11)]
    qrels = {q.id: {ids[rng.randrange(len(ids))]: rng.randrange(1, 3) for _ in range(3)} for q in queries}
    return documents, queries, qrels


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return batch_dependent_submission(tmp_path_factory.mktemp("batchdep") / "sub", table=embedding_table(dim=8, seed=5))


def _encoder(folder: Path) -> tuple[OnnxEncoder, OnnxManifest]:
    manifest = load_manifest(folder)
    assert isinstance(manifest, OnnxManifest)
    return OnnxEncoder.load(folder, manifest, threads=1, batching=POLICY), manifest


@pytest.mark.parametrize("shard_documents", [CHUNK, 3 * CHUNK, None], ids=["1-chunk", "3-chunks", "all"])
def test_merged_shard_jobs_are_the_unsharded_run(submission: Path, tmp_path: Path, shard_documents: int | None) -> None:
    documents, queries, qrels = _data()
    doc_ids, query_ids = [d.id for d in documents], [q.id for q in queries]
    encoder, manifest = _encoder(submission)
    corpus_vectors, _ = encoder.encode([document_text(d.title, d.text) for d in documents], ids=doc_ids, prefix=manifest.document_prefix)
    query_vectors, _ = encoder.encode([q.text for q in queries], ids=query_ids, prefix=manifest.query_prefix)
    # As an unsharded worker ranks its pseudonymous copy: the depth and each query's boundary tie group (grader.runs.ties).
    searched = search_run(query_ids, doc_ids, query_vectors, corpus_vectors, K + tie_slack(K), fault_code=FailureCode.MODEL_ERROR)
    corpus, ordered_queries = canonical_order(doc_ids), canonical_order(query_ids)
    want = encode_run(keep_boundary_ties(searched, K), corpus=corpus, queries=ordered_queries, depth=K, scores=True)
    whole = cut_at_depth(searched, K)

    packed = encode_query_job(_encoder(submission)[0], queries, prefix=manifest.query_prefix)
    vectors = unpack_vectors(packed, sha256=hashlib.sha256(packed).hexdigest(), rows=len(queries), max_bytes=vectors_size(len(queries), 8))
    count = shard_count(documents, chunk_size=CHUNK, shard_documents=shard_documents)
    assert count == (1 if shard_documents is None else -(-len(documents) // shard_documents))
    numbers = list(range(count))
    random.Random(count).shuffle(numbers)  # completed in any order, each on its own "worker"
    parts = [
        rank_shard_job(
            _encoder(submission)[0],
            documents,
            queries,
            number,
            vectors,
            shard_documents=shard_documents,
            depth=K,
            folder=tmp_path,
            prefix=manifest.document_prefix,
            search_memory=SEARCH_MEMORY,
        )
        for number in numbers
    ]
    assert list(tmp_path.iterdir()) == []  # every spool deleted
    merged = merge_compact_runs(parts, documents=len(documents), queries=len(queries), depth=K)
    assert merged == want  # every hit, its order and its float64 score

    measures = default_measures()
    run = cut_at_depth(decode_run(merged, documents=len(documents), queries=len(queries), depth=K).to_run(corpus, ordered_queries), K)
    got, expected = evaluate(qrels, run, measures), evaluate(qrels, whole, measures)
    for measure in measures:
        assert got.per_query.values[measure].tobytes() == expected.per_query.values[measure].tobytes(), measure


def test_query_vectors_are_checked_before_use() -> None:
    from grader.retrieval.shard_exchange import pack_vectors

    packed = pack_vectors(np.ones((3, 4), dtype=np.float32))
    digest = hashlib.sha256(packed).hexdigest()
    assert unpack_vectors(packed, sha256=digest, rows=3, max_bytes=len(packed)).shape == (3, 4)
    for data, rows, cap, why in [
        (packed, 3, len(packed) - 1, "more than the cap"),
        (packed[:-4], 3, len(packed), "sha256"),  # truncated in transfer
        (packed, 4, len(packed), "not 4 rows"),
    ]:
        with pytest.raises(TaskFailure, match=why) as caught:
            unpack_vectors(data, sha256=digest, rows=rows, max_bytes=cap)
        assert caught.value.code is FailureCode.INFRA


def test_shards_naming_one_document_are_refused(submission: Path, tmp_path: Path) -> None:
    documents, queries, _ = _data()
    encoder, _manifest = _encoder(submission)
    vectors = unpack_vectors(
        packed := encode_query_job(encoder, queries, prefix=""), sha256=hashlib.sha256(packed).hexdigest(), rows=len(queries), max_bytes=1 << 20
    )
    part = rank_shard_job(encoder, documents, queries, 0, vectors, shard_documents=CHUNK, depth=K, folder=tmp_path, prefix="")
    with pytest.raises(TaskFailure, match="two shards name one document"):
        merge_compact_runs([part, part], documents=len(documents), queries=len(queries), depth=K)
