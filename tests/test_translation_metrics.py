"""CAT's translation measures: CrystalBLEU-4 and METEOR (``grader score-translation``).

The WordNet-backed tests need WordNet 3.0 built by ``scripts/setup-wordnet.sh``.
Where it is absent they are skipped, except in CI (``CI=true``), where a missing
WordNet fails them.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections import Counter
from pathlib import Path

import crystalbleu  # runtime dependencies: a missing one fails, never skips
import nltk.translate.meteor_score as nltk_meteor
import pytest

from grader.errors import DataError, InputError, RunFormatError
from grader.translation import files as translation_files
from grader.translation.metrics import crystal_bleu, meteor, ngram_frequencies, tokenize, trivially_shared_ngrams
from grader.translation.scoring import IgnoredNGrams, score_files, score_translations
from grader.translation.wordnet import REQUIRED_FILES, WordNetUnavailable, load_wordnet

# The sentences of NLTK's meteor_score docstring (nltk/translate/meteor_score.py).
HYPOTHESIS1 = [
    "It",
    "is",
    "a",
    "guide",
    "to",
    "action",
    "which",
    "ensures",
    "that",
    "the",
    "military",
    "always",
    "obeys",
    "the",
    "commands",
    "of",
    "the",
    "party",
]
REFERENCE1 = ["It", "is", "a", "guide", "to", "action", "that", "ensures", "that", "the", "military", "will", "forever", "heed", "Party", "commands"]
REFERENCE2 = [
    "It",
    "is",
    "the",
    "guiding",
    "principle",
    "which",
    "guarantees",
    "the",
    "military",
    "forces",
    "always",
    "being",
    "under",
    "the",
    "command",
    "of",
    "the",
    "Party",
]
REFERENCE3 = ["It", "is", "the", "practical", "guide", "for", "the", "army", "always", "to", "heed", "the", "directions", "of", "the", "party"]

TRAIN = [
    "Module FunctionDef arguments arg Return Name",
    "Module FunctionDef arguments arg arg Return BinOp Name Add Name",
    "Module Expr Call Name Constant",
    "Module FunctionDef arguments Expr Call Attribute Name Load",
]


@pytest.fixture(scope="module")
def wordnet():
    """The offline WordNet reader; skipped when absent, failed when absent in CI."""
    try:
        return load_wordnet()
    except WordNetUnavailable as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"WordNet is required in CI (run scripts/setup-wordnet.sh before the tests): {error}")
        pytest.skip(f"WordNet 3.0 not set up (run scripts/setup-wordnet.sh): {error}")


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------ METEOR


def test_meteor_reproduces_nltk_docstring_with_offline_wordnet(wordnet) -> None:
    assert round(nltk_meteor.meteor_score([REFERENCE1, REFERENCE2, REFERENCE3], HYPOTHESIS1, wordnet=wordnet), 4) == 0.6944
    assert round(nltk_meteor.single_meteor_score(REFERENCE1, HYPOTHESIS1, wordnet=wordnet), 4) == 0.6944
    assert round(meteor(REFERENCE1, HYPOTHESIS1, wordnet), 4) == 0.6944
    assert round(meteor(["this", "is", "a", "cat"], ["non", "matching", "hypothesis"], wordnet), 4) == 0.0


@pytest.mark.parametrize(
    ("reference", "hypothesis", "expected"),
    [  # nltk/test/meteor.doctest (its word_tokenize splits these exactly as str.split does)
        ("The candidate has no alignment to any of the references", "John loves Mary", 0.0),
        ("The cat sat on the mat", "on the mat sat the cat", 0.5),
        ("The cat sat on the mat", "The cat was sat on the mat", 0.9654),
        ("create or update a vm set", "creates or updates a virtual machine scale set", 0.7806),
    ],
)
def test_meteor_reproduces_nltk_doctest(wordnet, reference: str, hypothesis: str, expected: float) -> None:
    assert round(meteor(reference.split(), hypothesis.split(), wordnet), 4) == expected


def test_meteor_same_sentence_close_to_one(wordnet) -> None:
    assert abs(meteor("The cat sat on the mat".split(), "The cat sat on the mat".split(), wordnet) - 0.9977) < 1e-2


def test_meteor_uses_wordnet_synonyms(wordnet) -> None:
    # "car" and "auto" share the synset car.n.01: one aligned word, one chunk. (NLTK looks
    # synonyms up after its stem stage, on Porter stems: "automobile" -> "automobil" would not match.)
    assert meteor(["auto"], ["car"], wordnet) == pytest.approx(0.5)

    class NoSynonyms:
        def synsets(self, word):
            return []

    assert meteor(["auto"], ["car"], NoSynonyms()) == 0.0


def test_meteor_matches_direct_nltk_call(wordnet) -> None:
    pairs = [
        ("Module FunctionDef arguments arg Return Name", "Module FunctionDef arguments Return Name Name"),
        ("the dog barks loudly at night", "a canine barked loud at nighttime"),
        ("Call Attribute Name Load", ""),
        ("x", "x y z"),
    ]
    for reference, hypothesis in pairs:
        direct = nltk_meteor.meteor_score([reference.split()], hypothesis.split(), wordnet=wordnet, alpha=0.9, beta=3, gamma=0.5)
        assert meteor(tokenize(reference), tokenize(hypothesis), wordnet) == direct


def test_never_downloads(wordnet, monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk

    def refuse(*args, **kwargs):
        raise AssertionError("nltk.download must not be called")

    monkeypatch.setattr(nltk, "download", refuse)
    monkeypatch.setattr(nltk.downloader, "download", refuse, raising=False)
    scores = score_translations({"a": "the dog runs"}, {"a": "a dog ran"}, wordnet=wordnet)
    assert 0 < scores.mean_meteor < 1


# --------------------------------------------------------------- WordNet missing


def test_wordnet_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WordNetUnavailable) as info:
        load_wordnet(tmp_path / "empty")
    message = str(info.value)
    assert str(tmp_path / "empty" / "corpora" / "wordnet") in message and "never downloads" in message
    assert "scripts/setup-wordnet.sh" in (info.value.hint or "")

    partial = tmp_path / "partial" / "corpora" / "wordnet"
    partial.mkdir(parents=True)
    for name in REQUIRED_FILES:
        if name not in ("lexnames", "data.noun"):
            (partial / name).write_text("", encoding="utf-8")
    with pytest.raises(WordNetUnavailable, match="missing lexnames, data.noun"):
        load_wordnet(tmp_path / "partial")


def test_wordnet_missing_fails_before_reading_files_and_via_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADER_NLTK_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(WordNetUnavailable, match="nowhere"):
        score_files(tmp_path / "absent.jsonl", tmp_path / "absent.jsonl")


def test_cli_wordnet_missing(grader_cli, tmp_path: Path) -> None:
    refs = _jsonl(tmp_path / "refs.jsonl", [{"query_id": "a", "reference": "x y"}])
    preds = _jsonl(tmp_path / "preds.jsonl", [{"query_id": "a", "prediction": "x y"}])
    result = grader_cli("score-translation", "--references", str(refs), "--predictions", str(preds), "--nltk-data", str(tmp_path / "empty"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: WordNet 3.0 is not usable at ")
    assert "hint: run scripts/setup-wordnet.sh" in result.stderr


# ------------------------------------------------------------------ CrystalBLEU


def _recipe_ngrams(targets: list[list[str]], k: int) -> dict:
    """The published CrystalBLEU recipe: Counter over all 1-4-grams, most_common(k) (per target)."""
    from nltk.util import ngrams

    all_ngrams = []
    for n in range(1, 5):
        for tokens in targets:
            all_ngrams.extend(ngrams(tokens, n))
    return dict(Counter(all_ngrams).most_common(k))


def test_trivially_shared_ngrams_follow_the_recipe() -> None:
    targets = [t.split() for t in TRAIN]
    for k in (0, 1, 5, 12, 500):
        assert trivially_shared_ngrams(targets, k) == _recipe_ngrams(targets, k)
        assert list(trivially_shared_ngrams(targets, k)) == list(_recipe_ngrams(targets, k))  # same tie order
    # ties (count 3) keep the counting order: unigrams by first appearance, then bigrams, then trigrams
    assert list(trivially_shared_ngrams(targets, 8)) == [
        ("Name",), ("Module",), ("FunctionDef",), ("arguments",), ("arg",),
        ("Module", "FunctionDef"), ("FunctionDef", "arguments"), ("Module", "FunctionDef", "arguments"),
    ]  # fmt: skip
    counts = ngram_frequencies(targets)
    assert counts[("Name",)] == 5 and counts[("Module",)] == 4 and counts[("Module", "FunctionDef")] == 3
    # nothing spans two targets
    assert counts[("Name", "Module")] == 0


def test_crystal_bleu_by_hand() -> None:
    # unigrams without "a": b c d f -> 3/4; bigrams 3/4; trigrams 2/3; 4-grams 1/2; equal lengths: BP 1
    expected = (3 / 4 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25
    assert crystal_bleu("a b c d e".split(), "a b c d f".split(), {("a",)}) == pytest.approx(expected, rel=1e-12)
    # all hypothesis unigrams ignored -> 0
    assert crystal_bleu(["a", "b"], ["a", "a"], {("a",)}) == 0.0
    assert crystal_bleu(["a", "b"], [], None) == 0.0


def test_crystal_bleu_matches_direct_library_calls() -> None:
    from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

    targets = [t.split() for t in TRAIN]
    ignoring = _recipe_ngrams(targets, 10)
    pairs = [
        (
            "Module FunctionDef arguments arg Return BinOp Name Add Name Constant",
            "Module FunctionDef arguments arg Return BinOp Name Sub Name Constant",
        ),
        ("Module Expr Call Attribute Name Load Constant Constant", "Module Expr Call Attribute Name Load Constant"),
        (" ".join(HYPOTHESIS1), " ".join(REFERENCE1)),
        ("a b c", "a b c"),
    ]
    for reference, hypothesis in pairs:
        ref, hyp = reference.split(), hypothesis.split()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the library warns about 0 n-gram overlaps
            direct = crystalbleu.sentence_bleu([ref], hyp, ignoring=ignoring)
        assert crystal_bleu(ref, hyp, frozenset(ignoring)) == direct
        # without an ignore list it is NLTK's own sentence BLEU-4, unsmoothed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NLTK warns about 0 n-gram overlaps
            plain = nltk_sentence_bleu([ref], hyp)
        assert crystal_bleu(ref, hyp, None) == pytest.approx(plain, rel=1e-12, abs=1e-300)


def test_ignored_ngrams_from_text_and_jsonl(tmp_path: Path) -> None:
    text = tmp_path / "train.txt"
    text.write_text("\n".join(TRAIN[:2]) + "\n\n" + "\n".join(TRAIN[2:]) + "\n", encoding="utf-8")
    jsonl = _jsonl(tmp_path / "train.jsonl", [{"reference": t, "other": 1} for t in TRAIN])
    from_text = IgnoredNGrams.from_file(text, 7)
    from_jsonl = IgnoredNGrams.from_file(jsonl, 7)
    assert from_text.ngrams == from_jsonl.ngrams == frozenset(_recipe_ngrams([t.split() for t in TRAIN], 7))
    assert from_text.targets == from_jsonl.targets == 4
    _jsonl(tmp_path / "bad.jsonl", [{"reference": "x"}, {"target": "y"}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: reference: missing field"):
        IgnoredNGrams.from_file(tmp_path / "bad.jsonl")


# ------------------------------------------------------------------ scoring


def test_score_translations_means_missing_and_unknown(wordnet) -> None:
    references = {"a": "Module FunctionDef arguments arg Return Name", "b": "Module Expr Call Name Constant", "c": "Module Pass"}
    predictions = {"a": "Module FunctionDef arguments arg Return Name", "b": "Module Expr Call Name"}
    ignored = IgnoredNGrams(ngrams=frozenset(_recipe_ngrams([t.split() for t in TRAIN], 3)), k=3, source="-", sha256="-", targets=4)
    scores = score_translations(references, predictions, ignored=ignored, wordnet=wordnet)
    assert scores.bleu_measure == "CrystalBLEU-4"
    assert [s.query_id for s in scores.per_query] == ["a", "b", "c"]
    assert scores.count == 3 and scores.missing == 1
    by_id = {s.query_id: s for s in scores.per_query}
    assert by_id["c"].missing and by_id["c"].bleu == 0.0 and by_id["c"].meteor == 0.0
    for qid in ("a", "b"):
        ref, hyp = references[qid].split(), predictions[qid].split()
        assert by_id[qid].bleu == crystalbleu.sentence_bleu([ref], hyp, ignoring=ignored.ngrams)
        assert by_id[qid].meteor == nltk_meteor.meteor_score([ref], hyp, wordnet=wordnet, alpha=0.9, beta=3, gamma=0.5)
    assert scores.mean_bleu == pytest.approx((by_id["a"].bleu + by_id["b"].bleu) / 3)
    assert scores.mean_meteor == pytest.approx((by_id["a"].meteor + by_id["b"].meteor) / 3)
    plain = score_translations(references, predictions, wordnet=wordnet)
    assert plain.bleu_measure == "BLEU-4" and plain.as_json()["bleu"]["ignored_ngrams"] is None
    assert "BLEU-4" in plain.as_json()["measures"] and "CrystalBLEU-4" not in plain.as_json()["measures"]
    with pytest.raises(InputError, match="unknown query ids: 'zz'"):
        score_translations(references, {"zz": "x"}, wordnet=wordnet)


# ------------------------------------------------------------------ readers


@pytest.mark.parametrize(
    ("line", "field", "what"),
    [
        ('{"query_id": "b", "prediction": 5}', "/prediction", "5 is not of type 'string'"),
        ('{"query_id": "b"}', "/prediction", "'prediction' is a required property"),
        ('{"prediction": "x"}', "/query_id", "'query_id' is a required property"),
        ('{"query_id": "", "prediction": "x"}', "/query_id", "should be non-empty"),
        ('{"query_id": "b", "prediction": "x", "score": 1}', "/", "Additional properties are not allowed"),
        ('{"query_id": "a", "prediction": "x"}', "/query_id", "predicted twice (first on line 1)"),
        ('{"query_id": "b\\tc", "prediction": "x"}', "/query_id", "tab"),
        ('{"query_id": "b", "prediction": "x"', None, "invalid JSON"),
        ('{"query_id": "b", "query_id": "c", "prediction": "x"}', None, "appears twice"),
    ],
)
def test_malformed_predictions_name_file_line_field(tmp_path: Path, line: str, field: str | None, what: str) -> None:
    path = tmp_path / "predictions.jsonl"
    path.write_text('{"query_id": "a", "prediction": "x y"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(RunFormatError) as info:
        translation_files.read_predictions(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: {field}: " if field else f"{path}:3: "), message
    assert what in message


def test_references_reader(tmp_path: Path) -> None:
    good = _jsonl(tmp_path / "refs.jsonl", [{"query_id": "b", "reference": "x y", "code": "ignored"}, {"query_id": "a", "reference": "z"}])
    assert translation_files.read_references(good) == {"b": "x y", "a": "z"}
    for records, pattern in [
        (
            [{"query_id": "a", "reference": "x"}, {"query_id": "a", "reference": "y"}],
            r":2: query_id: query 'a' has two references \(first on line 1\)",
        ),
        ([{"query_id": "a", "reference": "  "}], r":1: reference: reference has no tokens"),
        ([{"query_id": "a"}], r":1: reference: missing field"),
        ([{"id": "a", "reference": "x"}], r":1: query_id: missing field"),
        ([], r"no references"),
    ]:
        path = _jsonl(tmp_path / "bad.jsonl", records)
        with pytest.raises(DataError, match=pattern):
            translation_files.read_references(path)


# ---------------------------------------------------------------------- CLI


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    refs = _jsonl(
        tmp_path / "refs.jsonl",
        [{"query_id": "a", "reference": TRAIN[0]}, {"query_id": "b", "reference": TRAIN[1]}, {"query_id": "c", "reference": "Module Pass"}],
    )
    preds = _jsonl(
        tmp_path / "preds.jsonl",
        [{"query_id": "b", "prediction": "Module FunctionDef arguments arg Return BinOp Name Sub Name"}, {"query_id": "a", "prediction": TRAIN[0]}],
    )
    train = tmp_path / "train.txt"
    train.write_text("\n".join(TRAIN[2:]) + "\n", encoding="utf-8")
    return refs, preds, train


def test_cli_json_and_per_query(grader_cli, wordnet, tmp_path: Path) -> None:
    refs, preds, train = _files(tmp_path)
    per_query = tmp_path / "pq.tsv"
    args = [
        "score-translation",
        "--references",
        str(refs),
        "--predictions",
        str(preds),
        "--train-targets",
        str(train),
        "--ignore-top",
        "4",
        "--per-query",
        str(per_query),
        "--json",
    ]
    result = grader_cli(*args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["references"] == 3 and data["predicted"] == 2 and data["missing_predictions"] == 1
    assert data["bleu"]["ignored_ngrams"]["k"] == 4 and data["bleu"]["ignored_ngrams"]["ignored"] == 4
    assert data["bleu"]["smoothing"] is None and data["meteor"]["alpha"] == 0.9
    ignoring = _recipe_ngrams([t.split() for t in TRAIN[2:]], 4)
    expected_bleu = {
        qid: crystalbleu.sentence_bleu([r.split()], h.split(), ignoring=ignoring)
        for qid, r, h in [("a", TRAIN[0], TRAIN[0]), ("b", TRAIN[1], "Module FunctionDef arguments arg Return BinOp Name Sub Name")]
    }
    assert data["per_query"]["a"]["CrystalBLEU-4"] == expected_bleu["a"]
    assert data["per_query"]["b"]["CrystalBLEU-4"] == expected_bleu["b"]
    assert data["per_query"]["c"] == {"CrystalBLEU-4": 0.0, "METEOR": 0.0, "missing": True}
    assert data["measures"]["CrystalBLEU-4"] == pytest.approx(math.fsum(expected_bleu.values()) / 3)
    assert data["measures"]["METEOR"] == pytest.approx(math.fsum(v["METEOR"] for v in data["per_query"].values()) / 3)
    rows = per_query.read_text(encoding="utf-8").splitlines()
    assert rows[0] == "query_id\tCrystalBLEU-4\tMETEOR\tmissing" and rows[3].startswith("c\t0.0\t0.0\t1")


def test_cli_text_without_train_targets(grader_cli, wordnet, tmp_path: Path) -> None:
    refs, preds, _ = _files(tmp_path)
    result = grader_cli("score-translation", "--references", str(refs), "--predictions", str(preds))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("BLEU-4  ") and lines[1].startswith("METEOR  ")
    assert "3 references, 2 predicted, 1 missing (scored 0)" in result.stdout
    assert "no n-grams ignored" in result.stdout


def test_cli_malformed_prediction_line(grader_cli, wordnet, tmp_path: Path) -> None:
    refs, _, _ = _files(tmp_path)
    preds = tmp_path / "bad.jsonl"
    preds.write_text('{"query_id": "a", "prediction": "x"}\n{"query_id": "b", "prediction": null}\n', encoding="utf-8")
    result = grader_cli("score-translation", "--references", str(refs), "--predictions", str(preds))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"error: {preds}:2: /prediction: None is not of type 'string'"]


def test_cli_unknown_query_id(grader_cli, wordnet, tmp_path: Path) -> None:
    refs, _, _ = _files(tmp_path)
    preds = _jsonl(tmp_path / "p.jsonl", [{"query_id": "a", "prediction": "x"}, {"query_id": "zz", "prediction": "x"}])
    result = grader_cli("score-translation", "--references", str(refs), "--predictions", str(preds))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[0].startswith(f"error: {preds}:2: /query_id: unknown query id 'zz'")
