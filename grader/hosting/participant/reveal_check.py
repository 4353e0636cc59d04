"""``grader reveal-check``: check a finished competition's published numbers from outside, as anyone can.

The checks of docs/leaderboard.md ("Checking the published numbers after the end"):
the revealed partition secret hashes to the commitment published from day one; every
private-board entry's full signed report verifies with the host key; the partition is
re-derived from the secret (docs/statistics.md) and each entry's private score is
computed again from the report's per-query values with the benchmark's own aggregation.
Nothing here trusts the server's arithmetic: only its signed reports and the secret.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from grader import jsonio
from grader.errors import VerificationError
from grader.hosting.errors import ClientError
from grader.hosting.participant.fetch import Fetcher as BoundedFetcher
from grader.reports.verify import verify_envelope
from grader.stats.aggregate import ScoreTable
from grader.stats.partition import partition
from grader.text import bounded

#: The board rounds scores to this many decimals; a re-derived score must round to the same value.
BOARD_DECIMALS = 4
MAX_ANSWER_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Line:
    """One result line: ``ok`` or not, and what was checked."""

    ok: bool
    text: str


class Fetcher:
    """GETs from one server under the bounds of :mod:`grader.hosting.participant.fetch` (at most :data:`MAX_ANSWER_BYTES`
    each); any transport failure or error answer is a :class:`ClientError`."""

    def __init__(self, server: str, timeout: float = 60.0) -> None:
        self.server = server.rstrip("/")
        self.http = httpx.Client(base_url=self.server, timeout=httpx.Timeout(timeout, connect=10.0), follow_redirects=False)
        self.bounded = BoundedFetcher(ClientError, http=self.http)

    def get(self, path: str) -> bytes:
        """The body of ``GET path`` (status 200 only)."""
        try:
            answer = self.bounded.fetch("GET", path, max_bytes=MAX_ANSWER_BYTES)
        except httpx.HTTPError as error:
            raise ClientError(f"{self.server}: cannot reach the server ({type(error).__name__})") from None
        if answer.status_code != 200:
            raise ClientError(f"{self.server}{path}: HTTP {answer.status_code}")
        return answer.content

    def json(self, path: str) -> Any:
        """``GET path`` as JSON."""
        try:
            return jsonio.loads(self.get(path))
        except jsonio.JsonError as error:
            raise ClientError(f"{self.server}{path}: not JSON ({error})") from None

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()


def public_key_from_pem(data: bytes, where: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM bytes (``where`` names their source in the error)."""
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise VerificationError(f"{where}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise VerificationError(f"{where}: not an Ed25519 public key")
    return key


#: What a blinding key id hashes before the key's bytes (docs/leaderboard.md).
BLINDING_KEY_ID_PREFIX = b"grader blinding key v1\x00"


def blinding_line(blinding: dict[str, Any]) -> Line:
    """Whether the revealed blinding key is the one whose id was published from the first day."""
    key_id = str(blinding.get("key_id"))
    key = blinding.get("key")
    if not isinstance(key, str):
        return Line(False, f"the blinding key {bounded(key_id)} is not revealed")
    try:
        revealed = bytes.fromhex(key)
    except ValueError:
        return Line(False, "the revealed blinding key is not hex")
    if hashlib.sha256(BLINDING_KEY_ID_PREFIX + revealed).hexdigest() != key_id:
        return Line(False, f"the revealed blinding key does not match its published id {bounded(key_id)}")
    return Line(True, f"blinding key matches its published id {key_id}")


def private_score(report: dict[str, Any], secret: bytes, public_fraction: float) -> float:
    """A full report's private-part score: its per-query values restricted to each task's private queries, aggregated."""
    values = {task: t["per_query"]["values"] for task, t in report["tasks"].items()}
    kept = {}
    for task, per_query in values.items():
        private = set(partition(secret, task, list(per_query), public_fraction).private)
        kept[task] = {q: x for q, x in per_query.items() if q in private}
    aggregate = report["aggregate"]
    table = ScoreTable.from_values(["entry"], aggregate["measure"], [kept], aggregate.get("group_members", {}))
    return table.score(0)


def check(fetch: Callable[[str], bytes], fetch_json: Callable[[str], Any], key: Ed25519PublicKey) -> Iterator[Line]:
    """Every check, one :class:`Line` each; stops early only where later checks cannot run (no secret yet)."""
    info = fetch_json("/api/v1/partition")
    if not info.get("ended") or not info.get("secret"):
        yield Line(False, "the competition has not ended: no secret revealed yet (nothing to check before the end)")
        return
    secret = bytes.fromhex(info["secret"])
    commitment = info["commitment"]
    if hashlib.sha256(secret).hexdigest() == commitment:
        yield Line(True, f"secret matches the commitment sha256:{commitment}")
    else:
        yield Line(False, f"the revealed secret does not hash to the commitment sha256:{bounded(str(commitment))}")
        return
    blinding = info.get("blinding")  # servers with a blinding key publish it (docs/leaderboard.md); older ones do not
    if isinstance(blinding, dict):
        yield blinding_line(blinding)
    fraction = float(info["public_fraction"])
    checked = 0
    for board in fetch_json("/api/v1/leaderboard?part=private")["boards"]:
        for entry in board["entries"]:
            label = f"{bounded(str(entry['submission']))} ({bounded(str(board['setting']))})"
            try:
                report = verify_envelope(fetch(entry["report"]), key).report
            except VerificationError as error:
                yield Line(False, f"{label}: the report does not verify with the host key: {error}")
                continue
            staged = (report.get("sandbox") or {}).get("blinding")
            if isinstance(blinding, dict) and isinstance(staged, dict) and staged.get("key_id") != blinding.get("key_id"):
                yield Line(False, f"{label}: graded under another blinding key than the committed one")
                continue
            derived = round(private_score(report, secret, fraction), BOARD_DECIMALS)
            if derived == entry["score"]:
                yield Line(True, f"{label}: private score {derived:.{BOARD_DECIMALS}f} re-derived")
                checked += 1
            else:
                yield Line(False, f"{label}: the board says {entry['score']}, the signed report gives {derived:.{BOARD_DECIMALS}f}")
    yield Line(True, f"{checked} private score(s) re-derived from signed reports")
