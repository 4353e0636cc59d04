"""A worker fetches a sharded grade's upload once, not once per shard job; a kept copy is used only once it hashes to
the job's sha256 (grader/hosting/worker/upload_cache.py).

A stub server on 127.0.0.1 serves the shard route of the upload and counts how often it was asked.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grader.errors import TaskFailure
from grader.failures import FailureCode
from grader.hosting.protocol.shard_messages import ShardJobMessage
from grader.hosting.worker import shard_loop
from grader.hosting.worker.loop import worker_client
from grader.hosting.worker.shard_loop import ShardApi, upload_for
from grader.hosting.worker.upload_cache import UploadCache
from tests.hosting.stub_http import answer, serving

#: 3 MiB of varied bytes: more than one 1 MiB piece of the stream
BODY = b"".join(hashlib.sha256(n.to_bytes(4, "big")).digest() for n in range(3 << 15))
BODY_SHA256 = hashlib.sha256(BODY).hexdigest()


class _Uploads(BaseHTTPRequestHandler):
    server: _Stub

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.asked.append(self.path)
        answer(self, 200, self.server.body, "application/octet-stream")

    def do_POST(self) -> None:  # a heartbeat: 409 once the try is not this worker's
        self.server.asked.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer(self, self.server.heartbeat_status, b"{}")


class _Stub(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Uploads)
        self.asked: list[str] = []
        self.body = BODY
        self.heartbeat_status = 200


@pytest.fixture
def stub() -> Iterator[_Stub]:
    with serving(_Stub()) as server:
        yield server


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UploadCache]:
    """A fresh cache in the test's folder, as the worker's own."""
    fresh = UploadCache(parent=tmp_path)
    monkeypatch.setattr(shard_loop, "UPLOADS", fresh)
    yield fresh
    fresh.close()


def _api(stub: _Stub) -> ShardApi:
    return ShardApi(worker_client(f"http://127.0.0.1:{stub.server_address[1]}", "token"))


def _job(job_id: int, sha256: str = BODY_SHA256, cap: int = 64 << 20) -> ShardJobMessage:
    return ShardJobMessage.model_construct(job_id=job_id, tries=1, upload_sha256=sha256, max_unpacked_bytes=cap)


def _entries(cache: UploadCache) -> list[str]:
    folders = list(cache.parent.glob("grader-uploads-*")) if cache.parent else []
    return sorted(entry.name for folder in folders for entry in folder.iterdir())


@pytest.mark.slow  # a stub server on a socket
def test_a_workers_later_jobs_of_one_upload_take_its_kept_copy_not_the_wire(stub: _Stub, cache: UploadCache, tmp_path: Path) -> None:
    api = _api(stub)
    for number in range(4):  # four shard jobs of one grade on this worker
        target = tmp_path / f"job-{number}" / "upload.tar.gz"
        target.parent.mkdir()
        assert upload_for(api, _job(number), target)
        assert target.read_bytes() == BODY
    # Fetched once, by the first job; each later job renews its lease instead, which tells the server its try is used
    # (a lapse of it then costs a try) before the submission runs, as a fetch does.
    assert stub.asked == ["/api/v1/worker/shards/0/upload?tries=1"] + [f"/api/v1/worker/shards/{n}/heartbeat" for n in (1, 2, 3)]
    assert cache.kept() == [BODY_SHA256] and _entries(cache) == [BODY_SHA256]


@pytest.mark.slow  # a stub server on a socket
def test_a_kept_copy_changed_on_disk_is_dropped_and_fetched_again(stub: _Stub, cache: UploadCache, tmp_path: Path) -> None:
    api = _api(stub)
    assert upload_for(api, _job(1), tmp_path / "first")
    (entry,) = (tmp_path / name for name in os.listdir(tmp_path) if name.startswith("grader-uploads-"))
    with (entry / BODY_SHA256).open("r+b") as handle:  # one byte changed where it is kept
        handle.seek(1 << 20)
        handle.write(b"\x00" if BODY[1 << 20] else b"\x01")
    assert upload_for(api, _job(2), tmp_path / "second")
    assert (tmp_path / "second").read_bytes() == BODY  # the server's bytes, not the changed copy
    assert [path.rsplit("/", 1)[1] for path in stub.asked] == ["upload?tries=1", "upload?tries=1"]  # no renewal: it was fetched


@pytest.mark.slow  # a stub server on a socket
def test_a_job_whose_try_is_gone_when_it_would_take_the_kept_copy_is_stale(stub: _Stub, cache: UploadCache, tmp_path: Path) -> None:
    api = _api(stub)
    assert upload_for(api, _job(1), tmp_path / "first")
    stub.heartbeat_status = 409  # the server handed the next job's try on
    assert upload_for(api, _job(2), tmp_path / "second") is None
    assert cache.kept() == [BODY_SHA256]  # the copy is still good for the next job


@pytest.mark.slow  # a stub server on a socket
def test_an_upload_that_does_not_hash_to_the_jobs_sha256_is_refused_and_not_kept(stub: _Stub, cache: UploadCache, tmp_path: Path) -> None:
    api = _api(stub)
    other = hashlib.sha256(b"what the job names").hexdigest()
    assert not upload_for(api, _job(1, other), tmp_path / "a")
    assert cache.kept() == [] and _entries(cache) == []
    assert not upload_for(api, _job(2, other), tmp_path / "b")  # asked again: nothing was kept under the name
    assert len(stub.asked) == 2


@pytest.mark.slow  # a stub server on a socket
@pytest.mark.parametrize("named", ["../../outside", BODY_SHA256.upper(), BODY_SHA256 + "/x", ""])
def test_a_name_the_server_sends_that_is_not_a_sha256_names_no_file(stub: _Stub, cache: UploadCache, tmp_path: Path, named: str) -> None:
    assert not upload_for(_api(stub), _job(1, named), tmp_path / "a")
    cache.keep(named, tmp_path / "a")  # asked directly: still nothing kept
    assert cache.kept() == [] and _entries(cache) == []
    assert not (tmp_path.parent / "outside").exists()  # "../../outside" from the cache's folder


@pytest.mark.slow  # a stub server on a socket
def test_an_upload_past_the_jobs_cap_fails_infra_and_is_not_kept(stub: _Stub, cache: UploadCache, tmp_path: Path) -> None:
    with pytest.raises(TaskFailure) as failed:
        upload_for(_api(stub), _job(1, cap=len(BODY) - 1), tmp_path / "a")
    assert failed.value.code is FailureCode.INFRA and "larger than" in str(failed.value)
    assert cache.kept() == []


def test_only_the_last_two_uploads_are_kept_least_recently_used_dropped(cache: UploadCache, tmp_path: Path) -> None:
    names = []
    for number in range(3):
        source = tmp_path / f"upload-{number}"
        source.write_bytes(b"upload %d" % number)
        names.append(hashlib.sha256(source.read_bytes()).hexdigest())
        cache.keep(names[-1], source)
        if number == 1:
            assert cache.place(names[0], tmp_path / "used")  # the first is used again: the second is now the oldest
    assert cache.kept() == [names[0], names[2]] and _entries(cache) == sorted([names[0], names[2]])
    assert not cache.place(names[1], tmp_path / "gone") and not (tmp_path / "gone").exists()


@pytest.mark.slow  # forks a process
def test_the_folder_is_private_and_removed_by_its_process_not_by_a_forked_child(cache: UploadCache, tmp_path: Path) -> None:
    source = tmp_path / "upload"
    source.write_bytes(b"x")
    cache.keep(hashlib.sha256(b"x").hexdigest(), source)
    (folder,) = tmp_path.glob("grader-uploads-*")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    child = os.fork()
    if child == 0:  # a shard job's child ends: the worker's folder stays
        cache.close()
        os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    assert folder.is_dir() and cache.kept()
    cache.close()
    assert not folder.exists() and cache.kept() == []
