"""Tests of the bundled ``mini`` benchmark and of ``scripts/build_mini.py`` that builds it.

The first group checks the committed data (structure, judgements, sizes); the
second runs the builder on a tiny fake standard library and checks that it is
deterministic and cuts functions the way the task definitions say.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import jsonschema
import pytest

REPO = Path(__file__).resolve().parent.parent
MINI = REPO / "grader" / "bundled" / "mini"
SCRIPT = REPO / "scripts" / "build_mini.py"
SCHEMA = REPO / "grader" / "schemas" / "benchmark.schema.json"
TASKS = ("text2code", "code2code", "code2text")
SPLITS = ("train", "dev", "test")
HEADER = "query-id\tcorpus-id\tscore"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> list[tuple[str, str, str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == HEADER, f"{path}: bad header {lines[0]!r}"
    assert lines[-1] == "", f"{path}: must end with a newline"
    rows = [tuple(line.split("\t")) for line in lines[1:-1]]
    assert all(len(row) == 3 for row in rows), path
    return rows  # type: ignore[return-value]


def load_task(root: Path) -> tuple[dict[str, str], dict[str, dict], dict[str, list[tuple[str, str, str]]]]:
    """(queries id -> text, corpus id -> record, split -> qrels rows) of a task folder."""
    queries = {r["_id"]: r["text"] for r in read_jsonl_gz(root / "queries.jsonl.gz")}
    corpus = {r["_id"]: r for r in read_jsonl_gz(root / "corpus.jsonl.gz")}
    qrels = {split: read_qrels(root / "qrels" / f"{split}.tsv") for split in SPLITS}
    return queries, corpus, qrels


def normalize(text: str) -> str:
    return " ".join(text.casefold().split())


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def load_builder() -> ModuleType:
    """Import scripts/build_mini.py (not a package) as a module."""
    spec = importlib.util.spec_from_file_location("build_mini_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up in sys.modules while the class is created.
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


# ---------------------------------------------------------------------------
# (a) The committed benchmark data
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def definition() -> dict:
    return json.loads((MINI / "benchmark.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=TASKS)
def task(request: pytest.FixtureRequest) -> tuple[str, dict[str, str], dict[str, dict], dict[str, list[tuple[str, str, str]]]]:
    name = request.param
    return (name, *load_task(MINI / name))


def test_benchmark_json_is_valid(definition: dict) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validate(definition, schema)
    assert definition["name"] == "mini"
    assert definition["primary_measure"] == "NDCG@10"
    assert definition["default_split"] == "test"
    assert definition["tasks"] == list(TASKS)
    kinds = {name: info["kind"] for name, info in definition["task_info"].items()}
    assert kinds == {"text2code": "text-to-code", "code2code": "code-to-code", "code2text": "code-to-text"}


def test_every_file_is_present() -> None:
    for name in TASKS:
        for rel in ("corpus.jsonl.gz", "queries.jsonl.gz", *(f"qrels/{s}.tsv" for s in SPLITS)):
            assert (MINI / name / rel).is_file(), f"{name}/{rel}"
    assert (MINI / "README.md").is_file()


def test_qrels_reference_existing_ids_one_relevant_each(task) -> None:
    name, queries, corpus, qrels = task
    split_of: dict[str, str] = {}
    judged_docs: list[str] = []
    for split, rows in qrels.items():
        assert rows, f"{name}: split {split} is empty"
        for qid, did, score in rows:
            assert qid in queries, f"{name}/{split}: unknown query {qid}"
            assert did in corpus, f"{name}/{split}: unknown document {did}"
            assert score == "1"
            # One row per query overall: in one split only, one relevant document.
            assert qid not in split_of, f"{name}: query {qid} judged twice ({split_of.get(qid)}, {split})"
            split_of[qid] = split
            judged_docs.append(did)
    assert set(split_of) == set(queries), f"{name}: queries without judgements"
    # Each document answers exactly one query, and the corpus holds exactly the
    # answers of all splits.
    assert len(judged_docs) == len(set(judged_docs))
    assert set(judged_docs) == set(corpus)


def test_records_are_well_formed(task) -> None:
    name, queries, corpus, _ = task
    for doc_id, record in corpus.items():
        assert set(record) == {"_id", "title", "text"}
        assert record["title"] == "", f"{name}: title of {doc_id} must be empty (it would leak the answer)"
        assert record["text"].strip()
        assert len(record["text"]) <= 4000
        assert doc_id.startswith({"text2code": "t2c-d", "code2code": "c2c-d", "code2text": "c2t-d"}[name])
    for query_id, text in queries.items():
        assert text.strip()
        assert query_id.startswith({"text2code": "t2c-q", "code2code": "c2c-q", "code2text": "c2t-q"}[name])
    assert not set(queries) & set(corpus)


def test_no_duplicate_texts(task) -> None:
    name, queries, corpus, _ = task
    doc_keys = [normalize(r["text"]) for r in corpus.values()]
    query_keys = [normalize(t) for t in queries.values()]
    assert len(doc_keys) == len(set(doc_keys)), f"{name}: duplicate documents"
    assert len(query_keys) == len(set(query_keys)), f"{name}: duplicate queries"


class TextIndex:
    """Texts, searchable for the ones containing a given text.

    Every inner word of a text (all but its first and last, split on
    whitespace) is a whole word of any text that contains it, so only the
    texts holding its rarest inner word need a substring test.
    """

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.by_word: dict[str, list[int]] = {}
        for index, text in enumerate(texts):
            for word in set(text.split()):
                self.by_word.setdefault(word, []).append(index)
        # "\0" never occurs in a text, so no match spans two texts.
        self.joined = "\0".join(texts)

    def contains(self, text: str) -> bool:
        """Does some text of the index contain ``text``?"""
        inner = text.split()[1:-1]
        if not inner:
            return text in self.joined
        rarest = min(inner, key=lambda word: len(self.by_word.get(word, ())))
        return any(text in self.texts[index] for index in self.by_word.get(rarest, ()))


def texts_by_side(root: Path) -> dict[tuple[str, str], list[str]]:
    """(task, "train" or "held-out") -> the texts of its queries and judged documents."""
    result: dict[tuple[str, str], list[str]] = {}
    for name in TASKS:
        queries, corpus, qrels = load_task(root / name)
        for split in SPLITS:
            texts = result.setdefault((name, "train" if split == "train" else "held-out"), [])
            for qid, did, _ in qrels[split]:
                texts += [queries[qid], corpus[did]["text"]]
    return result


def equal_text_leaks(texts: dict[tuple[str, str], list[str]]) -> list[str]:
    """Train texts of any task that equal (after :func:`normalize`) a dev/test text of any task.

    The tasks share their functions: a function's code is a text2code document
    and a code2text query, its docstring a code2text document, its summary a
    text2code query.  A train text equal to a dev/test text means that a
    held-out function (or a copy of it) is in the training data.
    """
    held_out = {normalize(text) for name in TASKS for text in texts[name, "held-out"]}
    return [f"{name}: {text[:200]!r}" for name in TASKS for text in texts[name, "train"] if normalize(text) in held_out]


def inside_text_leaks(texts: dict[tuple[str, str], list[str]]) -> list[str]:
    """Texts of one task's train split inside a dev/test text of another task, or the reverse.

    code2code shows halves of a function: its train query (header + first
    half) or document (second half) lying inside another task's dev/test code
    means that function is held out there; a held-out text inside a train text
    leaks just as well.
    """
    indexes = {key: TextIndex(values) for key, values in texts.items()}
    found = []
    for name in TASKS:
        for other in TASKS:
            if other == name:
                continue
            for inner, outer in (("train", "held-out"), ("held-out", "train")):
                found += [
                    f"{name} {inner} inside {other} {outer}: {text[:200]!r}" for text in texts[name, inner] if indexes[other, outer].contains(text)
                ]
    return found


@pytest.fixture(scope="module")
def bundled_texts() -> dict[tuple[str, str], list[str]]:
    return texts_by_side(MINI)


def test_text_index_finds_contained_texts() -> None:
    index = TextIndex(["def f(x):\n    y = x + 1\n    return y", "Return the sum of the values."])
    assert index.contains("    y = x + 1\n    return y")
    assert index.contains("y = x + 1\n    ret")
    assert index.contains("the sum of")
    assert index.contains("sum")
    assert not index.contains("y = x + 2\n    return y")
    assert not index.contains("values.x")


def test_no_train_text_is_a_held_out_text(bundled_texts) -> None:
    leaks = equal_text_leaks(bundled_texts)
    assert not leaks, f"{len(leaks)} train texts are dev/test texts, e.g. {leaks[:3]}"


def test_no_train_text_inside_a_held_out_text_of_another_task(bundled_texts) -> None:
    leaks = inside_text_leaks(bundled_texts)
    assert not leaks, f"{len(leaks)} texts cross between train and dev/test, e.g. {leaks[:3]}"


def test_ids_give_no_hint(task) -> None:
    name, _, _, qrels = task
    rows = [row for split in SPLITS for row in qrels[split]]
    same = sum(1 for qid, did, _ in rows if qid.split("-")[1][1:] == did.split("-")[1][1:])
    # A random permutation has about one fixed point; an identity mapping has all.
    assert same <= 10, f"{name}: {same} query ids share their number with their document"


def test_sizes_and_split_fractions(task, definition: dict) -> None:
    name, _queries, corpus, qrels = task
    assert 2500 <= len(corpus) <= 6000, f"{name}: corpus of {len(corpus)}"
    counts = {split: len(rows) for split, rows in qrels.items()}
    total = sum(counts.values())
    assert abs(counts["train"] / total - 0.6) < 0.02
    assert abs(counts["dev"] / total - 0.1) < 0.02
    assert abs(counts["test"] / total - 0.3) < 0.02
    info = definition["task_info"][name]
    assert info["corpus_size"] == len(corpus)
    assert info["queries"] == counts


def test_task_specific_content(task) -> None:
    name, queries, corpus, qrels = task
    pairs = [(queries[q], corpus[d]["text"]) for split in SPLITS for q, d, _ in qrels[split]]
    if name == "text2code":
        for query, document in pairs:
            assert len(query.split()) >= 4 and "\n" not in query
            assert document.startswith(("def ", "async def "))
            assert '"""' + query not in document and "'''" + query not in document
    elif name == "code2text":
        for query, document in pairs:
            assert query.startswith(("def ", "async def "))
            assert document.strip() not in query  # the docstring was removed from the code
    else:
        for query, document in pairs:
            # Header + at least 3 of >= 6 body lines; the rest (>= 3 lines) is the document.
            assert query.startswith(("def ", "async def "))
            assert sum(1 for line in query.split("\n") if line.strip()) >= 4
            assert sum(1 for line in document.split("\n") if line.strip()) >= 3


