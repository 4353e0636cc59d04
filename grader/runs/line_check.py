"""A fast structural check of one JSONL run line, equivalent to ``schemas/run.schema.json``.

jsonschema takes milliseconds on a line of 1,000 hits; a full CodeSearchNet run has
53,000 such lines. Lines that pass this check are exactly the lines the schema
accepts (a test compares the two on generated valid and invalid lines); a line
that fails is handed to jsonschema, so error messages still come from the schema.
"""

from __future__ import annotations

from typing import Any

_HIT_KEYS = frozenset({"id", "score"})
_LINE_KEYS = frozenset({"query_id", "hits"})


def is_valid_run_line(record: Any) -> bool:
    """Whether ``record`` satisfies the run-line schema."""
    if type(record) is not dict or record.keys() != _LINE_KEYS:
        return False
    query_id = record["query_id"]
    hits = record["hits"]
    if type(query_id) is not str or not query_id or type(hits) is not list:
        return False
    for hit in hits:
        if type(hit) is not dict or hit.keys() != _HIT_KEYS:
            return False
        doc_id = hit["id"]
        score = hit["score"]
        if type(doc_id) is not str or not doc_id or (type(score) is not float and type(score) is not int):
            return False
    return True
