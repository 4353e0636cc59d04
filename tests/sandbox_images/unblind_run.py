"""Map a run written under pseudonyms back to the real ids, by hand (the grader does it itself).

Stdlib only, the partner of ``stage_input.py``:

    python tests/sandbox_images/unblind_run.py IN.ids.tsv OUT/run.jsonl run.jsonl
    grader score --qrels TASK/qrels/test.tsv --run run.jsonl

IN.ids.tsv is the way back ``stage_input.py`` wrote beside IN (pseudonym, tab, the
real id as JSON). Each line of the run keeps its scores; its ``query_id`` and every
hit's ``id`` become the real ids. An id that was not staged stops with its line
number: grading would call the run ``OUTPUT_INVALID``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _ids(path: Path) -> dict[str, str]:
    real = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            pseudonym, value = line.rstrip("\n").split("\t", 1)
            real[pseudonym] = json.loads(value)
    return real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ids", type=Path)
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    real = _ids(args.ids)
    lines = []
    with open(args.run, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            try:
                record["query_id"] = real[record["query_id"]]
                for hit in record["hits"]:
                    hit["id"] = real[hit["id"]]
            except (KeyError, TypeError) as error:
                raise SystemExit(f"unblind_run: {args.run}:{number}: an id that was not staged, or no query_id/hits ({error!r})") from None
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    args.out.write_text("".join(lines), encoding="utf-8")
    print(f"{len(lines)} queries mapped back to their real ids -> {args.out}")


if __name__ == "__main__":
    main()
