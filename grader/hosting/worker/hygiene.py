"""What a worker checks before a job and cleans after it: its data, its free disk, the submission's image.

- Data: the job names the digest of every task's pseudonymous copy (corpus,
  queries, judged ids: what ``grader admin export-worker-data`` writes); a worker
  whose copy differs, or that holds the benchmark's own data instead, must never
  rank other data (the job fails INFRA on this worker and goes back to the queue).
- Disk: shared workers run out of space (codalab-competitions #2996, #3555):
  a worker below its free-space floor claims nothing until space returns.
- Images: a submission's ``docker save`` tar is loaded untagged for its grading;
  it is removed afterwards (never forced: an image another container still
  uses stays; nor one the engine also holds under a name).
"""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from grader import jsonio
from grader.hosting.protocol.messages import Job

log = logging.getLogger("grader.worker")

#: Largest manifest read out of an upload (submission.json, or a docker save manifest.json).
_MAX_MANIFEST = 1 << 20


def data_mismatch(job: Job, data: Path | None) -> str | None:
    """None when the copy in ``data`` (corpus, queries, the job's judged ids) has the job's digests; else what differs (no judgements needed)."""
    if any(job.data_digests.values()):
        # A pin of the whole split asks this worker to hold the judgements: workers rank without them.
        return "the job pins the judgements (qrels): this worker ranks without them and refuses such a job"
    if data is None:
        return "this worker has no data copy (set GRADER_WORKER_DATA to the folder `grader admin export-worker-data` wrote)"
    for name in job.tasks:
        if name not in job.judged or name not in job.ranking_digests:
            return f"task {name}: the job names no judged queries or no digest of them"
    return copy_mismatch(data, {name: (job.judged[name], job.ranking_digests[name]) for name in job.tasks}, split=job.split)


def copy_mismatch(data: Path, pinned: Mapping[str, tuple[Sequence[str], str]], *, split: str) -> str | None:
    """None when the copy in ``data`` has, for each task named in ``pinned``, the pinned ranking digest of its judged
    ids (:meth:`grader.data.task.Task.ranking_digest`; each file's sha256 is remembered per version of the file, so a
    worker hashes its copy once, not every job); else what differs. A grade job's check and a shard job's (made in the
    worker, before its child is forked)."""
    from grader.data.registry import resolve_benchmark
    from grader.hosting.protocol.worker_data import copy_key

    try:
        copy_key(data)  # a folder with the benchmark's own data has no manifest: refused before anything is staged
        benchmark = resolve_benchmark(str(data))
        for name, (judged, digest) in pinned.items():
            have = benchmark.task(name).ranking_digest(judged)
            if digest != have:
                return f"task {name} split {split}: pinned {digest}, here {have}"
    except Exception as error:  # missing or unreadable data is a mismatch too, never a grade
        return f"the data copy {str(data)!r} is unusable here: {type(error).__name__}: {error}"
    return None


def free_bytes(folder: str | None = None) -> int:
    """Free bytes where this worker stages jobs (the temporary folder)."""
    return shutil.disk_usage(folder or tempfile.gettempdir()).free


def _read_member(tar: tarfile.TarFile, name: str) -> bytes | None:
    try:
        member = tar.getmember(name)
    except KeyError:
        return None
    handle = tar.extractfile(member) if member.isfile() and member.size <= _MAX_MANIFEST else None
    return handle.read() if handle is not None else None


def loaded_image_id(upload: Path) -> str | None:
    """The image id a Docker upload's ``image.tar`` loads as (from its docker save manifest), or None."""
    try:
        with tarfile.open(upload, "r:gz") as outer:
            manifest = jsonio.loads(_read_member(outer, "submission.json") or b"{}")
            image = manifest.get("image") if isinstance(manifest, dict) and manifest.get("kind") == "docker" else None
            if not isinstance(image, str) or not image.endswith(".tar"):
                return None
            member = outer.getmember(image.removeprefix("./"))
            inner_file = outer.extractfile(member)
            if inner_file is None:
                return None
            with tarfile.open(fileobj=io.BufferedReader(inner_file), mode="r|") as inner:  # type: ignore[call-overload, type-var]
                for entry in inner:
                    if entry.name in ("manifest.json", "./manifest.json"):
                        data = inner.extractfile(entry)
                        entries = jsonio.loads(data.read(_MAX_MANIFEST)) if data else None
                        if isinstance(entries, list) and len(entries) == 1:
                            return "sha256:" + Path(str(entries[0].get("Config", ""))).name.removesuffix(".json")
                        return None
    except (OSError, KeyError, tarfile.TarError, ValueError):
        return None
    return None


def remove_submission_image(upload: Path) -> None:
    """Remove the image a Docker upload loaded (best effort; an image still in use or already gone stays as is)."""
    image_id = loaded_image_id(upload)
    if image_id is None:
        return
    try:
        from grader.sandbox.engine import docker_client

        client = docker_client()
        if client.images.get(image_id).tags:
            return  # the same image is also in the engine under a name (the host's own): not ours to remove
        client.images.remove(image_id, force=False, noprune=False)
        log.info("removed submission image %s", image_id[:19])
    except Exception as error:  # docker.errors.ImageNotFound / APIError (in use): leave it
        log.info("kept image %s: %s", image_id[:19], type(error).__name__)
