"""The run digest a report carries per task: a canonical sha256 of the rankings as scored, under the real ids.

The digest (docs/reports.md, "The run digest") is the sha256 of this text, in UTF-8: one line per query of
the run, the queries in the byte order of their UTF-8 ids, each line the query id followed, for every
document of its ranking in rank order (trec order: score descending, then document id descending), by a
tab and the document id, and ended by a newline. A query with an empty ranking is its id alone.

It depends on the rankings only: not on the file or order the run came in, the threads that encoded it, the
shards it was searched in, nor on the scores themselves (a hosted server rebuilds scores that fall with the
rank; a strict-policy measure reads only the order). Ids never hold a tab or newline
(:data:`grader.data.ids.FORBIDDEN_ID_CHARACTERS`), so the text reads back one way only.
"""

from __future__ import annotations

import hashlib
from operator import itemgetter

from grader.runs.run import Run

#: The digest's scheme, named beside it in a report so that a later definition cannot be mistaken for this one.
SCHEME = "grader-run/v1"


def run_digest(run: Run) -> str:
    """The hex sha256 of ``run``'s canonical text (the module's definition)."""
    digest = hashlib.sha256()
    update = digest.update
    # Each document id is encoded once with its leading tab; a ranking is then one join of bytes (5M hits: about 1 s).
    # surrogatepass: an id read from a JSON escape may hold a lone surrogate; it is hashed as written, never refused here.
    vocab = [("\t" + doc_id).encode("utf-8", "surrogatepass") for doc_id in run.doc_vocab]
    offsets = run.offsets.tolist()
    codes = run.doc_codes.tolist()
    # Code-point order of str is the byte order of their UTF-8 (grader.runs.ordering.byte_order_ranks says why).
    for index in sorted(range(len(run.query_ids)), key=run.query_ids.__getitem__):
        update(run.query_ids[index].encode("utf-8", "surrogatepass"))
        start, end = offsets[index], offsets[index + 1]
        if end - start == 1:
            update(vocab[codes[start]])
        elif end > start:
            update(b"".join(itemgetter(*codes[start:end])(vocab)))
        update(b"\n")
    return digest.hexdigest()
