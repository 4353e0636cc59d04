"""Helpers of the Docker sandbox tests (tests/test_sandbox_*.py): real engines, real containers.

* :func:`require_docker` is the skip/require policy: without an engine (or an
  image a test needs) the test is skipped with the reason, unless
  ``GRADER_REQUIRE_DOCKER=1`` (CI), which turns the same situation into a failure.
* :class:`HostGuard` proves a test left the host as it found it: no container of
  the test still exists (nor its watchdog process), nothing is still mounted under
  the test's folder (``/output``, ``/tmp`` images), no scratch file remains, and
  the staged ``/input`` folders are byte-for-byte unchanged.
* Small tasks, small limits: every container here lives a few seconds at most.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader.data.task import Document, Query
from grader.sandbox.blinding import BlindingKey
from grader.sandbox.limits import SandboxLimits
from grader.sandbox.staging import StagedTask, stage_task

REQUIRE_ENV = "GRADER_REQUIRE_DOCKER"
SANDBOX_LABEL = "dev.grader.sandbox"

BASE_IMAGE = "grader-base:bookworm"
RUNNER_IMAGE = os.environ.get("GRADER_RUNNER_IMAGE", "grader-runner:dev")
BM25_IMAGE = "grader-example-bm25:1"


def image_of(name: str) -> str:
    """The reference of a misbehaving test image (tests/sandbox_images/NAME)."""
    return f"grader-test-{name}:1"


_BUILD_HINT = {
    BASE_IMAGE: "images/base/build.sh (or `make images`)",
    BM25_IMAGE: "submissions_example/docker-bm25/build.sh (or `make images`)",
    "grader-runner:dev": "images/runner/build.sh (or `make images`)",
}


def require_enabled() -> bool:
    """Whether a missing engine or image must fail the test rather than skip it (CI)."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip with ``reason``, or fail with it when Docker is required."""
    if require_enabled():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: Docker tests must run here)", pytrace=False)
    pytest.skip(reason)


def require_docker(images: Iterable[str] = ()) -> Any:
    """A docker SDK client for an answering engine holding every image of ``images``; else skip/fail."""
    from grader.sandbox.engine import docker_client, engine_available

    if not engine_available():
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        unavailable(f"no Docker engine answers at {where}: start one (scripts/setup-docker.sh) to run the sandbox tests")
    client = docker_client()
    missing = []
    for image in dict.fromkeys(images):
        try:
            client.images.get(image)
        except Exception:  # ImageNotFound, or an engine that stopped answering
            missing.append(image)
    if missing:
        hints = sorted({_BUILD_HINT.get(i, "tests/sandbox_images/build.sh (or `make images`)") for i in missing})
        unavailable(f"Docker image(s) missing: {', '.join(missing)}; build with {' / '.join(hints)}")
    return client


# --------------------------------------------------------------------------- limits and tasks


def small_limits(**overrides: Any) -> SandboxLimits:
    """Limits small enough that a misbehaving container ends in seconds."""
    values: dict[str, Any] = dict(
        time_limit_s=20.0,
        memory_bytes=256 << 20,
        cpus=1.0,
        pids=64,
        nofile=256,
        output_bytes=4 << 20,
        tmp_bytes=16 << 20,
        log_bytes=1 << 20,
    )
    values.update(overrides)
    return SandboxLimits(**values)


#: A tiny task: each query shares its words with exactly one document.
DOCUMENTS = [
    Document("d1", "", "def add_numbers(a, b): return a + b  # add two numbers"),
    Document("d2", "printing", "print the greeting hello world on the console"),
    Document("d3", "", "open a file and read every line of text"),
    Document("d4", "sorting", "sort the list of items in place quickly"),
    Document("d5", "", "parse json text into a python dictionary"),
    Document("d6", "", "compute the square root of a float"),
]
QUERIES = [
    Query("q1", "add two numbers"),
    Query("q2", "greeting hello world"),
    Query("q3", "read every line file"),
    Query("q4", "sort list items quickly"),
]
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {"d4": 1}}


#: A fixed blinding key for tests that stage by hand (grading takes its key from RunOptions).
TEST_BLINDING_KEY = BlindingKey(bytes(range(32)))


def stage_small(folder: Path, *, task: str = "valid", mode: str = "retrieve", top_k: int = 10) -> StagedTask:
    """Stage the tiny task; ``task`` is what task.json names it (the ``scripted`` image's behaviour)."""
    return stage_task(folder, task=task, split="test", mode=mode, top_k=top_k, queries=QUERIES, documents=DOCUMENTS, key=TEST_BLINDING_KEY)