def test_total_size_and_readme() -> None:
    total = sum(p.stat().st_size for p in MINI.rglob("*") if p.is_file())
    assert total < 6 * 1024 * 1024
    readme = (MINI / "README.md").read_text(encoding="utf-8")
    assert "https://docs.python.org/3/license.html" in readme
    assert "Python Software Foundation License Version 2" in readme
    assert "python scripts/build_mini.py" in readme


def test_data_loads_with_grader_reader() -> None:
    task_module = pytest.importorskip("grader.data.task")
    for name in TASKS:
        loaded = task_module.Task(MINI / name)
        assert loaded.splits() == sorted(SPLITS)
        assert sum(1 for _ in loaded.iter_corpus()) == sum(len(loaded.qrels(s)) for s in SPLITS)
        assert sum(1 for _ in loaded.iter_queries()) == sum(len(loaded.qrels(s)) for s in SPLITS)


# ---------------------------------------------------------------------------
# (b) The builder on a fake standard library
# ---------------------------------------------------------------------------

AREA_SUMMARY = "Compute the area of the rectangle in square units."
AREA_DOC_REST = "The result is never negative; degenerate rectangles give zero."

SHAPES = f'''\
"""Fake module with shapes."""

import math


class Rectangle:
    """A rectangle."""

    def area(self, scale=1):
        """{AREA_SUMMARY}

        {AREA_DOC_REST}
        """
        width = abs(self.width)
        height = abs(self.height)
        if scale != 1:
            width *= scale
            height *= scale
        result = width * height
        return max(result, 0)

    def short(self):
        """Return the short form of this rectangle."""
        return 1


def parse_size(text):
    """Parse a size such as 10x20 into a pair of integers.

    Raises ValueError for anything else.
    """
    left, sep, right = text.partition("x")
    if not sep:
        raise ValueError(text)
    width = int(left)
    height = int(right)
    if width < 0 or height < 0:
        raise ValueError(text)
    return width, height


def undocumented_walker(items):
    total = 0
    for item in items:
        if item is None:
            continue
        total += item
    seen = set(items)
    return total, len(seen)


def tiny(x):
    """Do it."""
    a = x
    b = a
    c = b
    return c
'''

