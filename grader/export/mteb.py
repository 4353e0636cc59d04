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
  writes every score rounded to 6;
* adds ``hit_rate_at_k`` (pytrec_eval's ``success``: a relevant document in the
  top k) and 105 ``nauc_*`` keys (how well each query's top score, score spread
  and top-two gap predict its per-query NDCG, MAP, recall, precision and MRR).

The grader's ``strict`` policy computes the same per-query values (trec_eval's
measures and tie order, every judged query counted), so a report's means equal
MTEB's when: the policy is ``strict`` (``coir`` drops identical ids and rounds
scores to float32), every judged query was answered (MTEB would average over the
answered ones only, the grader counts a missing one as 0), the task was graded on
MTEB's split, and the data is MTEB's dataset revision. The grader cannot see the
revision its data came from, so the person exporting must say so
(``assume_revisions``). The rankings must also be as deep as MTEB's: the report's
``ranking.top_k`` (``grader run --top-k``) at least 1000; a report without it
(an older grader's) is refused rather than guessed.

Of MTEB's extra keys, a report determines exactly ``hit_rate_at_1`` (success@1 is
P@1 query by query) and ``hit_rate_at_k`` for the cut-off k of the report's
per-query measure (each of NDCG, MAP, recall, precision and MRR at k is positive
exactly when a relevant document is in the top k), and ``hit_rate_at_k`` for each
``Success@k`` the report measures (the same mean of trec_eval's success). Other hit
rates need per-query values a report does not hold, and every nAUC needs the retrieval scores of each
query's ranking, which no report holds: :data:`NOT_EXPORTED` says so, and the
export prints it. Anything else is refused with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import jsonio
from grader.errors import InputError, UsageError
from grader.files import read_bounded
from grader.metrics.measures import Family, Measure, printed_measure

MTEB_VERSION = "2.26.24"
MTEB_K_VALUES = (1, 3, 5, 10, 20, 100, 1000)
MAIN_SCORE = "ndcg_at_10"
#: grader measure family -> (MTEB key prefix, rounded to 5 decimals by MTEB's evaluator)
FAMILIES: dict[Family, tuple[str, bool]] = {
    Family.NDCG: ("ndcg_at_", True),
    Family.MAP: ("map_at_", True),
    Family.RECALL: ("recall_at_", True),
    Family.P: ("precision_at_", True),
    Family.MRR: ("mrr_at_", False),
    Family.SUCCESS: ("hit_rate_at_", True),  # pytrec_eval's success, as MTEB computes its hit rate
}
#: MTEB retrieves this many documents per query; a shallower ranking changes its deepest measures.
MTEB_DEPTH = max(MTEB_K_VALUES)
#: What MTEB's files hold that an export cannot, and why (printed by every export).
NOT_EXPORTED = (
    "nauc_* (MTEB's abstention scores need the retrieval scores of each query's ranking, which a report does not hold); "
    "hit_rate_at_k beyond @1 and the per-query measure's cut-off (each needs per-query values of a measure at k, "
    "and a report holds only its primary measure's), unless the benchmark measures Success@k"
)
_ELSEWHERE = "remove it, or export into another --out"
#: An existing task file larger than this was not written by an export (one holds a few kB).
_MAX_RESULT_BYTES = 1 << 20


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


def mteb_scores(measures: Mapping[str, float], per_query: Mapping[str, Any] | None = None) -> dict[str, float]:
    """MTEB's score keys from a task's grader measures, rounded as MTEB's evaluator and ``to_disk`` round them.

    Measures at a cut-off MTEB does not evaluate (or of a family it does not have) are left out. The hit
    rates a report determines are added: ``hit_rate_at_1`` from P@1, and from ``per_query`` (the task's
    ``per_query`` entry, values of every evaluated query) the hit rate at its measure's cut-off.
    """
    scores: dict[str, float] = {}
    for k, rate in _hit_rates(measures, per_query).items():
        scores[f"hit_rate_at_{k}"] = round(round(rate, 5), 6)
    for name, value in measures.items():
        measure = _mteb_measure(name)
        if measure is None:
            continue
        prefix, five = FAMILIES[measure.family]
        scores[f"{prefix}{measure.cutoff}"] = round(round(value, 5) if five else value, 6)
    if "recall_at_1" in scores:
        scores["accuracy"] = scores["recall_at_1"]  # MTEB reports recall@1 as "accuracy" too
    if MAIN_SCORE in scores:
        scores["main_score"] = scores[MAIN_SCORE]
    return dict(sorted(scores.items()))


def _hit_rates(measures: Mapping[str, float], per_query: Mapping[str, Any] | None) -> dict[int, float]:
    """Hit rates (pytrec_eval's ``success@k``, a relevant document in the top k) that a report determines exactly.

    A document is relevant when its judgement is >= 1, and only relevant documents have positive gain, so:
    success@1 equals P@1 query by query; and each of NDCG, MAP, Recall, P and MRR at k is positive
    exactly when success@k is 1. Their means give no other hit rate.
    """
    rates: dict[int, float] = {}
    if "P@1" in measures:
        rates[1] = measures["P@1"]
    if isinstance(per_query, Mapping) and isinstance(per_query.get("values"), Mapping) and isinstance(per_query.get("measure"), str):
        measure = _mteb_measure(per_query["measure"])
        values = list(per_query["values"].values())
        if measure is not None and values and all(isinstance(v, (int, float)) for v in values):
            # as MTEB sums pytrec_eval's 0.0/1.0 successes and divides by the number of queries
            rates[measure.cutoff] = sum(1.0 if v > 0 else 0.0 for v in values) / len(values)
    return rates


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
    if queries.get("answered") != queries.get("judged"):
        # a host's public-part report (labels.part) scores a share of the judged queries, counted over the whole run
        return (
            f"task {task!r} scores {queries.get('judged')!r} of the {queries.get('answered')!r} answered queries "
            "(a report of part of the queries); MTEB scores them all"
        )
    if "NDCG@10" not in entry.get("measures", {}):
        return f"task {task!r} lacks NDCG@10, MTEB's main score"
    return None


#: Largest report file read (a grader's own report.json is a few megabytes at most: per-query values of its tasks).
MAX_REPORT_BYTES = 64 << 20


def _read_report(path: Path) -> tuple[dict[str, Any], str]:
    """The report at ``path`` and the sha256 of its bytes (the one read: what ``model_meta.json`` names)."""
    raw = read_bounded(path, MAX_REPORT_BYTES, lambda reason: InputError(reason, path=path), what="report")
    try:
        report = jsonio.loads(raw)
    except jsonio.JsonError as failure:
        failure.raise_as(InputError, path=path)
    if type(report) is not dict:
        raise InputError("expected a report object", path=path)
    if isinstance(report.get("payloadType"), str) and "payload" in report:
        raise InputError("is a signed envelope: verify it with `grader verify` and export the report.json it holds", path=path)
    for field in ("tasks", "subject", "benchmark"):
        if not isinstance(report.get(field), dict):
            raise InputError("missing or not an object", path=path, field=field)
    return report, hashlib.sha256(raw).hexdigest()


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
    report, report_sha256 = _read_report(report_path)
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
    depth_problem = _depth_refusal(report)
    if depth_problem is not None:
        raise UsageError(f"cannot export to MTEB: {depth_problem}", hint=f"grade again with `grader run` and --top-k {MTEB_DEPTH} (the default)")
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
        scores = mteb_scores(entry["measures"], _complete_per_query(entry))
        skipped = sorted(m for m in entry["measures"] if m not in _exported_measures(entry["measures"]))
        say(f"{name} -> {mteb.name} ({mteb.hf_subset}): {len(scores)} scores" + (f"; not in MTEB's set: {', '.join(skipped)}" if skipped else ""))
        by_task.setdefault(mteb.name, {})[mteb.hf_subset] = {**scores, "hf_subset": mteb.hf_subset, "languages": list(mteb.languages)}
    say(f"not exported: {NOT_EXPORTED}")
    return _write(Path(out), model_name, revision, by_task, (report_path, report_sha256), digest, say)


def _depth_refusal(report: Mapping[str, Any]) -> str | None:
    """Why the report's rankings may be shallower than MTEB's top 1000, or None."""
    ranking = report.get("ranking")
    top_k = ranking.get("top_k") if isinstance(ranking, Mapping) else None
    if not isinstance(top_k, int) or isinstance(top_k, bool):
        return (
            "the report does not record its ranking depth (--top-k; reports of older graders lack ranking.top_k), "
            f"and MTEB's @{MTEB_DEPTH} measures need rankings of {MTEB_DEPTH} documents"
        )
    if top_k < MTEB_DEPTH:
        return (
            f"the report's rankings were cut at --top-k {top_k}; MTEB ranks {MTEB_DEPTH} documents per query "
            f"and its @{MTEB_DEPTH} measures would differ"
        )
    return None


def _complete_per_query(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The task's per-query values when they cover every judged query (MTEB's denominator), else None."""
    per_query = entry.get("per_query")
    queries = entry.get("queries")
    if not isinstance(per_query, Mapping) or not isinstance(per_query.get("values"), Mapping) or not isinstance(queries, Mapping):
        return None
    return per_query if len(per_query["values"]) == queries.get("judged") else None


def _mteb_measure(name: str) -> Measure | None:
    """The measure a report key names, if MTEB evaluates it (its family, at one of MTEB's cut-offs)."""
    measure = printed_measure(name)
    return measure if measure is not None and measure.family in FAMILIES and measure.cutoff in MTEB_K_VALUES else None


def _exported_measures(measures: Mapping[str, float]) -> set[str]:
    return {name for name in measures if _mteb_measure(name) is not None}


def _write(
    out: Path,
    model_name: str,
    revision: str,
    by_task: Mapping[str, Mapping[str, dict[str, Any]]],
    report: tuple[Path, str],
    digest: str | None,
    say: Say,
) -> list[Path]:
    """Merge into ``out/results/<model>/<revision>/``: all files in a temporary folder, then each renamed into place.

    A task file already there keeps the subsets this export does not write (the six CodeSearchNet languages
    are one MTEB task and may come from several reports of the submission); one this version did not write,
    or a folder holding another submission's results, is refused before anything is written.
    """
    folder = out / "results" / _safe_name(model_name) / _safe_name(revision)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        meta = _merged_meta(folder, model_name, revision, report, digest)
        files: dict[str, str] = {"model_meta.json": jsonio.dumps(meta, indent=2, ensure_ascii=True) + "\n"}
        for task, subsets in sorted(by_task.items()):
            kept = {s: v for s, v in _existing_subsets(folder / f"{task}.json", task).items() if s not in subsets}
            if kept:
                say(f"{task}.json: keeping subsets {', '.join(sorted(kept))} already there; writing {', '.join(sorted(subsets))}")
            merged = {**kept, **{s: dict(v, mteb_version=MTEB_VERSION) for s, v in subsets.items()}}
            result = {
                "dataset_revision": _REVISIONS[task],
                "task_name": task,
                "mteb_version": MTEB_VERSION,
                "scores": {"test": [merged[s] for s in sorted(merged)]},
                "evaluation_time": None,
                "kg_co2_emissions": None,
                "date": None,
            }
            files[f"{task}.json"] = jsonio.dumps(result, indent=2, ensure_ascii=True) + "\n"
        staging = Path(tempfile.mkdtemp(prefix=".export-mteb-", dir=folder))
        written: list[Path] = []
        try:
            for name, text in files.items():
                (staging / name).write_text(text, encoding="utf-8")
            for name in sorted(files, key=lambda n: n == "model_meta.json"):  # the task files first
                os.replace(staging / name, folder / name)
                written.append(folder / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return written


_REVISIONS = {mteb.name: mteb.revision for mteb in MTEB_TASKS.values()}
#: MTEB task -> its subsets -> their languages
_SUBSETS: dict[str, dict[str, list[str]]] = {}
for _entry in MTEB_TASKS.values():
    _SUBSETS.setdefault(_entry.name, {})[_entry.hf_subset] = list(_entry.languages)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One export at a time per results folder (two merging one task file would lose a subset); waits for the other.

    The lock is on the folder itself, so that no lock file lands in a results repository.
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_small_json(path: Path) -> Any:
    """An export's own JSON file, or None when there is none; InputError when it is not one an export could have written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror or error}", path=path) from None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(_MAX_RESULT_BYTES + 1)
    if len(raw) > _MAX_RESULT_BYTES:
        raise InputError("larger than any file export-mteb writes", path=path, hint=_ELSEWHERE)
    try:
        return jsonio.loads(raw)
    except jsonio.JsonError:
        raise InputError("not valid JSON", path=path, hint=_ELSEWHERE) from None


def _merged_meta(folder: Path, model_name: str, revision: str, report: tuple[Path, str], digest: str | None) -> dict[str, Any]:
    """``model_meta.json``: the model's name and revision, the subject's digest, every report exported into the folder and its sha256.

    ``grader_report_sha256`` names each report file by the sha256 of its bytes, so a published result points
    back to one grade: a ``report.json`` equals ``grader verify --json`` of its signed envelope byte for byte,
    and ``grader reproduce`` grades it again (docs/reports.md). Refuses a folder whose results are another
    submission's (same --model-name and --revision, other digest).
    """
    report_path, report_sha256 = report
    path = folder / "model_meta.json"
    existing = _read_small_json(path)
    reports = [str(report_path)]
    digests = {str(report_path): report_sha256}
    if existing is not None:
        if not isinstance(existing, dict) or existing.get("grader_subject_digest") != digest:
            held = existing.get("grader_subject_digest") if isinstance(existing, dict) else None
            what = f"submission sha256:{str(held)[:64]}" if isinstance(held, str) else "results export-mteb did not write"
            raise UsageError(
                f"cannot export to MTEB: {folder} holds {what}, not this report's submission (sha256:{digest}); "
                "its task files would mix two submissions",
                hint="export into another --out, or give another --model-name or --revision",
            )
        previous = existing.get("grader_reports")
        if isinstance(previous, list):
            reports = [r for r in previous if isinstance(r, str) and r != str(report_path)] + reports
        known = existing.get("grader_report_sha256")
        if isinstance(known, dict):  # absent in folders written before it was recorded
            digests = {r: d for r, d in known.items() if r in reports and isinstance(d, str)} | digests
    return {
        "name": model_name,
        "revision": revision,
        "grader_reports": reports,
        "grader_report_sha256": dict(sorted(digests.items())),
        "grader_subject_digest": digest,
    }


def _existing_subsets(path: Path, task: str) -> dict[str, dict[str, Any]]:
    """The subsets of a task file already in the folder, checked to be what an export of this version writes."""
    result = _read_small_json(path)
    if result is None:
        return {}

    def refuse(field: str, why: str) -> InputError:
        return InputError(f"{why}: not a {task} result this export writes", path=path, field=field, hint=_ELSEWHERE)

    if not isinstance(result, dict):
        raise refuse("", "not an object")
    for field, expected in (("task_name", task), ("dataset_revision", _REVISIONS[task]), ("mteb_version", MTEB_VERSION)):
        if result.get(field) != expected:
            raise refuse(field, f"is {str(result.get(field))[:80]!r}, expected {expected!r}")
    entries = result.get("scores", {}).get("test") if isinstance(result.get("scores"), dict) else None
    if not isinstance(entries, list):
        raise refuse("scores.test", "missing or not a list")
    subsets: dict[str, dict[str, Any]] = {}
    for index, entry in enumerate(entries):
        subset = entry.get("hf_subset") if isinstance(entry, dict) else None
        if not isinstance(subset, str) or subset not in _SUBSETS[task] or subset in subsets:
            raise refuse(f"scores.test[{index}].hf_subset", f"{str(subset)[:40]!r} is not a new subset of {task}")
        if entry.get("languages") != _SUBSETS[task][subset] or entry.get("mteb_version") != MTEB_VERSION:
            raise refuse(f"scores.test[{index}]", f"languages or mteb_version of subset {subset!r} differ from MTEB's")
        numbers = {k: v for k, v in entry.items() if k not in ("hf_subset", "languages", "mteb_version")}
        if not all(isinstance(v, float | int) and not isinstance(v, bool) and 0 <= v <= 1 for v in numbers.values()):
            raise refuse(f"scores.test[{index}]", "holds a value that is not a score")
        subsets[subset] = entry
    return subsets
