"""The participant's client: pack, check locally, upload streaming, follow the state.

Used by ``grader submit``, ``grader status`` and ``grader submissions``; the
server re-checks everything (it never trusts these checks).
"""

from __future__ import annotations

import contextlib
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from grader import jsonio
from grader.errors import SubmissionError
from grader.hosting.errors import ClientError, RefusedSubmission
from grader.hosting.retry import RetryPolicy, send_with_retry, upload_identity
from grader.hosting.settings import environment
from grader.hosting.validation import check_submission
from grader.submissions.archive import open_submission
from grader.submissions.manifest import DockerManifest, load_manifest

TERMINAL = ("scored", "failed", "error", "cancelled")
CHUNK = 1 << 20


def _add_folder(tar: tarfile.TarFile, folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise SubmissionError("is a symbolic link; links are not allowed in a submission", path=path)
        tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)


def _save_image(reference: str, target: Path) -> None:
    from grader.sandbox.engine import docker_client

    try:
        image = docker_client().images.get(reference)
    except Exception as error:  # the docker SDK raises its own types; one line for the person
        raise SubmissionError(f"image {reference!r} is not in the local Docker engine: {error}", field="image") from None
    with open(target, "wb") as out:
        for chunk in image.save(named=False):
            out.write(chunk)


@contextlib.contextmanager
def packed(submission: Path) -> Iterator[Path]:
    """``submission`` as a ``.tar.gz`` (a Docker submission gets its image as a ``docker save`` tar inside)."""
    with tempfile.TemporaryDirectory(prefix="grader-submit-") as scratch:
        work = Path(scratch)
        with open_submission(submission) as folder:
            manifest = load_manifest(folder)
            source = folder
            if isinstance(manifest, DockerManifest) and not manifest.image.endswith(".tar"):
                source = work / "submission"
                shutil.copytree(folder, source, symlinks=True)
                _save_image(manifest.image, source / "image.tar")
                data = jsonio.load_file(source / "submission.json")
                data["image"] = "image.tar"
                jsonio.write_json(source / "submission.json", data, ensure_ascii=True, mode=0o644)
            archive = work / "submission.tar.gz"
            with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
                _add_folder(tar, source)
        yield archive


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail"))
    except (ValueError, AttributeError):
        return response.text[:300]


class HostingClient:
    """The participant API of one server."""

    def __init__(self, server: str, token: str, *, timeout: float = 60.0, retry: RetryPolicy = RetryPolicy()) -> None:
        self.http = httpx.Client(
            base_url=server.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(timeout, connect=10.0)
        )
        self.retry = retry

    def _check(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            detail = _error(response)
            if response.status_code in (403, 413, 422, 429):
                retry = None
                with contextlib.suppress(ValueError, AttributeError):
                    retry = response.json().get("retry_at")
                raise RefusedSubmission(
                    f"refused ({response.status_code}): {detail}" + (f" (next possible at {retry})" if retry else ""), status=response.status_code
                )
            raise ClientError(f"server answered {response.status_code}: {detail}")
        return response.json() if response.content else None

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._send(lambda: self.http.request(method, url, **kwargs))

    def _send(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """``send()``, retried over connection failures (grader.hosting.retry); :class:`ClientError` when it never got through."""
        try:
            return send_with_retry(send, self.retry)
        except httpx.HTTPError as error:
            raise ClientError(f"cannot reach {self.http.base_url}: {type(error).__name__}: {error}") from None

    def upload(self, archive: Path, *, sample: bool = False, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Stream ``archive`` to the server, again if the connection fails (the same upload: same key); return its submission."""
        size = archive.stat().st_size

        def chunks() -> Iterator[bytes]:
            sent = 0
            with open(archive, "rb") as handle:
                while block := handle.read(CHUNK):
                    sent += len(block)
                    if progress is not None:
                        progress(sent, size)
                    yield block

        # One key for every try of this upload: the server answers a repeat with the submission the first became.
        headers = {"Content-Type": "application/gzip", "Content-Length": str(size), **upload_identity(archive)}
        response = self._send(
            lambda: self.http.post("/api/v1/submissions", params={"sample": "true" if sample else "false"}, content=chunks(), headers=headers)
        )
        return self._check(response)  # type: ignore[no-any-return]

    def submit(
        self,
        submission: Path,
        *,
        sample: bool = False,
        kinds: tuple[str, ...] = ("onnx", "docker"),
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        """Check locally (archive, manifest, static intake), pack, upload."""
        check_submission(submission, kinds=kinds, image_as_tar=False)
        with packed(submission) as archive:
            return self.upload(archive, sample=sample, progress=progress)

    def status(self, submission_id: str) -> dict[str, Any]:
        return self._check(self._request("GET", f"/api/v1/submissions/{submission_id}"))  # type: ignore[no-any-return]

    def submissions(self) -> list[dict[str, Any]]:
        return self._check(self._request("GET", "/api/v1/submissions"))  # type: ignore[no-any-return]

    def report(self, submission_id: str) -> bytes:
        response = self._request("GET", f"/api/v1/submissions/{submission_id}/report")
        if response.status_code >= 400:
            raise ClientError(f"server answered {response.status_code}: {_error(response)}")
        return response.content

    def logs(self, submission_id: str) -> dict[str, str]:
        return self._check(self._request("GET", f"/api/v1/submissions/{submission_id}/logs"))["logs"]  # type: ignore[no-any-return]

    def competition(self) -> dict[str, Any]:
        return self._check(self._request("GET", "/api/v1/competition"))  # type: ignore[no-any-return]

    def host_key(self) -> bytes:
        response = self._request("GET", "/host-key.pub")
        if response.status_code != 200:
            raise ClientError(f"server answered {response.status_code} for its public key")
        return response.content

    def wait(
        self, submission_id: str, *, poll_s: float = 0.5, timeout_s: float | None = None, on_change: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        """Follow the submission until it ends; report each state change."""
        last = None
        started = time.monotonic()
        while True:
            view = self.status(submission_id)
            if view["state"] != last and on_change is not None:
                on_change(view)
            last = view["state"]
            if view["state"] in TERMINAL:
                return view
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise ClientError(f"{submission_id} still {view['state']} after {timeout_s:.0f} s")
            time.sleep(poll_s)


def token_from(option: str | None) -> str:
    """The token from ``--token`` or ``GRADER_TOKEN`` (:mod:`grader.hosting.settings`)."""
    token = option or environment().token
    if not token:
        raise ClientError("no token: set GRADER_TOKEN or pass --token (the host gives it to you)")
    return token