UTILS = '''\
import sys

if sys.platform:
    def guarded_helper(values):
        """Sum the positive values of a sequence of numbers.

        Negative values are ignored.
        """
        total = 0
        for value in values:
            if value > 0:
                total += value
        count = len(values)
        return total, count


def parse_size(text):
    """Parse a size such as 10x20 into a pair of integers.

    Raises ValueError for anything else.
    """
    left, sep, right = text.partition("x")
    if not sep:
        raise ValueError(text)
    width = int(left)
    height = int(right)
    if width < 0 or height < 0:
        raise ValueError(text)
    return width, height
'''

SKIPPED = '''\
def skipped_marker_function(x):
    """This function must never appear in the benchmark data."""
    y = x + 1
    z = y + 1
    w = z + 1
    v = w + 1
    u = v + 1
    return u
'''


@pytest.fixture()
def fake_stdlib(tmp_path: Path) -> Path:
    root = tmp_path / "stdlib"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "shapes.py").write_text(SHAPES)
    (root / "utils.py").write_text(UTILS)
    (root / "broken.py").write_text("def oops(:\n    pass\n")
    for folder in ("test", "site-packages/thirdparty", "idlelib", "lib2to3", "tests"):
        (root / folder).mkdir(parents=True)
        (root / folder / "marker.py").write_text(SKIPPED)
    return root


