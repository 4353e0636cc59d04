"""hostile: output and stderr made to attack the grader's terminal, parser and report size.

Chosen by the `task` field of /input/task.json:

| task | what it does | exit |
|---|---|---|
| `ansi-stderr` | prints a line of terminal escapes on stderr: clear screen, cursor home, a fake "scored NDCG@10 = 0.9999" line, an OSC window title, an OSC 8 hyperlink | 1 |
| `deep` | run.jsonl whose first line nests 200,000 brackets deep in `hits` | 0 |
| `huge-id` | a valid run plus a line whose query_id is 900,000 characters (with escape codes) | 0 |
| `leak` | prints the first staged query's text on stderr (as a container exfiltrating hidden queries would) | 1 |
| `deep-score` | a run whose first score is a list nested 200,000 deep | 0 |
| `fuzz-N` | a run with one line broken by seeded random mutations (seed N): spliced NaN, deep brackets, duplicate keys, cut bytes, invalid UTF-8 | 0 |
| anything else | a valid run (every query: the first document) | 0 |
"""

import json
import random

from harness import empty_run, log, read_jsonl, read_task, write_bytes, write_run

ESC = "\x1b"
BEL = "\x07"
ANSI_LINE = (
    f"{ESC}[2J{ESC}[H"  # clear the screen, cursor home
    "alpha: scored NDCG@10 = 0.9999"  # a fake progress line
    f"{ESC}]0;grader: all tasks passed{BEL}"  # retitle the window
    f"{ESC}]8;;http://attacker.invalid/{BEL}click me{ESC}]8;;{BEL}"  # a hyperlink
    f"{ESC}[31m\u202e"  # colour and a bidi override
)


NASTY = ["NaN", "Infinity", "1e400", "1" * 5000, "[" * 100_000, "{" * 3000, "]", "}", '"\\ud800"', '"\x1b[2J"', "null", ",", ":", '"', "\x00"]


def fuzz_run(seed: int, queries: list[dict], corpus: list[dict]) -> bytes:
    rng = random.Random(seed)
    lines = [json.dumps({"query_id": q["_id"], "hits": [{"id": d["_id"], "score": rng.uniform(-1, 1)} for d in corpus[:3]]}) for q in queries]
    index = rng.randrange(len(lines))
    text = lines[index]
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(text))
        if rng.random() < 0.6:
            text = text[:at] + rng.choice(NASTY) + text[at:]
        elif rng.random() < 0.5:
            text = text[:at] + text[at + rng.randint(1, 10):]
        else:
            text = text.replace('"score": ', '"score": 1, "score": ', 1)
    lines[index] = text
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    if rng.random() < 0.2:
        data = data[: len(data) // 2] + b"\xff" + data[len(data) // 2 :]
    return data


def main() -> int:
    task = read_task()
    behaviour = task.get("task", "valid")
    queries = read_jsonl("queries.jsonl")
    corpus = read_jsonl("corpus.jsonl")
    if behaviour == "ansi-stderr":
        log(ANSI_LINE)
        return 1
    if behaviour == "leak":
        log(f"leaked: {queries[0]['text']}")
        return 1
    if behaviour.startswith("fuzz-"):
        write_bytes("run.jsonl", fuzz_run(int(behaviour.split("-", 1)[1]), queries, corpus))
        return 0
    if behaviour == "deep":
        depth = 200_000
        line = '{"query_id": "%s", "hits": %s%s}' % (queries[0]["_id"], "[" * depth, "]" * depth)
        write_bytes("run.jsonl", (line + "\n").encode("utf-8"))
        return 0
    if behaviour == "deep-score":
        depth = 200_000
        line = '{"query_id": "%s", "hits": [{"id": "%s", "score": %s1%s}]}' % (queries[0]["_id"], corpus[0]["_id"], "[" * depth, "]" * depth)
        write_bytes("run.jsonl", (line + "\n").encode("utf-8"))
        return 0
    runs = [(query["_id"], [(corpus[0]["_id"], 1.0)]) for query in queries]
    if behaviour == "huge-id":
        runs.append((f"{ESC}[2J" + "A" * 900_000, [(corpus[0]["_id"], 1.0)]))
    if not corpus:
        empty_run()
        return 0
    write_run(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
