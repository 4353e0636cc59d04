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
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from grader import jsonio
from grader.errors import GraderError, SubmissionError
from grader.hosting.clock import iso, utcnow
from grader.hosting.environment import environment
from grader.hosting.errors import ClientError, RefusedSubmission, UnknownSubmission
from grader.hosting.intake.refusals import (
    QuotaStatus,
    invalid,
    load_refusal,
    named_phase_refusal,
    no_sample_track,
    quota_refusal,
    refusal_line,
    too_large,
    window_refusal,
)
from grader.hosting.intake.upload_checks import check_submission
from grader.hosting.participant.competition_rules import COMPETITION_PATH, ParticipantRules
from grader.hosting.participant.fetch import MAX_JSON_ANSWER, MAX_REPORT_ANSWER, Answer, Fetcher, FetchLimits, json_answer
from grader.hosting.participant.resume import TUS_VERSION, Backoff, Pending, chunks_from, creation_headers, kept_upload, new_upload
from grader.hosting.participant.retry import RetryPolicy, send_while_in_progress, send_with_retry, upload_identity
from grader.hosting.protocol.messages import QueueView
from grader.hosting.states import Track
from grader.submissions.archive import open_submission
from grader.submissions.manifest import DockerManifest, load_manifest
from grader.transparency.proof import MAX_PROOF_BYTES

TERMINAL = ("scored", "failed", "error", "cancelled")
#: How much longer each look of :meth:`HostingClient.wait` waits when the state did not change (up to its ``max_poll_s``).
POLL_GROWTH = 1.5
#: What the participant routes answer (404) for an id that is not one of yours (grader/hosting/api/routes/participants.py).
UNKNOWN_DETAIL = "no such submission"
CHUNK = 1 << 20
#: A PEM public key is a few hundred bytes.
MAX_KEY_ANSWER = 64 << 10
#: The resumable uploads (tus 1.0) of grader/hosting/api/routes/resumable.py, and the header naming the submission one became.
UPLOADS = "/api/v1/uploads"
SUBMISSION_HEADER = "Grader-Submission"


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


def write_archive(submission: Path, target: Path) -> int:
    """Check ``submission`` locally (any kind, training labels not required) and write its upload archive to ``target``; its size."""
    try:
        check_submission(submission, image_as_tar=False)
    except GraderError as error:
        folder = Path(submission)
        raise invalid(error, folder.resolve(), folder.absolute(), Path(tempfile.gettempdir()).resolve(), Path(tempfile.gettempdir())) from None
    _pack_to(submission, target)
    return target.stat().st_size


def _pack_to(submission: Path, target: Path) -> None:
    with packed(submission) as archive:
        shutil.move(archive, target)


def _error(response: Answer) -> str:
    try:
        return str(response.json().get("detail"))
    except (ValueError, AttributeError):
        return response.text[:300]


def _shaped(value: Any, kind: type, where: str) -> Any:
    """``value`` if it is a ``kind`` (a JSON object or list), else one :class:`ClientError` line: never a KeyError later."""
    if not isinstance(value, kind):
        raise ClientError(f"{where}: the server's answer is not a JSON {'object' if kind is dict else 'list'}")
    return value


def _view(value: Any, where: str) -> dict[str, Any]:
    """A submission's view as the commands read it: an object with an ``id`` and a ``state`` (strings)."""
    view = _shaped(value, dict, where)
    if not isinstance(view.get("id"), str) or not isinstance(view.get("state"), str):
        raise ClientError(f"{where}: the server's answer is not a submission (an id and a state)")
    if view.get("queue") is not None:
        queue_of(view, where)  # a malformed queue view is refused here, with the field it names
    return view  # type: ignore[no-any-return]


def queue_of(view: dict[str, Any], where: str = "the submission") -> QueueView | None:
    """The view's place in the queue, estimate and progress, validated (:class:`QueueView`); None when it has none."""
    raw = view.get("queue")
    if raw is None:
        return None
    try:
        return QueueView.model_validate(raw)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "queue"
        raise ClientError(f"{where}: the server's queue view is malformed at queue.{field}: {first['msg']}"[:300]) from None


