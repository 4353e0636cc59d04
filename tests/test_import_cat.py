"""``grader data import-cat``: CAT's cleaned JSONL splits -> BEIR task folders (pool = the test split)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from grader.data.benchmark import load_benchmark_folder
from grader.data.import_cat import cat_benchmark_json, find_cat_datasets, import_cat, split_files
from grader.data.task import Task
from grader.errors import DataError, UsageError


def record(i: int | str, *, comment: str | None = None, code: str | None = None) -> dict:
    return {
        "id": i,
        "raw_code": f"def RAW_{i}():  pass",
        "raw_comment": f"RAW comment {i}",
        "code": code if code is not None else f"def f{i}():\n    return {i}  # é",
        "comment": comment if comment is not None else f"return the number {i}",
    }


def write_jsonl(path: Path, records: list[dict], *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if gz:
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def make_dataset(
    src: Path, name: str, *, test: list[dict], train: list[dict] | None = None, valid: list[dict] | None = None, folders: bool = True, shards: int = 1
) -> Path:
    """Write a CAT dataset: ``<split>/part-N.jsonl`` (``folders``) or ``<split>.jsonl``."""
    root = src / name
    for split, records in (("train", train), ("valid", valid), ("test", test)):
        if records is None:
            continue
        if folders:
            size = -(-len(records) // shards) if records else 0
            for n in range(shards):
                write_jsonl(root / split / f"part-{n}.jsonl", records[n * size : (n + 1) * size])
        else:
            write_jsonl(root / f"{split}.jsonl", records)
    return root


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["_id"] for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------ library


def test_round_trip_pool_is_the_test_split(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(
        src,
        "TLC",
        train=[record(i) for i in range(100, 104)],
        valid=[record(i) for i in range(200, 202)],
        test=[record(i) for i in range(5)],
        shards=2,
    )
    lines: list[str] = []
    result = import_cat(src, dest, progress=lines.append)

    assert [s.task for s in result.imported] == ["tlc"]  # folder name matched without case
    assert result.missing == ["csn", "funcom", "pcsd"]
    assert len(lines) == 1 and lines[0].startswith("tlc: 5 test records from 2 file(s)")
    task = Task(dest / "tlc")
    assert task.splits() == ["test"]  # train/valid are not imported
    docs = list(task.iter_corpus())
    assert [d.id for d in docs] == [f"c-{i}" for i in range(5)]  # only test code: the pool
    assert docs[0].text == "def f0():\n    return 0  # é" and docs[0].title == ""
    queries = list(task.iter_queries())
    assert [(q.id, q.text) for q in queries] == [(f"q-{i}", f"return the number {i}") for i in range(5)]
    assert task.qrels("test").as_dict() == {f"q-{i}": {f"c-{i}": 1} for i in range(5)}
    assert (dest / "tlc" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[:2] == ["query-id\tcorpus-id\tscore", "q-0\tc-0\t1"]
    # cleaned fields only, UTF-8 as is
    first = (dest / "tlc" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert "RAW" not in first and "é" in first
    # benchmark.json: the registered cat spec restricted to what is there
    bench = load_benchmark_folder(dest)
    assert bench.spec.name == "cat" and bench.spec.tasks == ("tlc",)
    assert bench.spec.primary_measure == "MRR@1000" and bench.spec.default_split == "test"
    assert result.benchmark_tasks == ("tlc",)
    assert sorted(p.name for p in dest.iterdir()) == ["benchmark.json", "tlc"]  # no staging left


def test_single_file_layout_gzip_and_string_ids(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    write_jsonl(src / "csn" / "test.jsonl.gz", [record("a/1"), record("b 2")], gz=True)
    make_dataset(src, "pcsd", test=[record(7)], folders=False)
    result = import_cat(src, dest)
    assert [s.task for s in result.imported] == ["csn", "pcsd"]
    assert _ids(dest / "csn" / "corpus.jsonl") == ["c-a/1", "c-b 2"]
    assert Task(dest / "pcsd").qrels("test").as_dict() == {"q-7": {"c-7": 1}}
    assert load_benchmark_folder(dest).spec.tasks == ("csn", "pcsd")  # registered order


def test_same_id_in_query_and_document_is_prefixed(tmp_path: Path) -> None:
    # BEIR-style retrievers drop a hit whose id equals the query id: the prefixes keep them apart.
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "funcom", test=[record(1)])
    import_cat(src, dest)
    (qid,) = [q.id for q in Task(dest / "funcom").iter_queries()]
    (did,) = [d.id for d in Task(dest / "funcom").iter_corpus()]
    assert qid != did and qid.removeprefix("q-") == did.removeprefix("c-") == "1"


def test_task_selection_and_existing_tasks_kept_in_benchmark(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "tlc", test=[record(1)])
    make_dataset(src, "csn", test=[record(2)])
    first = import_cat(src, dest, tasks=["CSN"])
    assert [s.task for s in first.imported] == ["csn"] and first.missing == []
    second = import_cat(src, dest, tasks=["tlc"])
    assert second.benchmark_tasks == ("tlc", "csn")  # csn already in DEST stays listed
    with pytest.raises(UsageError, match="exists already"):
        import_cat(src, dest, tasks=["tlc"])
    make_dataset(src, "tlc", test=[record(1), record(3)])
    import_cat(src, dest, tasks=["tlc"], overwrite=True)
    assert _ids(dest / "tlc" / "corpus.jsonl") == ["c-1", "c-3"]
    with pytest.raises(UsageError, match="unknown CAT dataset 'nope'"):
        import_cat(src, dest, tasks=["nope"])
    with pytest.raises(DataError, match="'funcom' not found"):
        import_cat(src, dest, tasks=["funcom"])


def test_find_and_split_files_errors(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with pytest.raises(DataError, match="source folder not found"):
        find_cat_datasets(src)
    src.mkdir()
    with pytest.raises(DataError, match="no CAT dataset found"):
        import_cat(src, tmp_path / "dest")
    root = make_dataset(src, "tlc", test=[record(1)])
    write_jsonl(root / "test.jsonl", [record(1)])
    with pytest.raises(DataError, match="both as the folder test/ and as test.jsonl"):
        split_files(root, "test")
    empty = src / "csn" / "test"
    empty.mkdir(parents=True)
    with pytest.raises(DataError, match="no .jsonl file"):
        split_files(src / "csn", "test")
    (src / "pcsd").mkdir()
    write_jsonl(src / "pcsd" / "train.jsonl", [record(1)])
    with pytest.raises(DataError, match="no 'test' split") as info:
        import_cat(src, tmp_path / "dest", tasks=["pcsd"])
    assert str(src / "pcsd") in str(info.value)
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize(
    ("line", "field", "what"),
    [
        ('{"code": "x", "comment": "y"}', "id", "missing field"),
        ('{"id": 1.5, "code": "x", "comment": "y"}', "id", "string or integer id, got float"),
        ('{"id": true, "code": "x", "comment": "y"}', "id", "got bool"),
        ('{"id": "", "code": "x", "comment": "y"}', "id", "must not be empty"),
        ('{"id": "a\\tb", "code": "x", "comment": "y"}', "id", "tab"),
        ('{"id": 2, "comment": "y"}', "code", "missing field"),
        ('{"id": 2, "code": "x", "comment": null}', "comment", "expected a string, got null"),
        ('{"id": 2, "code": ["x"], "comment": "y"}', "code", "got list"),
        ('{"id": 1, "code": "x", "comment": "y"}', "id", "duplicate id '1'"),
        ('{"id": 2, "code": "x",', None, "invalid JSON"),
        ("[1, 2]", None, "expected a JSON object"),
    ],
)
def test_bad_record_names_file_line_field_and_writes_nothing(tmp_path: Path, line: str, field: str | None, what: str) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "tlc", test=[record(0)])  # a good dataset converted first...
    bad = write_jsonl(src / "tlc" / "test" / "part-0.jsonl", [record(0), record(1)])
    make_dataset(src, "csn", test=[record(5)])
    with bad.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    with pytest.raises(DataError) as info:
        import_cat(src, dest)
    message = str(info.value)
    expected = f"{bad}:3: {field}: " if field else f"{bad}:3: "
    assert message.startswith(expected), message
    assert what in message
    assert not dest.exists()  # ...and still nothing is written


def test_failure_keeps_existing_dest_untouched(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "tlc", test=[record(1)])
    import_cat(src, dest)
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    make_dataset(src, "csn", test=[record(2)])
    write_jsonl(src / "tlc" / "test" / "part-0.jsonl", [record(1), {"id": 9, "code": "x"}])
    with pytest.raises(DataError, match="comment"):
        import_cat(src, dest, overwrite=True)
    after = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in dest.iterdir()) == ["benchmark.json", "tlc"]


def test_empty_texts_are_kept_and_counted(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "tlc", test=[record(1, comment="  "), record(2, code="")])
    lines: list[str] = []
    import_cat(src, dest, progress=lines.append)
    assert "1 empty comment(s)" in lines[0] and "1 empty code field(s)" in lines[0]
    assert [q.text for q in Task(dest / "tlc").iter_queries()] == ["  ", "return the number 2"]


def test_empty_test_split_is_an_error(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "tlc").mkdir(parents=True)
    (src / "tlc" / "test.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no records"):
        import_cat(src, dest)
    assert not dest.exists()


def test_cat_benchmark_json_is_valid_and_restricted() -> None:
    data = cat_benchmark_json(["pcsd", "tlc"])
    assert data["tasks"] == ["tlc", "pcsd"] and data["name"] == "cat"
    assert "groups" not in data


# ---------------------------------------------------------------------- CLI


def test_cli_import(grader_cli, tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_dataset(src, "tlc", test=[record(i) for i in range(3)])
    result = grader_cli("data", "import-cat", str(src), str(dest))
    assert result.exit_code == 0, result.output
    assert "tlc: 3 test records" in result.stderr
    assert "not found" in result.stderr and "funcom" in result.stderr
    assert load_benchmark_folder(dest).spec.tasks == ("tlc",)
    again = grader_cli("data", "import-cat", "--tasks", "tlc", str(src), str(dest))
    assert again.exit_code == 2 and "--overwrite" in again.stderr
    replaced = grader_cli("data", "import-cat", "--tasks", "tlc", "--overwrite", str(src), str(dest))
    assert replaced.exit_code == 0, replaced.output


def test_cli_import_failure_is_one_error_line(grader_cli, tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    bad = write_jsonl(src / "tlc" / "test.jsonl", [record(1), {"id": 2, "code": 3, "comment": "c"}])
    result = grader_cli("data", "import-cat", str(src), str(dest))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {bad}:2: code: expected a string, got int"]
    assert not dest.exists()
