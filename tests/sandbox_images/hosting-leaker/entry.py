"""hosting-leaker: print every query (id and text) on stderr, the last line being a query; exit 2.

A submission trying to carry hidden queries out of the sandbox through its logs:
the grader shows the last stderr line and the logs only for public sample-split runs.
"""

from harness import log, read_jsonl, read_task

task = read_task()
log(f"hosting-leaker: split {task.get('split')!r}")
for query in read_jsonl("queries.jsonl"):
    log(f"LEAK {query['_id']}: {query['text']}")
raise SystemExit(2)