class HostingClient:
    """The participant API of one server; every answer read under the bounds of :mod:`grader.hosting.participant.fetch`."""

    def __init__(
        self, server: str, token: str, *, timeout: float = 60.0, retry: RetryPolicy = RetryPolicy(), limits: FetchLimits | None = None
    ) -> None:
        self.http = httpx.Client(
            base_url=server.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(timeout, connect=10.0)
        )
        self.fetcher = Fetcher(ClientError, limits=limits, http=self.http)
        self.retry = retry

    def _check(self, response: Answer) -> Any:
        if response.status_code >= 400:
            detail = _error(response)
            if response.status_code in (403, 413, 422, 429):
                retry = None
                with contextlib.suppress(ValueError, AttributeError):
                    retry = response.json().get("retry_at")
                raise RefusedSubmission(refusal_line(response.status_code, detail, retry), status=response.status_code)
            raise ClientError(f"server answered {response.status_code}: {detail}")
        return json_answer(response, ClientError) if response.content else None

    def _request(self, method: str, url: str, *, max_bytes: int = MAX_JSON_ANSWER, **kwargs: Any) -> Answer:
        return self._send(lambda: self.fetcher.fetch(method, url, max_bytes=max_bytes, **kwargs))

    def _send(self, send: Callable[[], Answer]) -> Answer:
        """``send()``, retried over connection failures (grader.hosting.participant.retry); :class:`ClientError` when it never got through."""
        try:
            return send_with_retry(send, self.retry)
        except httpx.HTTPError as error:
            raise ClientError(f"cannot reach {self.http.base_url}: {type(error).__name__}: {error}") from None

    def upload(
        self,
        archive: Path,
        *,
        sample: bool = False,
        phase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        on_wait: Callable[[float, float, float], None] | None = None,
    ) -> dict[str, Any]:
        """Stream ``archive`` to the server, again if the connection fails (the same upload: same key); return its submission.

        While the server answers that another copy under the key is still arriving (409 "in progress"), waits and
        sends again (``on_wait`` hears each wait: seconds, waited so far, the bound), for a bounded time.
        """
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
        response = send_while_in_progress(
            lambda: self._send(
                lambda: self.fetcher.fetch(
                    "POST",
                    "/api/v1/submissions",
                    max_bytes=MAX_JSON_ANSWER,
                    timed=False,  # sending may take hours; the answer is still bounded
                    params=_track_params(sample, phase),
                    content=chunks(),
                    headers=headers,
                )
            ),
            self.retry,
            on_wait=on_wait,
        )
        return _view(self._check(response), "the upload's answer")

    def submit(
        self,
        submission: Path,
        *,
        sample: bool = False,
        phase: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        on_wait: Callable[[float, float, float], None] | None = None,
    ) -> dict[str, Any]:
        """Refuse locally what the server would refuse, then pack and upload.

        Reads the competition and the participant's quota first; the window, the quota, the
        competition's rules (kinds, training labels) and the upload cap are checked before a
        byte of the archive is sent, with the server's own words (:mod:`grader.hosting.intake.refusals`).
        The server checks everything again (it never trusts these checks).
        """
        rules = ParticipantRules.from_api(self.competition(), f"{self.http.base_url}{COMPETITION_PATH}")
        track = Track.SAMPLE if sample else Track.HIDDEN
        if sample and not rules.sample_track:
            raise _local(no_sample_track())
        quota, server_now = self.quota_with_time()
        status = QuotaStatus.from_dict(quota.get(track) if isinstance(quota, dict) else None)
        refusal = window_refusal(rules.start, rules.end, server_now) or (named_phase_refusal(rules.phases, server_now, phase, sample=sample))
        if refusal is not None:
            raise _local(refusal)
        resumable = self.offers_resumable()
        base = str(self.http.base_url)
        kept = kept_upload(base, sample, Path(submission)) if resumable else None
        if kept is not None:
            # An upload an earlier run started, of these very files: the server admitted it then (its reservation is in
            # the quota just read, so the local quota checks would count it twice). If it expired, the server decides anew.
            return self._send_pending(kept, sample, progress, phase)
        refusal = quota_refusal(status)
        if refusal is not None:
            raise _local(refusal)
        try:
            check_submission(submission, kinds=rules.kinds, require_training_labels=rules.require_training_labels, image_as_tar=False)
        except GraderError as error:
            folder = Path(submission)
            raise _local(
                invalid(error, folder.resolve(), folder.absolute(), Path(tempfile.gettempdir()).resolve(), Path(tempfile.gettempdir()))
            ) from None
        if resumable:
            pending = new_upload(base, sample, Path(submission), lambda target: _pack_to(submission, target))
            try:
                self._refuse_size(pending.length, rules, status)
            except RefusedSubmission:
                pending.discard()
                raise
            return self._send_pending(pending, sample, progress, phase)
        with packed(submission) as archive:  # a server without resumable uploads (older than this client)
            self._refuse_size(archive.stat().st_size, rules, status)
            return self.upload(archive, sample=sample, phase=phase, progress=progress, on_wait=on_wait)

    def _send_pending(self, pending: Pending, sample: bool, progress: Callable[[int, int], None] | None, phase: str | None = None) -> dict[str, Any]:
        try:
            return self.resume(pending, sample=sample, progress=progress, phase=phase)
        except RefusedSubmission:
            pending.discard()  # refused: a new run packs anew (and is admitted anew)
            raise

    @staticmethod
    def _refuse_size(size: int, rules: ParticipantRules, status: QuotaStatus) -> None:
        if size > rules.upload_max_bytes:
            raise _local(too_large(size, rules.upload_max_bytes))
        stored = load_refusal(status, incoming_bytes=size)  # the stored-uploads bound, now that the size is known
        if stored is not None:
            raise _local(stored)

    def offers_resumable(self) -> bool:
        """Whether the server offers tus 1.0 resumable uploads (OPTIONS /api/v1/uploads; an older server does not)."""
        answer = self._request("OPTIONS", UPLOADS)
        return answer.status_code == 204 and answer.headers.get("tus-resumable") == TUS_VERSION

    def _tus(self, method: str, url: str, **kwargs: Any) -> Answer:
        return self.fetcher.fetch(method, url, max_bytes=MAX_JSON_ANSWER, **kwargs)

    def resume(
        self, pending: Pending, *, sample: bool = False, progress: Callable[[int, int], None] | None = None, phase: str | None = None
    ) -> dict[str, Any]:
        """Send ``pending``'s archive from the last byte the server holds, again after each broken connection; its submission.

        Created under its key (again if it expired: the server then holds nothing of it and admits it anew);
        a 409 (another PATCH of it still held by the server, or an offset moved meanwhile) asks the offset again.
        """
        backoff = Backoff()
        location = f"{UPLOADS}/{pending.key}"
        params = _track_params(sample, phase)
        created = False
        while True:
            try:
                if not created:
                    answer = self._tus("POST", UPLOADS, params=params, headers=creation_headers(pending))
                    if answer.status_code != 201:
                        self._check(answer)
                        raise ClientError(f"server answered {answer.status_code} to the upload's creation")
                    created = True
                head = self._tus("HEAD", location, headers={"Tus-Resumable": TUS_VERSION})
                if head.status_code == 404:
                    created = False  # expired (or refused): create it again
                    backoff.failed("the upload expired")
                    continue
                offset = int(head.headers.get("upload-offset", "-1"))
                if head.status_code != 200 or not 0 <= offset <= pending.length:
                    raise ClientError(f"server answered {head.status_code} with offset {offset} to the upload's HEAD")
                backoff.progressed(offset)
                if offset < pending.length:
                    answer = self._tus(
                        "PATCH",
                        location,
                        timed=False,  # sending may take hours; the answer is still bounded
                        content=chunks_from(pending.archive, offset, progress, pending.length),
                        headers={
                            "Tus-Resumable": TUS_VERSION,
                            "Upload-Offset": str(offset),
                            "Content-Type": "application/offset+octet-stream",
                            "Content-Length": str(pending.length - offset),
                        },
                    )
                    if answer.status_code in (409, 404):
                        backoff.failed(f"server answered {answer.status_code}")
                        continue
                    if answer.status_code != 204:
                        self._check(answer)
                        raise ClientError(f"server answered {answer.status_code} to the upload's PATCH")
                    if not answer.headers.get(SUBMISSION_HEADER):
                        continue  # the server ended this PATCH early (it stalled): ask the offset again
                view = self._check(self._request("GET", location))
                pending.discard()
                return _view(view, "the upload's answer")
            except httpx.TransportError as error:
                backoff.failed(f"{type(error).__name__}: {error}")

    def quota(self) -> dict[str, Any]:
        """``GET /api/v1/quota``: per track, used and allowed submissions and when the next is possible."""
        return self.quota_with_time()[0]

    def quota_with_time(self) -> tuple[dict[str, Any], datetime]:
        """The quota and the server's clock when it answered (its ``Date`` header; this machine's clock without one).

        The window is judged on the server's clock, so a participant's wrong clock does not refuse (or admit) wrongly.
        """
        response = self._request("GET", "/api/v1/quota")
        answer = _shaped(self._check(response), dict, "the quota")
        moment = utcnow()
        with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):  # no Date, or not one: this machine's clock
            moment = parsedate_to_datetime(response.headers["date"]).astimezone(UTC)
        return answer, moment

    def finals(self) -> dict[str, Any]:
        """``GET /api/v1/finals``: the submissions chosen for the final standings."""
        return _shaped(self._check(self._request("GET", "/api/v1/finals")), dict, "the finals")  # type: ignore[no-any-return]

    def choose_finals(self, submission_ids: list[str]) -> dict[str, Any]:
        """``PUT /api/v1/finals``: choose the submissions for the final standings."""
        response = self._request("PUT", "/api/v1/finals", json={"submissions": submission_ids})
        if response.status_code == 404 and _error(response).startswith(UNKNOWN_DETAIL):
            raise UnknownSubmission(f"server answered 404: {_error(response)}: one of {submission_ids!r}", hint="`grader submissions` lists your ids")
        return _shaped(self._check(response), dict, "the finals")  # type: ignore[no-any-return]

    def _own(self, submission_id: str, suffix: str = "", *, max_bytes: int = MAX_JSON_ANSWER) -> Answer:
        """A request about one submission; 404 becomes :class:`UnknownSubmission` (its own exit status)."""
        response = self._request("GET", f"/api/v1/submissions/{submission_id}{suffix}", max_bytes=max_bytes)
        # The routes answer 404 "no such submission" for an id that is unknown or someone else's; the report route
        # also answers 404 for a known submission without a report yet, which is not an unknown id.
        if response.status_code == 404 and _error(response).startswith(UNKNOWN_DETAIL):
            raise UnknownSubmission(f"server answered 404: {_error(response)}: {submission_id!r}", hint="`grader submissions` lists your ids")
        return response

    def status(self, submission_id: str) -> dict[str, Any]:
        """One of your submissions (UnknownSubmission for an id the server does not know, or not yours)."""
        return _view(self._check(self._own(submission_id)), f"submission {submission_id!r}")

    def submissions(self) -> list[dict[str, Any]]:
        """Your submissions, newest first."""
        views = _shaped(self._check(self._request("GET", "/api/v1/submissions")), list, "the submissions")
        return [_view(view, "the submissions") for view in views]

    def report(self, submission_id: str) -> bytes:
        """The signed report (a DSSE envelope, unchecked: ``grader verify`` checks it)."""
        response = self._own(submission_id, "/report", max_bytes=MAX_REPORT_ANSWER)
        if response.status_code >= 400:
            raise ClientError(f"server answered {response.status_code}: {_error(response)}")
        return response.content

    def report_proof(self, submission_id: str) -> bytes | None:
        """The inclusion proof (C2SP tlog-proof) of the report :meth:`report` answers; None when the server has none."""
        response = self._own(submission_id, "/report.tlog-proof", max_bytes=MAX_PROOF_BYTES)
        return response.content if response.status_code == 200 else None

    def logs(self, submission_id: str) -> dict[str, str]:
        """The container logs of a sample-split run, by name (raw text: escape it before showing it)."""
        logs = _shaped(self._check(self._own(submission_id, "/logs")), dict, "the logs").get("logs")
        if not isinstance(logs, dict) or not all(isinstance(text, str) for text in logs.values()):
            raise ClientError("the logs: the server's answer is not an object of texts")
        return {str(name): text for name, text in logs.items()}

    def competition(self) -> dict[str, Any]:
        return _shaped(self._check(self._request("GET", "/api/v1/competition")), dict, "the competition")  # type: ignore[no-any-return]

    def notify(self, method: str, suffix: str = "", body: dict[str, str] | None = None) -> dict[str, Any]:
        """``/api/v1/notify[suffix]``: the participant's notification settings (docs/hosting.md, "Notifications");
        an answer without a body (204) is an empty object."""
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        answer = self._check(self._request(method, f"/api/v1/notify{suffix}", **kwargs))
        return {} if answer is None else _shaped(answer, dict, "the notification settings")  # type: ignore[no-any-return]

    def team(self, method: str, suffix: str = "", body: dict[str, str] | None = None) -> dict[str, Any]:
        """``/api/v1/team[suffix]``: the participant's team (docs/hosting.md, "Teams"); an answer without a body (204)
        is an empty object."""
        kwargs: dict[str, Any] = {} if body is None else {"json": body}
        answer = self._check(self._request(method, f"/api/v1/team{suffix}", **kwargs))
        return {} if answer is None else _shaped(answer, dict, "the team")  # type: ignore[no-any-return]

    def host_key(self) -> bytes:
        response = self._request("GET", "/host-key.pub", max_bytes=MAX_KEY_ANSWER)
        if response.status_code != 200:
            raise ClientError(f"server answered {response.status_code} for its public key")
        return response.content

    def wait(
        self,
        submission_id: str,
        *,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
        on_change: Callable[[dict[str, Any]], None] | None = None,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
        max_poll_s: float | None = None,
    ) -> dict[str, Any]:
        """Follow the submission until it ends; report each state change (``on_change``) and each view read (``on_poll``).

        It looks every ``poll_s`` seconds; with ``max_poll_s``, each look that finds the state unchanged waits
        :data:`POLL_GROWTH` times longer, up to ``max_poll_s``, and a changed state starts again at ``poll_s``: a view
        costs the server a few ms of CPU, and a grade may wait in the queue for hours.
        """
        last = None
        started = time.monotonic()
        delay = poll_s
        while True:
            view = self.status(submission_id)
            if on_poll is not None:
                on_poll(view)
            if view["state"] != last and on_change is not None:
                on_change(view)
            delay = poll_s if view["state"] != last or max_poll_s is None else min(max_poll_s, delay * POLL_GROWTH)
            last = view["state"]
            if view["state"] in TERMINAL:
                return view
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise ClientError(f"{submission_id} still {view['state']} after {timeout_s:.0f} s")
            time.sleep(delay)


def _track_params(sample: bool, phase: str | None) -> dict[str, str]:
    """The upload's query: its track, and the phase it is meant for (the server refuses it unless that phase is open)."""
    return {"sample": "true" if sample else "false"} | ({} if phase is None else {"phase": phase})


def _local(refusal: RefusedSubmission) -> RefusedSubmission:
    """The server's refusal, made here before uploading: the same line and status, and a hint that nothing was sent."""
    return RefusedSubmission(
        refusal_line(refusal.status, str(refusal), iso(refusal.retry_at)),
        status=refusal.status,
        retry_at=refusal.retry_at,
        hint="refused here before uploading, as the server would refuse it; nothing was sent",
    )


def token_from(option: str | None) -> str:
    """The token from ``--token`` or ``GRADER_TOKEN`` (:mod:`grader.hosting.environment`)."""
    token = option or environment().token
    if not token:
        raise ClientError("no token: set GRADER_TOKEN or pass --token (the host gives it to you)")
    return token
