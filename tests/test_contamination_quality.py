"""Quality of the contamination audit on planted sets the test makes itself (tests/contamination_support.py).

The source is disjoint from mini's tasks (synthetic functions over made-up identifiers, not the standard
library). Half of a pool of test items is copied into the training texts in disguise (every identifier
renamed, comments rewritten, whitespace changed, two adjacent statements swapped), among unrelated functions
of the same generator; the truth is which items the test copied. Recall is measured per length bucket (tokens
of the item, counted here with the test's own regex), and so is the false-positive rate over the items not
copied. Items under the window minimum (40 code tokens) are audited as statement sets, the hard case.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from grader.integrity.contamination import find_copies
from grader.integrity.sketch_build import build_sketch
from grader.integrity.sketch_text import MIN_CODE_TOKENS
from tests.contamination_support import disguised_copy, identifiers, snippet

#: (lowest, highest) tokens of each bucket; the first is below the windows' minimum (audited as statement sets).
BUCKETS = {"snippet": (0, MIN_CODE_TOKENS), "short": (MIN_CODE_TOKENS, 80), "medium": (80, 160), "long": (160, 10**6)}
_COMMENT = re.compile(r"#[^\n]*")
_IDENT_ANY = re.compile(r"\b(?!(?:return|range|while|for|if|in|def)\b)[A-Za-z_]\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|[^\w\s]")


def _tokens(text: str) -> int:
    return len(_TOKEN.findall(_COMMENT.sub(" ", text)))


def _planted(seed: int, items: int = 1200, unrelated: int = 3000) -> tuple[list[str], np.ndarray, list[str]]:
    rng = random.Random(seed)
    # Statement counts log-uniform in 2..40, so that every length bucket is well populated.
    pool = [snippet(rng, int(2 ** rng.uniform(1.0, 5.33))) for _ in range(items)]
    copied = np.zeros(items, dtype=bool)
    copied[rng.sample(range(items), items // 2)] = True
    training = [disguised_copy(pool[i], rng) for i in np.flatnonzero(copied)]
    other = random.Random(seed + 1)  # an independent stream: the unrelated functions share nothing with the pool
    training += [snippet(other, other.randint(2, 40)).render() for _ in range(unrelated)]
    random.Random(seed + 2).shuffle(training)
    return [item.render() for item in pool], copied, training


def test_disguised_copies_are_found_per_length_bucket_and_unrelated_code_is_not() -> None:
    texts, copied, training = _planted(seed=37)
    matches = find_copies(build_sketch(training), texts)
    lengths = np.array([_tokens(text) for text in texts])
    figures = {}
    for name, (low, high) in BUCKETS.items():
        inside = (lengths >= low) & (lengths < high)
        figures[name] = (int((inside & copied).sum()), float(matches.found[inside & copied].mean()), float(matches.found[inside & ~copied].mean()))
    # Every bucket is populated, so each figure below is measured, not vacuous.
    assert all(count >= 30 for count, _, _ in figures.values()), figures
    for name, (_, recall, false_positive_rate) in figures.items():
        assert recall >= 0.95 and false_positive_rate <= 0.01, (name, figures)
    # Every item (three statements or more) is audited: windows from 40 code tokens, statement sets below.
    assert matches.audited.all()


def test_the_disguise_renames_every_identifier_rewrites_comments_and_swaps_two_statements() -> None:
    rng = random.Random(4)
    for _ in range(200):
        item = snippet(rng, rng.randint(2, 20))
        copy = disguised_copy(item, rng)
        assert identifiers(copy).isdisjoint(identifiers(item.render()))
        assert set(_COMMENT.findall(copy)).isdisjoint(_COMMENT.findall(item.render()))
        # Statement lines, identifiers blanked: the copy's order differs from the original's (two were swapped),
        # unless the two swapped statements have the same shape.
        shapes = [
            re.sub(r"\s+", "", _IDENT_ANY.sub("v", line)) for line in item.render().splitlines() if line.strip() and not line.strip().startswith("#")
        ]
        copied = [re.sub(r"\s+", "", _IDENT_ANY.sub("v", line)) for line in copy.splitlines() if line.strip() and not line.strip().startswith("#")]
        assert sorted(shapes) == sorted(copied)
        assert shapes != copied or len(set(shapes[1:-1])) < len(shapes[1:-1])


def test_a_copy_without_its_disguise_and_the_disguise_alone_are_each_found() -> None:
    rng = random.Random(5)
    item = snippet(rng, 8)
    unrelated = [snippet(rng, 8).render() for _ in range(50)]
    exact = find_copies(build_sketch([item.render(), *unrelated]), [item.render()])
    disguised = find_copies(build_sketch([disguised_copy(item, rng), *unrelated]), [item.render()])
    absent = find_copies(build_sketch(unrelated), [item.render()])
    assert exact.found.tolist() == [True] and disguised.found.tolist() == [True] and absent.found.tolist() == [False]


@pytest.mark.parametrize("statements", [6, 24])
def test_an_item_copied_inside_a_long_training_file_is_found_through_its_window(statements: int) -> None:
    # A long training file is cut into windows of 256 tokens and fine windows of 80: an item of six statements
    # (about 70 tokens) fills enough of a fine one, an item of 24 (about 240) a window.
    rng = random.Random(9)
    item = snippet(rng, statements)
    # A long file: unrelated functions around a disguised copy of the item, far past one window (256 tokens).
    around = [snippet(rng, 10).render() for _ in range(12)]
    long_file = "\n".join(around[:6] + [disguised_copy(item, rng)] + around[6:])
    assert _tokens(long_file) > 4 * 256
    unrelated = snippet(random.Random(10), statements).render()
    matches = find_copies(build_sketch([long_file]), [item.render(), unrelated])
    assert matches.found.tolist() == [True, False]


def test_real_unrelated_code_touches_at_most_one_percent_of_minis_test_queries() -> None:
    # The grader's own functions are real Python unrelated to the standard library that mini is made of: sketched
    # as training data, they must leave (nearly) every test query of mini's text2code untouched.
    import ast
    from pathlib import Path

    from grader.data.registry import resolve_benchmark
    from grader.integrity.audit import audit_task

    functions = []
    for path in sorted((Path(__file__).resolve().parents[1] / "grader").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append(ast.get_source_segment(source, node) or "")
    assert len(functions) > 1000
    overlap = audit_task(resolve_benchmark("mini").task("text2code"), "test", build_sketch(functions))
    assert overlap.test_queries == 881 and overlap.audited_queries > 800
    assert overlap.touched <= 0.01 * overlap.test_queries, overlap
