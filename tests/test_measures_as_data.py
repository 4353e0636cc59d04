"""Measures and benchmarks as data: one spelling of a measure, one benchmark.json builder, one digest listing."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from grader.data.import_cat import cat_benchmark_json
from grader.data.import_coir import coir_benchmark_json
from grader.data.registry import REGISTERED, registered_definition
from grader.data.task import Task
from grader.files import listing_digest
from grader.metrics.measures import MEASURE_PATTERN, Family, Measure, parse_measure
from grader.schemas import SCHEMA_DIR


def _measure_patterns(node: Any) -> list[str]:
    """Every schema ``pattern`` that spells a measure (contains '@')."""
    found: list[str] = []
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if isinstance(pattern, str) and "@" in pattern:
            found.append(pattern)
        for value in node.values():
            found += _measure_patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += _measure_patterns(value)
    return found


@pytest.mark.parametrize("name", ["benchmark", "report"])
def test_schemas_spell_measures_as_the_measures_module_does(name: str) -> None:
    patterns = _measure_patterns(json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8")))
    assert patterns and set(patterns) == {MEASURE_PATTERN}


def test_every_family_round_trips_through_its_spelling() -> None:
    import re

    for family in Family:
        measure = Measure(family, 10)
        assert re.fullmatch(MEASURE_PATTERN, str(measure)) and parse_measure(str(measure)) == measure


@pytest.mark.parametrize(("name", "builder"), [("coir", coir_benchmark_json), ("cat", cat_benchmark_json)])
def test_importers_write_the_registered_definition_through_one_builder(name: str, builder: Any) -> None:
    every = registered_definition(name)["tasks"]
    chosen = every[1:3]
    assert builder(chosen) == registered_definition(name, chosen)
    assert registered_definition(name, chosen)["tasks"] == chosen
    assert set(REGISTERED) >= {name}


@pytest.mark.slow
def test_split_digest_is_the_sha256sum_recipe(small_task: Path) -> None:
    task = Task(small_task)
    names = ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]
    listing = "".join(f"{hashlib.sha256((small_task / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    assert task.split_digest("test") == hashlib.sha256(listing.encode()).hexdigest() == listing_digest((n, task.file_digests[n]) for n in names)
    if shutil.which("sha256sum"):
        printed = subprocess.run(["sha256sum", *names], cwd=small_task, check=True, capture_output=True).stdout
        assert task.split_digest("test") == hashlib.sha256(printed).hexdigest()
