"""``grader data import-coir``: CoIR's parquet snapshot -> BEIR task folders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


from grader.data.benchmark import load_benchmark_folder  # noqa: E402
from grader.data.import_coir import _pyarrow, coir_benchmark_json, find_coir_tasks, import_coir  # noqa: E402
from grader.data.task import Document, Query, Task  # noqa: E402
from grader.data.writers import write_task  # noqa: E402
from grader.errors import DataError, GraderError, UsageError  # noqa: E402

QC_FIELDS = ("_id", "title", "partition", "text", "language", "meta_information")


def _write_parquet(path: Path, columns: dict[str, list]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _qc_columns(records: list[dict]) -> dict[str, list]:
    return {name: [r.get(name) for r in records] for name in QC_FIELDS}


def make_coir_task(
    src: Path,
    task: str,
    *,
    corpus: list[dict],
    queries: list[dict],
    qrels: dict[str, list[tuple]],
    prefix: str = "",
    data_dir: bool = True,
    corpus_shards: int = 1,
    score_type=None,
) -> None:
    """Write a CoIR-like snapshot of ``task`` under ``src``."""
    qc = src / f"{prefix}{task}-queries-corpus"
    qr = src / f"{prefix}{task}-qrels"
    if data_dir:
        qc, qr = qc / "data", qr / "data"
    n = corpus_shards
    size = -(-len(corpus) // n)
    for i in range(n):
        part = corpus[i * size : (i + 1) * size]
        _write_parquet(qc / f"corpus-{i:05d}-of-{n:05d}.parquet", _qc_columns(part))
    _write_parquet(qc / "queries-00000-of-00001.parquet", _qc_columns(queries))
    for split, rows in qrels.items():
        columns = {"query_id": [r[0] for r in rows], "corpus_id": [r[1] for r in rows], "score": [r[2] for r in rows]}
        table = pa.table(columns) if score_type is None else pa.table({**columns, "score": pa.array(columns["score"], type=score_type)})
        (qr).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, qr / f"{split}-00000-of-00001.parquet")


def doc(i: int, title: str | None = None) -> dict:
    return {
        "_id": f"c{i}",
        "title": title,
        "partition": "test",
        "text": f"def f{i}():\n    return {i}  # é",
        "language": "python",
        "meta_information": None,
    }


def query(i: int) -> dict:
    return {"_id": f"q{i}", "title": "", "partition": "test", "text": f"function number {i}", "language": "en", "meta_information": None}


def standard_task(src: Path, task: str = "cosqa", **kwargs) -> None:
    kwargs.setdefault("corpus", [doc(i, title="T" if i == 1 else None) for i in range(1, 7)])
    kwargs.setdefault("queries", [query(i) for i in range(1, 6)])
    kwargs.setdefault("qrels", {"test": [("q2", "c2", 1), ("q1", "c1", 1), ("q1", "c3", 0)], "valid": [("q3", "c3", 2)], "train": [("q4", "c4", 1)]})
    make_coir_task(src, task, **kwargs)


def qrels_dict(rows: list[tuple]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for qid, did, score in rows:
        out.setdefault(qid, {})[did] = int(score)
    return out


# ------------------------------------------------------------------ library


def test_import_round_trip(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src, prefix="CoIR-Retrieval__")
    lines: list[str] = []
    result = import_coir(src, dest, progress=lines.append)

    assert [s.task for s in result.imported] == ["cosqa"]
    assert len(lines) == 1 and lines[0].startswith("cosqa: 6 documents, 4 queries (1 unjudged dropped)")
    assert "apps" in result.missing and "cosqa" not in result.missing
    task = Task(dest / "cosqa")
    assert task.splits() == ["dev", "test", "train"]
    assert task.qrels("test").as_dict() == qrels_dict([("q2", "c2", 1), ("q1", "c1", 1), ("q1", "c3", 0)])
    assert task.qrels("dev").as_dict() == {"q3": {"c3": 2}}
    assert task.qrels("train").as_dict() == {"q4": {"c4": 1}}
    assert [q.id for q in task.iter_queries()] == ["q1", "q2", "q3", "q4"]  # q5 judged nowhere: dropped
    docs = list(task.iter_corpus())
    assert [d.id for d in docs] == [f"c{i}" for i in range(1, 7)]  # unjudged documents stay
    assert docs[0].title == "T" and docs[1].title == ""
    assert docs[0].text == "def f1():\n    return 1  # é"
    # only the BEIR fields, written as UTF-8 (not \u escapes)
    first = (dest / "cosqa" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[0]
    assert list(json.loads(first)) == ["_id", "title", "text"] and "é" in first
    assert list(json.loads((dest / "cosqa" / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])) == ["_id", "text"]
    # sorted qrels with BEIR's header
    assert (dest / "cosqa" / "qrels" / "test.tsv").read_text(encoding="utf-8") == "query-id\tcorpus-id\tscore\nq1\tc1\t1\nq1\tc3\t0\nq2\tc2\t1\n"
    # no staging left behind
    assert sorted(p.name for p in dest.iterdir()) == ["benchmark.json", "cosqa"]


def test_both_layouts_multishard_and_groups(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    corpus = [doc(i) for i in range(1, 11)]
    standard_task(src, "CodeSearchNet-go", corpus=corpus, corpus_shards=3)  # data/ folder, plain name
    standard_task(src, "CodeSearchNet-python", data_dir=False)  # files at the dataset root
    standard_task(src, "apps", prefix="CoIR-Retrieval__", data_dir=False)
    sources = find_coir_tasks(src)
    assert list(sources) == ["apps", "CodeSearchNet-go", "CodeSearchNet-python"]
    assert len(sources["CodeSearchNet-go"].corpus) == 3

    result = import_coir(src, dest)
    assert [s.task for s in result.imported] == ["apps", "CodeSearchNet-go", "CodeSearchNet-python"]
    assert [d.id for d in Task(dest / "CodeSearchNet-go").iter_corpus()] == [f"c{i}" for i in range(1, 11)]

    bench = load_benchmark_folder(dest)
    assert bench.spec.name == "coir"
    assert bench.spec.tasks == ("apps", "CodeSearchNet-go", "CodeSearchNet-python")
    assert dict(bench.spec.groups) == {"CodeSearchNet": ("CodeSearchNet-go", "CodeSearchNet-python")}
    assert bench.spec.primary_measure == "NDCG@10"
    assert bench.task("apps").qrels("test").n_judgements() == 3


def test_tasks_option_and_existing_tasks_kept_in_benchmark(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src, "cosqa")
    standard_task(src, "CodeSearchNet-ccr-go")
    result = import_coir(src, dest, tasks=["cosqa"])
    assert [s.task for s in result.imported] == ["cosqa"] and result.missing == []
    assert not (dest / "CodeSearchNet-ccr-go").exists()
    assert load_benchmark_folder(dest).spec.tasks == ("cosqa",)
    # a second import adds to the benchmark.json
    import_coir(src, dest, tasks=["codesearchnet-ccr-go"])
    spec = load_benchmark_folder(dest).spec
    assert spec.tasks == ("cosqa", "CodeSearchNet-ccr-go")
    assert dict(spec.groups) == {"CodeSearchNet-ccr": ("CodeSearchNet-ccr-go",)}
    with pytest.raises(UsageError, match="unknown CoIR task"):
        import_coir(src, tmp_path / "other", tasks=["nope"])
    with pytest.raises(DataError, match="'apps' not found"):
        import_coir(src, tmp_path / "other", tasks=["apps"])
    assert not (tmp_path / "other").exists()


def test_unknown_corpus_id_names_file_row_field_and_writes_nothing(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src, "apps")  # fine, but the whole import must fail
    standard_task(src, "cosqa", qrels={"test": [("q1", "c1", 1), ("q2", "c2", 1), ("q3", "c99", 1)]})
    with pytest.raises(DataError) as info:
        import_coir(src, dest)
    error = info.value
    assert error.path == str(src / "cosqa-qrels" / "data" / "test-00000-of-00001.parquet")
    assert error.line == 3 and error.field == "corpus_id"
    assert "c99" in str(error) and str(error).startswith(f"{error.path}:3: corpus_id: ")
    assert not dest.exists()  # created by the import, removed again

    dest.mkdir()
    with pytest.raises(DataError):
        import_coir(src, dest)
    assert list(dest.iterdir()) == []  # no task folder, no benchmark.json, no staging


def test_unknown_query_id(tmp_path: Path) -> None:
    src = tmp_path / "src"
    standard_task(src, qrels={"test": [("q1", "c1", 1)], "valid": [("q77", "c1", 1)]})
    with pytest.raises(DataError) as info:
        import_coir(src, tmp_path / "dest")
    assert info.value.field == "query_id" and info.value.line == 1
    assert info.value.path.endswith("valid-00000-of-00001.parquet")


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"qrels": {"test": [("q1", "c1", 1.5)]}, "score_type": pa.float64()}, "score", "integer"),
        ({"qrels": {"test": [("q1", None, 1)]}}, "corpus_id", "null"),
        ({"qrels": {"test": [("q1", "c1", 1), ("q1", "c1", 2)]}}, "corpus_id", "judged twice"),
        ({"corpus": [doc(1), doc(2), doc(1)]}, "_id", "duplicate document id"),
        ({"queries": [query(1), query(1)]}, "_id", "duplicate query id"),
        ({"corpus": [doc(1), {**doc(2), "_id": None}]}, "_id", "null"),
        ({"corpus": [doc(1), {**doc(2), "text": None}]}, "text", "expected a string"),
        ({"queries": [query(1), {**query(2), "_id": "a\tb"}]}, "_id", "tab"),
    ],
)
def test_invalid_data(tmp_path: Path, kwargs: dict, field: str, needle: str) -> None:
    src = tmp_path / "src"
    kwargs.setdefault("qrels", {"test": [("q1", "c1", 1)]})
    standard_task(src, **kwargs)
    with pytest.raises(DataError) as info:
        import_coir(src, tmp_path / "dest")
    assert info.value.field == field and needle in str(info.value)
    assert info.value.line is not None and info.value.path.endswith(".parquet")
    assert not (tmp_path / "dest").exists()


def test_integral_float_scores_integer_ids_and_repeats(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    make_coir_task(
        src,
        "cosqa",
        corpus=[doc(1), doc(2)],
        queries=[query(1), query(2)],
        qrels={"test": [("q1", "c1", 1.0), ("q2", "c2", 0.0), ("q1", "c1", 1.0)]},
        score_type=pa.float64(),
    )
    result = import_coir(src, dest)
    assert result.imported[0].repeated_judgements == 1
    assert (dest / "cosqa" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:] == ["q1\tc1\t1", "q2\tc2\t0"]

    src2 = tmp_path / "src2"
    qc = src2 / "cosqa-queries-corpus" / "data"
    _write_parquet(qc / "corpus-00000-of-00001.parquet", {"_id": [10, 11], "text": ["a", "b"]})  # no title column
    _write_parquet(qc / "queries-00000-of-00001.parquet", {"_id": [1], "text": ["q"]})
    _write_parquet(src2 / "cosqa-qrels" / "data" / "test-00000-of-00001.parquet", {"query_id": ["1"], "corpus_id": [11], "score": [1]})
    import_coir(src2, tmp_path / "dest2")
    task = Task(tmp_path / "dest2" / "cosqa")
    assert [(d.id, d.title) for d in task.iter_corpus()] == [("10", ""), ("11", "")]
    assert task.qrels("test").as_dict() == {"1": {"11": 1}}


def test_refuses_overwrite_unless_asked(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src)
    import_coir(src, dest)
    (dest / "cosqa" / "marker").write_text("old", encoding="utf-8")
    with pytest.raises(UsageError, match="exists already") as info:
        import_coir(src, dest)
    assert info.value.hint and "--overwrite" in info.value.hint
    assert (dest / "cosqa" / "marker").exists()
    import_coir(src, dest, overwrite=True)
    assert not (dest / "cosqa" / "marker").exists()
    assert Task(dest / "cosqa").qrels("test").n_judgements() == 3
    assert sorted(p.name for p in dest.iterdir()) == ["benchmark.json", "cosqa"]


def test_discovery_errors(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(DataError, match="no CoIR task found"):
        import_coir(src, tmp_path / "dest")
    with pytest.raises(DataError, match="source folder not found"):
        import_coir(tmp_path / "absent", tmp_path / "dest")
    _write_parquet(src / "cosqa-queries-corpus" / "data" / "corpus-00000-of-00001.parquet", _qc_columns([doc(1)]))
    _write_parquet(src / "cosqa-queries-corpus" / "data" / "queries-00000-of-00001.parquet", _qc_columns([query(1)]))
    with pytest.raises(DataError, match="no cosqa-qrels folder"):
        find_coir_tasks(src)
    _write_parquet(src / "cosqa-qrels" / "valid.parquet", {"query_id": ["q1"], "corpus_id": ["c1"], "score": [1]})
    _write_parquet(src / "cosqa-qrels" / "dev.parquet", {"query_id": ["q1"], "corpus_id": ["c1"], "score": [1]})
    with pytest.raises(DataError, match="would both become 'dev'"):
        find_coir_tasks(src)
    (src / "cosqa-qrels" / "dev.parquet").unlink()
    assert list(find_coir_tasks(src)["cosqa"].qrels) == ["valid"]


def test_missing_pyarrow_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(GraderError) as info:
        _pyarrow()
    assert info.value.hint == "pip install pyarrow"


def test_coir_benchmark_json_restricts_groups() -> None:
    data = coir_benchmark_json(["cosqa", "apps"])
    assert data["tasks"] == ["apps", "cosqa"] and "groups" not in data
    data = coir_benchmark_json(["CodeSearchNet-ruby", "CodeSearchNet-ccr-php"])
    assert data["groups"] == {"CodeSearchNet": ["CodeSearchNet-ruby"], "CodeSearchNet-ccr": ["CodeSearchNet-ccr-php"]}


# ------------------------------------------------------------------ writers


def test_write_task_is_atomic(tmp_path: Path) -> None:
    def documents():
        yield Document("d1", "", "x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_task(tmp_path / "t", documents(), [Query("q1", "y")], {"test": {"q1": {"d1": 1}}})
    assert list(tmp_path.iterdir()) == []

    write_task(tmp_path / "t", [Document("d1", "", "x")], [Query("q1", "y")], {"test": {"q1": {"d1": 1}}})
    with pytest.raises(UsageError):
        write_task(tmp_path / "t", [], [], {})
    with pytest.raises(DataError, match="tab"):
        write_task(tmp_path / "t", [Document("d\t1", "", "x")], [], {}, overwrite=True)
    assert Task(tmp_path / "t").qrels("test").as_dict() == {"q1": {"d1": 1}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


# ---------------------------------------------------------------------- CLI


def test_cli_import(grader_cli, tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src)
    result = grader_cli("data", "import-coir", str(src), str(dest))
    assert result.exit_code == 0, result.output
    assert "cosqa: 6 documents" in result.stderr
    assert "not found" in result.stderr and "apps" in result.stderr
    assert Task(dest / "cosqa").qrels("dev").as_dict() == {"q3": {"c3": 2}}
    assert load_benchmark_folder(dest).spec.tasks == ("cosqa",)


def test_cli_import_failure(grader_cli, tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    standard_task(src, qrels={"test": [("q1", "c404", 1)]})
    result = grader_cli("data", "import-coir", "--tasks", "cosqa", str(src), str(dest))
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "corpus_id" in lines[0] and "c404" in lines[0]
    assert not dest.exists()