def run_cli(stdlib: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--stdlib", str(stdlib)],
        capture_output=True,
        text=True,
        check=True,
    )


def pairs_of(out: Path, name: str) -> dict[str, str]:
    """query text -> relevant document text, over all splits."""
    queries, corpus, qrels = load_task(out / name)
    result = {}
    for split in SPLITS:
        for qid, did, _ in qrels[split]:
            result[queries[qid]] = corpus[did]["text"]
    return result


@pytest.mark.slow
def test_builder_is_byte_identical(fake_stdlib: Path, tmp_path: Path) -> None:
    run_cli(fake_stdlib, tmp_path / "out1")
    # The second build goes through main() in-process: same bytes either way.
    assert load_builder().main([str(tmp_path / "out2"), "--stdlib", str(fake_stdlib)]) == 0
    first, second = tree_bytes(tmp_path / "out1"), tree_bytes(tmp_path / "out2")
    assert sorted(first) == sorted(
        ["README.md", "benchmark.json"]
        + [f"{t}/{f}" for t in TASKS for f in ("corpus.jsonl.gz", "queries.jsonl.gz", "qrels/dev.tsv", "qrels/test.tsv", "qrels/train.tsv")]
    )
    assert first == second
    for rel, data in first.items():
        if rel.endswith(".gz"):
            # No timestamp (bytes 4-7) and no FNAME flag (bit 3 of byte 3).
            assert data[4:8] == b"\0\0\0\0", rel
            assert not data[3] & 0x08, rel


