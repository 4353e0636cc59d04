"""``grader lint`` on a benchmark the test plants: every duplicate, copy, leak and broken id is made here.

Expected findings and shares are written down from what was planted, never read from the code under test.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from grader.data.benchmark import load_benchmark_folder
from grader.errors import VerificationError
from grader.integrity.lint import LintSettings
from grader.integrity.report import lint_benchmark
from grader.integrity.signing import sign_lint_report, verify_lint_envelope
from grader.reports.keys import write_keypair
from grader.schemas import first_error
from tests.cli_support import invoke

_OPS = ["+", "-", "*", "//", "%", "<<", ">>", "^", "|", "&"]


def unrelated_function(rng: random.Random, number: int) -> str:
    """A Python function of random shape: statements differ in operators and number literals, so no two share many shingles."""
    names = [f"v{number}_{i}" for i in range(6)]
    lines = [f"def func_{number}({names[0]}, {names[1]}):"]
    for _ in range(12):
        target, left, right = rng.choice(names), rng.choice(names), rng.choice(names)
        kind = rng.randrange(4)
        if kind == 0:
            lines.append(f"    {target} = {left} {rng.choice(_OPS)} {rng.randrange(1000)}")
        elif kind == 1:
            lines.append(f"    if {left} > {rng.randrange(1000)}: {target} = [{right}, {rng.randrange(1000)}]")
        elif kind == 2:
            lines.append(f"    for {target} in range({rng.randrange(1000)}, {left}): {right} += {rng.randrange(1000)}")
        else:
            lines.append(f"    {target} = {left}.get({right}, {rng.randrange(1000)}) {rng.choice(_OPS)} {rng.randrange(1000)}")
    lines.append(f"    return {names[2]} {rng.choice(_OPS)} {names[3]}")
    return "\n".join(lines)


def renamed(source: str, number: int) -> str:
    """``source`` with every identifier the generator made (``func_N``, ``vN_i``) renamed consistently."""
    return re.sub(r"\b(func|v)(\d+)", lambda m: f"{'compute' if m.group(1) == 'func' else 'value'}{number}x{m.group(2)}", source)


def write_benchmark(root, documents, queries, qrels):
    task = root / "planted"
    (task / "qrels").mkdir(parents=True)
    with open(task / "corpus.jsonl", "w", encoding="utf-8") as handle:
        for doc_id, text in documents.items():
            handle.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    with open(task / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query_id, text in queries.items():
            handle.write(json.dumps({"_id": query_id, "text": text}) + "\n")
    for split, judgements in qrels.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, d, g in judgements]
        (task / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """30 unrelated functions, plus: an exact copy (whitespace changed), a renamed copy, an empty and an oversized document."""
    rng = random.Random(7)
    documents = {f"d{i}": unrelated_function(rng, i) for i in range(30)}
    documents["exact_of_d1"] = "  " + documents["d1"].replace("\n", "\n\n  ") + "\n"
    documents["renamed_of_d2"] = renamed(documents["d2"], 99)
    documents["empty"] = " \n\t "
    documents["huge"] = "x = 1\n" * 200  # 1,199 characters once stripped (title + " " + text, stripped): oversized at max_chars=1000
    queries = {f"q{i}": f"what does function number {i} compute from its {i % 7} arguments" for i in range(10)}
    queries["t_leak"] = "sort a list of numbers in place and return it"
    queries["tr_leak"] = "Sort a   list of numbers in place and return it"  # not equal (case is kept), but a near copy (words are case-folded)
    queries["tr_same"] = "sort a list of numbers in place and return it"
    qrels = {
        # test: q0..q5 judge one document each; q6 judges the empty one; q7 the huge one; q8 a ghost document; t_leak d9.
        "test": [("q0", "d0", 1), ("q1", "d1", 1), ("q2", "d2", 2), ("q3", "d3", 1), ("q4", "d4", 1), ("q5", "d5", 1)]
        + [("q6", "empty", 1), ("q7", "huge", 1), ("q8", "ghost", 1), ("t_leak", "d9", 1), ("nobody", "d10", 1), ("q9", "d11", 1)],
        # train: q9 is judged in train too (same id); tr_same has t_leak's text exactly.
        "train": [("q9", "d12", 1), ("tr_same", "d13", 1), ("tr_leak", "d14", 1)],
    }
    root = write_benchmark(tmp_path_factory.mktemp("bench"), documents, queries, qrels)
    settings = LintSettings(max_chars=1000, examples=50)
    return root, lint_benchmark(load_benchmark_folder(root), None, settings)


def findings(report):
    (task,) = report["tasks"]
    return task, task["findings"]


def test_report_is_schema_valid_and_counts_test_queries(planted):
    _, report = planted
    assert first_error("lint", report) is None
    task, _ = findings(report)
    assert (task["documents"], task["queries"], task["test_queries"]) == (34, 13, 12)


def test_exact_copy_found_with_its_judged_query(planted):
    _, found = findings(planted[1])
    exact = found["exact_duplicate_documents"]
    assert exact["examples"] == [["d1", "exact_of_d1"]]
    assert (exact["count"], exact["test_queries"], exact["share"]) == (1, 1, 1 / 12)  # q1 judges d1


def test_renamed_copy_is_a_near_duplicate_and_unrelated_code_is_not(planted):
    _, found = findings(planted[1])
    near = found["near_duplicate_documents"]
    assert [example["documents"] for example in near["examples"]] == [["d2", "renamed_of_d2"]]
    assert near["examples"][0]["jaccard"] == 1.0  # a consistent renaming leaves the code view unchanged
    assert (near["count"], near["test_queries"]) == (1, 1)  # q2 judges d2
    (task,) = planted[1]["tasks"]
    assert task["clusters"] == [["d1", "exact_of_d1"], ["d2", "renamed_of_d2"]]


def test_relevant_document_with_a_duplicate_elsewhere(planted):
    _, found = findings(planted[1])
    relevant = found["relevant_document_duplicated"]
    assert [(e["query"], e["document"], e["duplicates"]) for e in relevant["examples"]] == [
        ("q1", "d1", ["exact_of_d1"]),
        ("q2", "d2", ["renamed_of_d2"]),
    ]
    assert relevant["share"] == 2 / 12


def test_cross_split_queries(planted):
    _, found = findings(planted[1])
    cross = found["cross_split_queries"]
    got = {(e["query"], e["other"], e["split"], e["match"]) for e in cross["examples"]}
    # t_leak equals tr_same once normalised; q9 is judged in both splits. tr_leak differs in case (kept) but is a near copy.
    assert ("q9", "q9", "train", "same id") in got
    assert any(q == "t_leak" and other in {"tr_same", "tr_leak"} for q, other, _, _ in got)
    assert {q for q, *_ in got} == {"q9", "t_leak"}
    assert cross["test_queries"] == 2


def test_empty_oversized_and_missing_ids(planted):
    _, found = findings(planted[1])
    assert found["empty_texts"]["examples"] == [{"kind": "document", "id": "empty"}]
    assert found["empty_texts"]["test_queries"] == 1  # q6
    assert found["oversized_texts"]["examples"] == [{"kind": "document", "id": "huge", "characters": 1199}]
    assert found["oversized_texts"]["test_queries"] == 1  # q7
    missing = found["missing_judged_ids"]
    assert {(e["query"], e["document"], tuple(e["missing"])) for e in missing["examples"]} == {
        ("q8", "ghost", ("document",)),
        ("nobody", "d10", ("query",)),
    }
    assert (missing["test_queries"], missing["share"]) == (2, 2 / 12)


def test_lowering_the_threshold_never_loses_a_pair(planted):
    root, report = planted
    lower = lint_benchmark(load_benchmark_folder(root), None, LintSettings(threshold=0.5, max_chars=1000, examples=50))
    high = {tuple(e["documents"]) for e in report["tasks"][0]["findings"]["near_duplicate_documents"]["examples"]}
    low = {tuple(e["documents"]) for e in lower["tasks"][0]["findings"]["near_duplicate_documents"]["examples"]}
    assert high <= low
    assert all(e["jaccard"] >= 0.5 for e in lower["tasks"][0]["findings"]["near_duplicate_documents"]["examples"])


def test_signed_report_verifies_and_a_changed_one_does_not(planted):
    _, report = planted
    key = Ed25519PrivateKey.generate()
    envelope = sign_lint_report(report, key)
    assert verify_lint_envelope(envelope, key.public_key()) == report
    with pytest.raises(VerificationError):
        verify_lint_envelope(envelope, Ed25519PrivateKey.generate().public_key())
    data = json.loads(envelope)
    data["payload"] = data["payload"][:-8] + ("A" * 8 if not data["payload"].endswith("A" * 8) else "B" * 8)
    with pytest.raises(VerificationError):
        verify_lint_envelope(json.dumps(data).encode(), key.public_key())


def test_cli_json_out_and_key(planted, tmp_path):
    root, _ = planted
    private, public = write_keypair(tmp_path / "keys")
    out = tmp_path / "lint.json"
    result = invoke("lint", root, "--json", "--max-chars", "1000", "--out", out, "--key", private)
    printed = json.loads(result.stdout)
    assert first_error("lint", printed) is None
    assert json.loads(out.read_text()) == printed
    from grader.reports.keys import load_public_key

    verified = verify_lint_envelope((tmp_path / "lint.dsse.json").read_bytes(), load_public_key(public))
    assert verified == printed
    table = invoke("lint", root, "--max-chars", "1000").stdout
    assert "near_duplicate_documents" in table and "1/12" in table
    assert invoke("lint", root, "--key", private, expect=2).stderr.startswith("error: --key needs --out")
