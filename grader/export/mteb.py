"""MTEB result files from a grading report of CoIR tasks (``grader export-mteb``).

MTEB (``mteb``, pinned at :data:`MTEB_VERSION`) holds CoIR's tasks under its own
names, at pinned dataset revisions, and writes one ``<TaskName>.json`` per task in
``results/<model name, "/" as "__">/<revision>/`` beside a ``model_meta.json``.
Its retrieval evaluator (``mteb._evaluators.retrieval_metrics``):

* retrieves the top 1000 documents of every query and evaluates at k = 1, 3, 5,
  10, 20, 100, 1000 with pytrec_eval (ties: score, then document id, descending;
  MRR is MTEB's own loop with the same order);
* averages over the queries it has results for (all judged queries: it answers
  every one), drops queries without judgements, and keeps a document whose id
  equals the query id (``ignore_identical_ids`` is false for every CoIR task);
* rounds NDCG, MAP, recall, precision and hit rate means to 5 decimals, and
  writes every score rounded to 6.

The grader's ``strict`` policy computes the same per-query values (trec_eval's
measures and tie order, every judged query counted), so a report's means equal
MTEB's when: the policy is ``strict`` (``coir`` drops identical ids and rounds
scores to float32), every judged query was answered (MTEB would average over the
answered ones only, the grader counts a missing one as 0), the task was graded on
MTEB's split, and the data is MTEB's dataset revision. The grader cannot see the
revision its data came from, so the person exporting must say so
(``assume_revisions``). Anything else is refused with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import InputError, UsageError

MTEB_VERSION = "2.26.24"
MTEB_K_VALUES = (1, 3, 5, 10, 20, 100, 1000)
MAIN_SCORE = "ndcg_at_10"
#: grader measure family -> (MTEB key prefix, rounded to 5 decimals by MTEB's evaluator)
FAMILIES = {
    "NDCG": ("ndcg_at_", True),
    "MAP": ("map_at_", True),
    "Recall": ("recall_at_", True),
    "P": ("precision_at_", True),
    "MRR": ("mrr_at_", False),
}
_MEASURE = re.compile(r"^(NDCG|MAP|Recall|P|MRR)@([0-9]+)$")


@dataclass(frozen=True)
class MtebTask:
    """Where a grader CoIR task lives in MTEB (as of :data:`MTEB_VERSION`)."""

    name: str
    hf_subset: str
    revision: str
    languages: tuple[str, ...]
    split: str = "test"


_CSN_LANGUAGES = ("go", "java", "javascript", "ruby", "python", "php")


def _per_language(prefix: str, task: str, revision: str) -> dict[str, MtebTask]:
    """CodeSearchNet(-ccr): one grader task per language, one MTEB task with a subset per language."""
    return {f"{prefix}-{lang}": MtebTask(task, lang, revision, (f"{lang}-Code",)) for lang in _CSN_LANGUAGES}


#: grader CoIR task -> MTEB task, read from ``mteb.get_task(name).metadata`` of the pinned version (the tests compare).
MTEB_TASKS: Mapping[str, MtebTask] = {
    "apps": MtebTask("AppsRetrieval", "default", "f22508f96b7a36c2415181ed8bb76f76e04ae2d5", ("eng-Latn", "python-Code")),
    "cosqa": MtebTask("CosQA", "default", "bc5efb7e9d437246ce393ed19d772e08e4a79535", ("eng-Latn", "python-Code")),
    "synthetic-text2sql": MtebTask("SyntheticText2SQL", "default", "686b87296c3a0191b5d9415a00526c62db9fce09", ("eng-Latn", "sql-Code")),
    **_per_language("CodeSearchNet", "COIRCodeSearchNetRetrieval", "4adc7bc41202b5c13543c9c886a25f340634dab3"),
    **_per_language("CodeSearchNet-ccr", "CodeSearchNetCCRetrieval", "6e1effa2c03723c5fde48ee912b5ee08d4f211e8"),
    "codetrans-dl": MtebTask("CodeTransOceanDL", "default", "281562cb8a1265ab5c0824bfa6ddcd9b0a15618f", ("python-Code",)),
    "codetrans-contest": MtebTask("CodeTransOceanContest", "default", "20da4eb20a4b17300c0986ee148c90867a7f2a4d", ("python-Code", "c++-Code")),
    "stackoverflow-qa": MtebTask("StackOverflowQA", "default", "7b46f5ebd2365278c1bb025986dda2fee893bbf5", ("eng-Latn",)),
    "codefeedback-st": MtebTask("CodeFeedbackST", "default", "d213819e87aab9010628da8b73ab4eb337c89340", ("eng-Latn",)),
    "codefeedback-mt": MtebTask("CodeFeedbackMT", "default", "b0f12fa0c0dd67f59c95a5c33d02aeeb4c398c5f", ("eng-Latn",)),
}

Say = Callable[[str], None]


def mteb_scores(measures: Mapping[str, float]) -> dict[str, float]:
    """MTEB's score keys from a task's grader measures, rounded as MTEB's evaluator and ``to_disk`` round them.

    Measures at a cut-off MTEB does not evaluate (or of a family it does not have) are left out.
    """
    scores: dict[str, float] = {}
    for measure, value in measures.items():
        match = _MEASURE.match(measure)
        if match is None or int(match.group(2)) not in MTEB_K_VALUES:
            continue
        prefix, five = FAMILIES[match.group(1)]
        scores[f"{prefix}{match.group(2)}"] = round(round(value, 5) if five else value, 6)
    if "recall_at_1" in scores:
        scores["accuracy"] = scores["recall_at_1"]  # MTEB reports recall@1 as "accuracy" too
    if MAIN_SCORE in scores:
        scores["main_score"] = scores[MAIN_SCORE]
    return dict(sorted(scores.items()))


def _refusal(task: str, entry: Mapping[str, Any], policy: Any, mteb: MtebTask) -> str | None:
    """Why the task's numbers cannot be MTEB's, or None."""
    if entry.get("status") != "scored":
        return f"task {task!r} was not scored (status {entry.get('status')!r})"
    if entry.get("split") != mteb.split:
        return f"task {task!r} was graded on split {entry.get('split')!r}; MTEB evaluates {mteb.name} on {mteb.split!r}"
    if policy != "strict":
        return (
            f"the report's policy is {policy!r}; MTEB keeps documents whose id equals the query id and uses the scores as given, "
            "as the grader's 'strict' policy does: regrade with --policy strict"
        )
    queries = entry.get("queries")
    if not isinstance(queries, Mapping) or not isinstance(queries.get("missing"), int):
        return f"task {task!r} has no query counts"
    if queries["missing"]:
        return (
            f"task {task!r}: {queries['missing']} judged queries got no ranking; the grader counts them as 0, "
            "MTEB (which answers every query) would not see them"
        )
    if "NDCG@10" not in entry.get("measures", {}):
        return f"task {task!r} lacks NDCG@10, MTEB's main score"
    return None


def _read_report(path: Path) -> dict[str, Any]:
    try:
        report = jsonio.load_file(path)
    except jsonio.JsonError as error:
        error.raise_as(InputError, path=path)
    except OSError as error:
        raise InputError(f"cannot read: {error}", path=path) from None
    if not isinstance(report, dict):
        raise InputError("expected a report object", path=path)
    if isinstance(report.get("payloadType"), str) and "payload" in report:
        raise InputError("is a signed envelope: verify it with `grader verify` and export the report.json it holds", path=path)
    for field in ("tasks", "subject", "benchmark"):
        if not isinstance(report.get(field), dict):
            raise InputError("missing or not an object", path=path, field=field)
    return report


def _safe_name(text: str) -> str:
    """A model name or revision as one path segment (MTEB writes '/' as '__')."""
    name = text.replace("/", "__")
    if not name or name in (".", "..") or "\\" in name or "\x00" in name:
        raise UsageError(f"{text!r} cannot name a results folder")
    return name


def export_mteb(
    report_path: str | Path,
    out: str | Path,
    *,
    assume_revisions: bool,
    model_name: str | None = None,
    revision: str | None = None,
    tasks: Sequence[str] | None = None,
    say: Say = lambda line: None,
) -> list[Path]:
    """Write MTEB result files for the report's CoIR tasks under ``out/results/...``; return the files written.

    Every selected task must pass the checks in the module docstring, or nothing is written.
    """
    report_path = Path(report_path)
    report = _read_report(report_path)
    subject = report["subject"]
    model_name = model_name or subject.get("name")
    digest = subject.get("digest", {}).get("sha256") if isinstance(subject.get("digest"), dict) else None
    revision = revision or digest
    if not isinstance(model_name, str) or not model_name:
        raise UsageError("the report's subject has no name: give --model-name")
    if not isinstance(revision, str) or not revision:
        raise UsageError("the report's subject has no digest: give --revision")
    graded = report["tasks"]
    names = list(tasks) if tasks else [name for name in graded if name in MTEB_TASKS]
    if not names:
        raise UsageError(f"{report_path} grades no CoIR task MTEB holds (MTEB's CoIR tasks: {', '.join(MTEB_TASKS)})")
    for name in names:
        if name not in MTEB_TASKS:
            raise UsageError(f"task {name!r} has no MTEB counterpart (MTEB's CoIR tasks: {', '.join(MTEB_TASKS)})")
        if name not in graded:
            raise UsageError(f"{report_path} did not grade task {name!r}")
        reason = _refusal(name, graded[name], report.get("policy"), MTEB_TASKS[name])
        if reason is not None:
            raise UsageError(f"cannot export to MTEB: {reason}")
    if not assume_revisions:
        revisions = ", ".join(sorted({f"{MTEB_TASKS[n].name}@{MTEB_TASKS[n].revision[:12]}" for n in names}))
        raise UsageError(
            "cannot export to MTEB: a report does not say which dataset revision its data came from, and MTEB's numbers are for "
            f"its pinned revisions ({revisions})",
            hint="import CoIR at exactly those revisions, then pass --assume-mteb-revisions to state it",
        )
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        mteb = MTEB_TASKS[name]
        entry = graded[name]
        scores = mteb_scores(entry["measures"])
        skipped = sorted(m for m in entry["measures"] if m not in _exported_measures(entry["measures"]))
        say(f"{name} -> {mteb.name} ({mteb.hf_subset}): {len(scores)} scores" + (f"; not in MTEB's set: {', '.join(skipped)}" if skipped else ""))
        by_task.setdefault(mteb.name, {})[mteb.hf_subset] = {**scores, "hf_subset": mteb.hf_subset, "languages": list(mteb.languages)}
    return _write(Path(out), model_name, revision, by_task, report_path, digest)


def _exported_measures(measures: Mapping[str, float]) -> set[str]:
    return {m for m in measures if (match := _MEASURE.match(m)) is not None and int(match.group(2)) in MTEB_K_VALUES}


def _write(
    out: Path, model_name: str, revision: str, by_task: Mapping[str, Mapping[str, dict[str, Any]]], report_path: Path, digest: str | None
) -> list[Path]:
    """All files in a temporary folder, then each renamed into ``out/results/<model>/<revision>/``."""
    folder = out / "results" / _safe_name(model_name) / _safe_name(revision)
    folder.mkdir(parents=True, exist_ok=True)
    revisions = {mteb.name: mteb.revision for mteb in MTEB_TASKS.values()}
    staging = Path(tempfile.mkdtemp(prefix=".export-mteb-", dir=folder))
    written: list[Path] = []
    try:
        files: dict[str, str] = {}
        for task, subsets in sorted(by_task.items()):
            result = {
                "dataset_revision": revisions[task],
                "task_name": task,
                "mteb_version": MTEB_VERSION,
                "scores": {"test": [dict(subsets[s], mteb_version=MTEB_VERSION) for s in sorted(subsets)]},
                "evaluation_time": None,
                "kg_co2_emissions": None,
                "date": None,
            }
            files[f"{task}.json"] = jsonio.dumps(result, indent=2, ensure_ascii=True) + "\n"
        meta_path = folder / "model_meta.json"
        if not meta_path.exists():
            files["model_meta.json"] = (
                jsonio.dumps(
                    {"name": model_name, "revision": revision, "grader_report": str(report_path), "grader_subject_digest": digest},
                    indent=2,
                    ensure_ascii=True,
                )
                + "\n"
            )
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
        for name in files:
            os.replace(staging / name, folder / name)
            written.append(folder / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written
