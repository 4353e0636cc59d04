"""Sharded encoding and search give the unsharded grade, bit for bit, in-process.

The encoder is a real ONNX graph whose output depends on its batch by construction
(``tests/onnx_models.batch_mean_model``: each token row plus a multiple of the batch
mean). The control shows that this model catches a wrong cut: shards cut inside an
encoding chunk change vector bits. Then shards of whole chunks (1, 3 and all chunks,
and a ``shard_documents`` that rounds up), each encoded by its own encoder instance
("worker"), searched in small blocks from a spool file, completed in shuffled order
and merged, must give the same rankings, measures and per-query values as encoding
and searching the whole corpus at once. Expected values come from the unsharded
path, which ``tests/test_search.py`` checks against brute force.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

from grader.errors import TaskFailure, UsageError
from grader.failures import FailureCode
from grader.metrics.measures import default_measures
from grader.metrics.policy import evaluate
from grader.retrieval.encoder import BatchPolicy, OnnxEncoder
from grader.retrieval.merge import ShardRanking, merge_rankings, ranking_to_run
from grader.retrieval.search import exact_top_k, search_run
from grader.retrieval.shard_run import BLOCK_COPIES, encode_shard, rank_shard
from grader.retrieval.shards import canonical_order, plan_shards
from grader.submissions.manifest import load_manifest
from tests.onnx_models import batch_dependent_submission, embedding_table, words

CHUNK = 8
K = 10
#: Small batches, so each chunk of 8 holds several: a cut inside a chunk must move texts between batches.
POLICY = BatchPolicy(max_batch_tokens=24, max_batch_size=4, chunk_size=CHUNK)
#: Search memory for 3-row blocks (dimension 8): every shard is searched in several verified blocks.
SEARCH_MEMORY = 3 * BLOCK_COPIES * 8 * 4


def _corpus(seed: int = 7) -> tuple[list[str], list[str], list[str], list[str], dict[str, dict[str, int]]]:
    """(doc texts, doc ids, query texts, query ids, qrels): 61 documents, some texts repeated under other ids."""
    rng = random.Random(seed)
    texts = [words(*(rng.randrange(61) for _ in range(rng.randrange(1, 9)))) for _ in range(50)]
    texts += [texts[rng.randrange(50)] for _ in range(11)]  # equal texts, which (text, id) orders
    ids = [f"d{n:03d}" for n in rng.sample(range(1000), len(texts))]
    queries = [words(*(rng.randrange(61) for _ in range(rng.randrange(1, 5)))) for _ in range(12)]
    query_ids = [f"q{n}" for n in range(len(queries))]
    qrels = {q: {ids[rng.randrange(len(ids))]: rng.randrange(1, 3) for _ in range(3)} for q in query_ids}
    return texts, ids, queries, query_ids, qrels


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return batch_dependent_submission(tmp_path_factory.mktemp("batchdep") / "sub", table=embedding_table(dim=8, seed=3))


def _encoder(folder: Path) -> OnnxEncoder:
    """A fresh encoder instance: each shard below is encoded as if on its own worker."""
    return OnnxEncoder.load(folder, load_manifest(folder), threads=1, batching=POLICY)  # type: ignore[arg-type]


def test_control_cut_inside_a_chunk_changes_bits(submission: Path) -> None:
    texts, ids, *_ = _corpus()
    encoder = _encoder(submission)
    whole, _ = encoder.encode(texts, ids=ids)
    order = canonical_order(texts, ids)
    cut = CHUNK // 2 + 1  # inside the first chunk
    pieces = np.empty_like(whole)
    for rows in (order[:cut], order[cut:]):
        pieces[rows] = encoder.encode([texts[r] for r in rows], ids=[ids[r] for r in rows])[0]
    assert not np.array_equal(whole.view(np.uint32), pieces.view(np.uint32)), "the batch-dependent model did not notice a cut inside a chunk"
    # Cut on a chunk boundary instead: the same bits.
    for begin in range(0, len(order), CHUNK):
        rows = order[begin : begin + CHUNK]
        pieces[rows] = encoder.encode([texts[r] for r in rows], ids=[ids[r] for r in rows])[0]
    assert np.array_equal(whole.view(np.uint32), pieces.view(np.uint32))


def test_equal_texts_order_by_id_not_by_file_position(submission: Path) -> None:
    texts, ids, *_ = _corpus()
    encoder = _encoder(submission)
    whole, _ = encoder.encode(texts, ids=ids)
    shuffled = list(range(len(texts)))
    random.Random(1).shuffle(shuffled)
    again, _ = encoder.encode([texts[i] for i in shuffled], ids=[ids[i] for i in shuffled])
    assert np.array_equal(whole[shuffled].view(np.uint32), again.view(np.uint32))
    assert len(set(texts)) < len(texts)


@pytest.mark.parametrize("shard_documents", [CHUNK, 3 * CHUNK, 2 * CHUNK - 5, None], ids=["1-chunk", "3-chunks", "rounded-up", "all"])
def test_aligned_shards_give_the_unsharded_grade(submission: Path, tmp_path: Path, shard_documents: int | None) -> None:
    texts, ids, queries, query_ids, qrels = _corpus()
    encoder = _encoder(submission)
    corpus_vectors, _ = encoder.encode(texts, ids=ids)
    query_vectors, _ = encoder.encode(queries, ids=query_ids)  # encoded once, handed to every shard
    whole = search_run(query_ids, ids, query_vectors, corpus_vectors, K, fault_code=FailureCode.MODEL_ERROR)

    shards = plan_shards(texts, ids, chunk_size=CHUNK, shard_documents=shard_documents)
    assert all(shard.begin % CHUNK == 0 for shard in shards)
    random.Random(shard_documents or 0).shuffle(shards)  # completed in any order
    parts: list[ShardRanking] = []
    for shard in shards:
        ranking, stats = rank_shard(_encoder(submission), texts, ids, shard, query_vectors, K, folder=tmp_path, search_memory=SEARCH_MEMORY)
        assert stats.texts == shard.size
        assert len(ranking.doc_ids) <= min(shard.size, K * len(query_ids))  # only the documents it ranks travel back
        parts.append(ranking)
    assert list(tmp_path.iterdir()) == []  # every spool deleted
    merged = ranking_to_run(query_ids, merge_rankings(parts, K, len(query_ids)))

    assert merged.to_mapping() == whole.to_mapping()
    for query in query_ids:
        got, want = merged.ranking(query), whole.ranking(query)
        assert np.array([s for _, s in got]).tobytes() == np.array([s for _, s in want]).tobytes()
    measures = default_measures()
    sharded_eval, whole_eval = evaluate(qrels, merged, measures), evaluate(qrels, whole, measures)
    assert sharded_eval.per_query.query_ids == whole_eval.per_query.query_ids
    for measure in measures:
        assert sharded_eval.per_query.values[measure].tobytes() == whole_eval.per_query.values[measure].tobytes(), measure
    assert sharded_eval.means() == whole_eval.means()


def test_merge_of_any_partition_is_the_whole_search_with_ties() -> None:
    """Small-integer vectors: many exact ties and duplicate rows, split at random across parts."""
    rng = np.random.default_rng(5)
    corpus = rng.integers(-2, 3, size=(300, 6)).astype(np.float32)
    corpus[100:140] = corpus[:40]  # duplicate rows, to land in different parts
    queries = rng.integers(-2, 3, size=(25, 6)).astype(np.float32)
    ids = [f"doc-{n}" for n in rng.permutation(300)]
    from grader.runs.ordering import byte_order_ranks

    whole_scores, whole_docs = exact_top_k(queries, corpus, K, doc_ranks=byte_order_ranks(ids))
    labels = rng.integers(0, 4, size=300)
    parts = []
    for label in (3, 0, 2, 1):
        rows = np.flatnonzero(labels == label)
        part_ids = [ids[r] for r in rows]
        scores, docs = exact_top_k(queries, corpus[rows], K, doc_ranks=byte_order_ranks(part_ids))
        parts.append(ShardRanking(tuple(part_ids), scores, docs))
    merged = merge_rankings(parts, K, len(queries))
    assert merged.scores.tobytes() == whole_scores.tobytes()
    assert [[merged.doc_ids[d] for d in row] for row in merged.docs] == [[ids[d] for d in row] for row in whole_docs]


def test_a_shard_must_start_on_a_chunk_boundary(submission: Path, tmp_path: Path) -> None:
    texts, ids, *_ = _corpus()
    shard = plan_shards(texts, ids, chunk_size=CHUNK - 3, shard_documents=CHUNK - 3)[1]
    with pytest.raises(UsageError, match="not on a chunk boundary"):
        encode_shard(_encoder(submission), texts, ids, shard, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_plan_is_a_function_of_the_corpus_not_its_order() -> None:
    texts, ids, *_ = _corpus()
    plan = plan_shards(texts, ids, chunk_size=CHUNK, shard_documents=20)  # rounds up to 3 chunks
    assert [(s.begin, s.end) for s in plan] == [(0, 24), (24, 48), (48, 61)]
    shuffled = list(range(len(texts)))
    random.Random(2).shuffle(shuffled)
    again = plan_shards([texts[i] for i in shuffled], [ids[i] for i in shuffled], chunk_size=CHUNK, shard_documents=20)
    assert [[ids[r] for r in s.rows] for s in plan] == [[ids[shuffled[r]] for r in s.rows] for s in again]
    assert len(plan_shards(texts, ids, chunk_size=CHUNK, shard_documents=None)) == 1
    assert plan_shards([], [], chunk_size=CHUNK, shard_documents=8) == []


def test_spool_is_private_verified_and_deleted(submission: Path, tmp_path: Path) -> None:
    texts, ids, *_ = _corpus()
    shard = plan_shards(texts, ids, chunk_size=CHUNK, shard_documents=None)[0]
    encoded = encode_shard(_encoder(submission), texts, ids, shard, folder=tmp_path, search_memory=SEARCH_MEMORY)
    assert os.stat(encoded.spool.path).st_mode & 0o777 == 0o600
    assert encoded.spool.path.stat().st_size == encoded.spool.nbytes == len(texts) * 8 * 4
    with open(encoded.spool.path, "r+b") as handle:  # one bit flipped in the third block
        handle.seek(2 * 3 * 8 * 4 + 5)
        byte = handle.read(1)[0]
        handle.seek(-1, 1)
        handle.write(bytes([byte ^ 1]))
    blocks = encoded.spool.blocks()
    next(blocks), next(blocks)  # the first two blocks are intact
    with pytest.raises(TaskFailure) as failure:
        next(blocks)
    assert failure.value.code is FailureCode.INFRA and "block 2" in str(failure.value)
    encoded.spool.delete()
    assert not encoded.spool.path.exists()