def write_beir_task(
    root: Path,
    *,
    documents: Sequence[Document] = DOCUMENTS,
    queries: Sequence[Query] = QUERIES,
    qrels: dict[str, dict[str, int]] = QRELS,
    splits: Sequence[str] = ("test", "dev"),
) -> Path:
    """The tiny task as a BEIR folder (qrels for each split in ``splits``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n" for d in documents), encoding="utf-8"
    )
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q.id, "text": q.text}) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items())
    for split in splits:
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return root


def write_benchmark(root: Path, tasks: Sequence[str], *, measures: Sequence[str] = ("NDCG@10", "MRR@10", "Recall@3")) -> Path:
    """A benchmark folder whose tasks are all the tiny task, under the given names."""
    for name in tasks:
        write_beir_task(root / name)
    spec = {"name": "sandbox-tiny", "version": "1", "primary_measure": "NDCG@10", "measures": list(measures), "tasks": list(tasks)}
    (root / "benchmark.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def docker_submission(folder: Path, image: str, *, mode: str = "retrieve", name: str | None = None) -> Path:
    """A Docker-image submission folder naming ``image``."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": "docker", "image": image, "mode": mode, "name": name or folder.name, "training": {"setting": "zero-shot", "datasets": []}}
    (folder / "submission.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def read_log(path: Path | None) -> str:
    assert path is not None and path.is_file(), f"no container log at {path}"
    return path.read_text(encoding="utf-8", errors="replace")


# --------------------------------------------------------------------------- host state


def tree_snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (links not followed): kind, mode, size and content digest."""
    entries: dict[str, tuple[Any, ...]] = {}
    if not os.path.lexists(root):
        return entries
    paths = [root]
    if root.is_dir() and not root.is_symlink():
        for current, dirs, files in os.walk(root, followlinks=False):
            paths.extend(Path(current) / name for name in sorted(dirs + files))
    for path in paths:
        info = os.lstat(path)
        digest = None
        if stat.S_ISREG(info.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(info.st_mode):
            digest = os.readlink(path)
        entries[str(path.relative_to(root))] = (
            stat.S_IFMT(info.st_mode),
            stat.S_IMODE(info.st_mode),
            info.st_size if stat.S_ISREG(info.st_mode) else None,
            digest,
        )
    return entries


def is_under(path: str, root: Path | str) -> bool:
    """Whether ``path`` is ``root`` or lies below it (by whole path components: ``/a/b_1`` is not under ``/a/b``)."""
    base = str(root).rstrip("/")
    return path == base or path.startswith(base + "/")


def mount_points() -> list[str]:
    """Mount points of this mount namespace (``/proc/mounts``, octal escapes decoded)."""
    with open("/proc/mounts", encoding="utf-8") as handle:
        return [row.split()[1].encode().decode("unicode_escape") for row in handle if row.strip()]


def watchdogs_mentioning(root: Path) -> list[int]:
    """Pids of container watchdogs (grader/sandbox/watchdog.py) whose folders lie under ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"grader.sandbox.watchdog" in cmdline and (str(root).rstrip("/") + "/").encode() in cmdline:
            found.append(int(entry.name))
    return found


@dataclass
class HostGuard:
    """What a test may touch, snapshotted before; :meth:`verify` asserts it is back as it was.

    Containers are attributed to the test by their bind mounts: every sandbox
    container mounts a staged ``/input`` that lives under the test's own
    ``tmp_path`` (the grader's temp dirs are redirected there too), so tests of
    other people running at the same time are never mistaken for leftovers.
    """

    client: Any
    root: Path
    private_tmp: Path
    watched: dict[Path, dict[str, tuple[Any, ...]]] = field(default_factory=dict)

    def watch(self, *folders: Path) -> None:
        """Also require these folders to be unchanged (contents, modes) at the end."""
        for folder in folders:
            self.watched[folder] = tree_snapshot(folder)

    def own_containers(self) -> list[Any]:
        """Sandbox containers (labelled) whose mounts come from under this test's folder."""
        mine = []
        # sparse: the list endpoint's own data (with Mounts), no per-container inspect that
        # could fail on someone else's container removed meanwhile.
        for container in self.client.containers.list(all=True, sparse=True, filters={"label": f"{SANDBOX_LABEL}=1"}):
            mounts = container.attrs.get("Mounts") or []
            if any(is_under(str(m.get("Source", "")), self.root) for m in mounts):
                mine.append(container)
        return mine

    def verify(self) -> None:
        leftovers = self.own_containers()
        assert not leftovers, f"containers left behind: {[(c.short_id, c.attrs.get('State')) for c in leftovers]}"
        # Every /output tmpfs of this test is made under its folder (see new_guard); others'
        # concurrent runs mount theirs elsewhere, so only these are this test's to answer for.
        under_test = [p for p in mount_points() if is_under(p, self.root)]
        assert not under_test, f"mounts left under the test folder: {under_test}"
        # A watchdog that just finished its cleanup may take a moment to exit (seconds on a loaded 2-core CI machine).
        settle = time.monotonic() + 20
        while (watchdogs := watchdogs_mentioning(self.root)) and time.monotonic() < settle:
            time.sleep(0.1)
        assert not watchdogs, f"container watchdogs still running for this test: pids {watchdogs}"
        leftover_tmp = sorted(p.name for p in self.private_tmp.iterdir()) if self.private_tmp.exists() else []
        assert not leftover_tmp, f"grader temp folders left behind: {leftover_tmp}"
        for folder, before in self.watched.items():
            after = tree_snapshot(folder)
            assert after == before, (
                f"{folder} changed: added {sorted(set(after) - set(before))}, removed {sorted(set(before) - set(after))}, modified {sorted(k for k in before if k in after and before[k] != after[k])}"
            )


def new_guard(client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostGuard:
    """A :class:`HostGuard` for ``tmp_path``, with the grader's temp dirs redirected under it."""
    private_tmp = tmp_path / "grader-tmp"
    private_tmp.mkdir()
    # tempfile.mkdtemp / TemporaryDirectory (staging, /output, check scratch) all land here.
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    return HostGuard(client=client, root=tmp_path, private_tmp=private_tmp)


def host_still_forks() -> None:
    """The host can still start processes and the engine still answers."""
    result = subprocess.run(["/bin/sh", "-c", "echo alive"], capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.strip() == "alive"


def read_report(out: Path) -> dict[str, Any]:
    """``OUT/report.json``, validated against the report schema."""
    from grader.reports import validate_report

    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    validate_report(report)
    return report