@pytest.mark.slow
def test_builder_cuts_functions_as_specified(fake_stdlib: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_cli(fake_stdlib, out)
    everything = b"".join(tree_bytes(out).values())
    for name in TASKS:
        for member in ("corpus.jsonl.gz", "queries.jsonl.gz"):
            everything += gzip.decompress((out / name / member).read_bytes())
    assert b"skipped_marker_function" not in everything  # test/, site-packages/, ... are skipped
    assert b"oops" not in everything

    t2c = pairs_of(out, "text2code")
    assert AREA_SUMMARY in t2c
    area_code = t2c[AREA_SUMMARY]
    assert area_code.startswith("def area(self, scale=1):\n    width = abs(self.width)\n")  # dedented, docstring gone
    assert "square units" not in area_code and AREA_DOC_REST not in area_code and '"""' not in area_code
    assert area_code.endswith("return max(result, 0)")
    # Too short (body / summary) or undocumented functions are no text2code queries.
    assert not any("def short" in doc or "def tiny" in doc or "undocumented_walker" in doc for doc in t2c.values())
    # A function guarded by a module-level ``if`` counts; the second copy of parse_size is dropped.
    assert "Sum the positive values of a sequence of numbers." in t2c
    assert sum("def parse_size" in doc for doc in t2c.values()) == 1
    assert "Parse a size such as 10x20 into a pair of integers." in t2c

    c2t = pairs_of(out, "code2text")
    assert c2t[area_code] == f"{AREA_SUMMARY}\n\n{AREA_DOC_REST}"

    c2c = pairs_of(out, "code2code")
    walker = [q for q in c2c if q.startswith("def undocumented_walker")]
    assert walker == ["def undocumented_walker(items):\n    total = 0\n    for item in items:\n        if item is None:"]
    assert c2c[walker[0]] == "        continue\n    total += item\nseen = set(items)\nreturn total, len(seen)"
    area_query = "def area(self, scale=1):\n    width = abs(self.width)\n    height = abs(self.height)\n    if scale != 1:"
    assert c2c[area_query] == "    width *= scale\n    height *= scale\nresult = width * height\nreturn max(result, 0)"

    definition = json.loads((out / "benchmark.json").read_text(encoding="utf-8"))
    jsonschema.validate(definition, json.loads(SCHEMA.read_text(encoding="utf-8")))
    assert definition["task_info"]["text2code"]["corpus_size"] == len(t2c)
    assert definition["task_info"]["code2code"]["corpus_size"] == len(c2c)


def test_builder_helpers() -> None:
    builder = load_builder()
    assert builder.summary("First line\ncontinues here.\n\nSecond paragraph.") == "First line continues here."
    assert builder.split_sizes(100) == {"train": 60, "dev": 10, "test": 30}
    assert builder.normalize("  A\tb\n C ") == "a b c"
    code = textwrap.dedent(
        '''\
        class K:
            def m(self):
                """Doc string here."""  # trailing comment
                return 1
        '''
    )
    tree = ast.parse(code)
    ((_, node),) = list(builder.iter_function_nodes(tree))
    function = builder.extract_function(code.split("\n"), node, "K.m")
    assert function is not None
    assert function.code == "def m(self):\n    return 1"
    assert function.docstring == "Doc string here."
    assert function.header_lines == 1


@pytest.mark.slow
def test_builder_ids_and_splits(tmp_path: Path) -> None:
    # 60 distinct, well-formed functions: enough for the id permutation and
    # split sizes to be checked.
    root = tmp_path / "stdlib"
    root.mkdir()
    functions = []
    for i in range(60):
        functions.append(
            f"def function_{i}(value):\n"
            f'    """Return value number {i} after {i} distinct transformation steps."""\n'
            f"    a = value + {i}\n    b = a * {i + 1}\n    c = b - {i + 2}\n"
            f"    d = c // {i + 3}\n    e = d % {i + 4}\n    return e\n"
        )
    (root / "many.py").write_text("\n\n".join(functions))
    out = tmp_path / "out"
    load_builder().build(out, root)
    for name in TASKS:
        queries, corpus, qrels = load_task(out / name)
        assert len(corpus) == len(queries) == 60
        assert {split: len(rows) for split, rows in qrels.items()} == {"train": 36, "dev": 6, "test": 18}
        # Files are ordered by id, so their order says nothing about the pairing.
        corpus_ids = [r["_id"] for r in read_jsonl_gz(out / name / "corpus.jsonl.gz")]
        assert corpus_ids == sorted(corpus_ids)
        rows = [row for split in SPLITS for row in qrels[split]]
        same = sum(1 for qid, did, _ in rows if qid.split("-")[1][1:] == did.split("-")[1][1:])
        assert same <= 5, f"{name}: document ids follow query ids"


def function_splits(out: Path) -> dict[str, set[tuple[str, str]]]:
    """Function name -> the (task, split) pairs it is in, for functions named ``def <name>(`` in every task's query or document."""
    found: dict[str, set[tuple[str, str]]] = {}
    for name in TASKS:
        queries, corpus, qrels = load_task(out / name)
        for split in SPLITS:
            for qid, did, _ in qrels[split]:
                code = queries[qid] if name != "text2code" else corpus[did]["text"]
                match = re.match(r"(?:async )?def (\w+)\(", code)
                assert match, code
                found.setdefault(match.group(1), set()).add((name, split))
    return found


@pytest.mark.slow
def test_builder_splits_by_function(tmp_path: Path) -> None:
    # 60 functions, each in all three tasks: split per task, a function would
    # almost surely be train in one task and dev or test in another.
    root = tmp_path / "stdlib"
    root.mkdir()
    (root / "many.py").write_text(
        "\n\n".join(
            f"def function_{i}(value):\n"
            f'    """Return value number {i} after {i} distinct transformation steps."""\n'
            f"    a = value + {i}\n    b = a * {i + 1}\n    c = b - {i + 2}\n"
            f"    d = c // {i + 3}\n    e = d % {i + 4}\n    return e\n"
            for i in range(60)
        )
    )
    out = tmp_path / "out"
    load_builder().build(out, root)
    splits = function_splits(out)
    assert len(splits) == 60
    for function, seen in splits.items():
        assert {task for task, _ in seen} == set(TASKS), function
        assert len({split for _, split in seen}) == 1, f"{function} is in several splits: {sorted(seen)}"
    train = {f for f, seen in splits.items() if ("text2code", "train") in seen or ("code2code", "train") in seen or ("code2text", "train") in seen}
    held_out = {f for f, seen in splits.items() if any(split != "train" for _, split in seen)}
    assert len(train) == 36 and len(held_out) == 24 and not train & held_out
    texts = texts_by_side(out)
    assert not equal_text_leaks(texts)
    assert not inside_text_leaks(texts)


@pytest.mark.slow
def test_builder_splits_copies_together(tmp_path: Path) -> None:
    # The same code in two modules: a.py's copy has a docstring too short for
    # text2code and code2text, so code2code keeps a.py's copy (first in source
    # order) and the other tasks keep b.py's.  The two are different functions
    # but one group, so they share their split.
    root = tmp_path / "stdlib"
    root.mkdir()
    bodies = [
        f"    total = {i}\n    for item in items:\n        total += item * {i + 1}\n"
        f"    if total > {i + 2}:\n        total -= {i + 3}\n    count = len(items) + {i}\n    return total, count\n"
        for i in range(40)
    ]
    (root / "a.py").write_text("\n\n".join(f'def checksum_{i}(items):\n    """Do it."""\n{body}' for i, body in enumerate(bodies)))
    (root / "b.py").write_text(
        "\n\n".join(f'def checksum_{i}(items):\n    """Return checksum number {i} of the given items."""\n{body}' for i, body in enumerate(bodies))
    )
    out = tmp_path / "out"
    load_builder().build(out, root)
    splits = function_splits(out)
    assert len(splits) == 40
    for function, seen in splits.items():
        assert {task for task, _ in seen} == set(TASKS), function
        assert len({split for _, split in seen}) == 1, f"{function} is in several splits: {sorted(seen)}"
    texts = texts_by_side(out)
    assert not equal_text_leaks(texts)
    assert not inside_text_leaks(texts)


GROUPS_ONE = '''\
def total(values):
    """Add up the values of a list of numbers."""
    result = 0
    for value in values:
        result += value
    if result < 0:
        result = 0
    return result


def same_summary(items):
    """Add up the values of a list of numbers.

    Items that are None count as zero.
    """
    acc = 0
    for item in items:
        acc += item or 0
    return acc


def quotes_a_summary(items):
    """Like total, this will add up the values of a list of numbers. Then it doubles them."""
    doubled = 0
    for item in items:
        doubled += 2 * item
    return doubled


def walk(tree):
    """Visit every node of the tree in depth-first order."""
    stack = [tree]
    seen = []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children)
    return seen


def holds_a_tail(tree, limit):
    """Collect the nodes of a tree up to a limit."""
    stack = [tree]
    seen = []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children)
    return seen[:limit]


def alone(text):
    """Split a text into words and count them by length."""
    counts = {}
    for word in text.split():
        size = len(word)
        counts[size] = counts.get(size, 0) + 1
    return counts
'''

GROUPS_TWO = '''\
class Copy:
    def total(values):
        """Sum some numbers, a copy in another module."""
        result = 0
        for value in values:
            result += value
        if result < 0:
            result = 0
        return result


def walk(tree):
    """Visit every node of the tree and then print the count."""
    stack = [tree]
    seen = []
    while stack:
        node = stack.pop()
        seen.append(node)
        stack.extend(node.children)
    print(len(seen))
    return seen
'''


def test_function_groups(tmp_path: Path) -> None:
    builder = load_builder()
    root = tmp_path / "stdlib"
    root.mkdir()
    (root / "one.py").write_text(GROUPS_ONE)
    (root / "two.py").write_text(GROUPS_TWO)
    functions = list(builder.iter_functions(root))
    groups = dict(zip((f.qualname for f in functions), builder.function_groups(functions)))
    assert len(groups) == len(functions) == 8
    # one.total: same code as two.Copy.total (dedented), same summary as
    # same_summary, its summary inside quotes_a_summary's docstring.
    total = groups["one.total"]
    assert groups["two.Copy.total"] == groups["one.same_summary"] == groups["one.quotes_a_summary"] == total == 0
    # one.walk: its code2code second half lies in holds_a_tail, its first half
    # (header included) in two.walk, the same function with a line added.
    walk = groups["one.walk"]
    assert groups["one.holds_a_tail"] == groups["two.walk"] == walk != total
    assert groups["one.alone"] not in (total, walk)
