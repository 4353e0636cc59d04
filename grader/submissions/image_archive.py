"""The structure of a ``docker save`` tar, checked without an engine.

A Docker submission carries its image as the tar ``docker save`` writes: a
``manifest.json`` naming one image's configuration and its layers. A tar whose
manifest names parts that are missing, cut short or malformed would pass a
glance at its member names and then fail only when the engine loads it, on a
worker, where nothing tells it from an engine fault. So intake reads it all,
here, before anything is stored: the manifest, the configuration (JSON, linux/amd64,
one ``rootfs`` diff id per layer, its file name its sha256 where the name is a
digest) and every layer (a readable tar whose sha256 is its diff id), within
bounds on sizes and counts. Both the legacy layout (``<id>/layer.tar``,
duplicate layers as relative links) and the OCI one (``blobs/sha256/<hex>``)
are read; a layer may be gzip-compressed.

What passes and is still refused by the engine (a layer naming a link target it
does not hold, say) is the submission's own failure: see
:mod:`grader.sandbox.intake`.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from grader import jsonio
from grader.errors import SubmissionError
from grader.text import quote_id

MANIFEST_NAME = "manifest.json"
#: Largest ``manifest.json`` read (real ones are a few hundred bytes).
MAX_MANIFEST_BYTES = 1 << 20
#: Largest image configuration read (real ones are a few kilobytes; long histories stay far below).
MAX_CONFIG_BYTES = 4 << 20
#: Most layers an image may have (overlay2 stacks at most 128).
MAX_LAYERS = 128
#: Most members of the tar itself (a layer is 1-4 members, plus the manifest, config and index files).
MAX_MEMBERS = 4 * MAX_LAYERS + 64
#: Longest member name and most path segments of one.
MAX_NAME_CHARS = 1024
MAX_NAME_DEPTH = 8
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]{64}")
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


def _quoted(name: object) -> str:
    """A member name quoted in a refusal: a layer's full name is 74 characters."""
    return quote_id(name, 200)


@dataclass(frozen=True)
class ImageArchive:
    """What the structure check learnt: the configuration's member name and sha256, the layer count and their unpacked bytes."""

    config: str
    config_sha256: str
    layers: int
    unpacked_bytes: int


class _Refused(Exception):
    """One line about what is wrong; :func:`check_image_archive` adds the archive's name."""


def _member_path(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise _Refused(f"{what} is not a member name")
    path = PurePosixPath(name)
    if len(name) > MAX_NAME_CHARS or path.is_absolute() or "\\" in name or "\x00" in name or ".." in path.parts or len(path.parts) > MAX_NAME_DEPTH:
        raise _Refused(f"{what} {_quoted(name)} is not a plain relative member name")
    return path.as_posix()


def _members(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    members: dict[str, tarfile.TarInfo] = {}
    for count, member in enumerate(tar, start=1):
        if count > MAX_MEMBERS:
            raise _Refused(f"more than {MAX_MEMBERS} members")
        members[PurePosixPath(member.name).as_posix()] = member
    return members


def _regular(members: dict[str, tarfile.TarInfo], name: str, what: str) -> tarfile.TarInfo:
    """The regular-file member ``name``, through one relative link (the legacy layout links duplicate layers)."""
    member = members.get(name)
    if member is not None and member.issym():
        target = PurePosixPath(name).parent / member.linkname
        parts: list[str] = []
        for part in target.parts:
            if part == "..":
                if not parts:
                    raise _Refused(f"{what} {_quoted(name)} links outside the archive")
                parts.pop()
            elif part != ".":
                parts.append(part)
        member = members.get("/".join(parts))
    if member is None:
        raise _Refused(f"{what} {_quoted(name)} is missing")
    if not member.isfile():
        raise _Refused(f"{what} {_quoted(name)} is not a regular file")
    return member


def _read_small(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int, what: str) -> bytes:
    if member.size > limit:
        raise _Refused(f"{what} is {member.size} bytes, over the {limit}-byte limit")
    handle = tar.extractfile(member)
    assert handle is not None  # a regular member has data
    data = handle.read(limit + 1)
    if len(data) != member.size:
        raise _Refused(f"{what} is cut short")
    return data


def _json(data: bytes, what: str) -> Any:
    try:
        return jsonio.loads(data)
    except jsonio.JsonError as error:
        raise _Refused(f"{what} is not valid JSON: {error}") from None


def _digest_of_name(name: str) -> str | None:
    """The sha256 a content-addressed member name states (``<hex>.json``, ``blobs/sha256/<hex>``), or None."""
    path = PurePosixPath(name)
    stem = path.name.removesuffix(".json")
    if _HEX.fullmatch(stem) and (path.name.endswith(".json") or path.parent.name == "sha256"):
        return stem
    return None


class _Hashing:
    """A read-only stream that hashes and counts what is read through it, up to a byte budget."""

    def __init__(self, source: IO[bytes], budget: int) -> None:
        self.source, self.budget = source, budget
        self.sha256 = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(_CHUNK if size is None or size < 0 else size)
        self.count += len(data)
        if self.count > self.budget:
            raise _Refused(f"the layers unpack to more than {self.budget} bytes")
        self.sha256.update(data)
        return data


def _layer_diff_id(tar: tarfile.TarFile, member: tarfile.TarInfo, budget: int, what: str) -> tuple[str, int]:
    """``(sha256:<hex> of the unpacked layer, its bytes)``, after reading it through as a tar."""
    raw = tar.extractfile(member)
    assert raw is not None
    head = raw.read(2)
    raw.seek(0)
    source: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if head == _GZIP_MAGIC else raw  # type: ignore[assignment]
    stream = _Hashing(source, budget)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as layer:  # type: ignore[call-overload]
            for _entry in layer:
                pass
        while stream.read(_CHUNK):  # the end-of-archive blocks count in the digest
            pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        raise _Refused(f"{what} is not a readable tar ({type(error).__name__}: {error})") from None
    return "sha256:" + stream.sha256.hexdigest(), stream.count


def _check_config(config: Any, layer_count: int) -> list[str]:
    """The config's diff ids, after its shape is checked."""
    if not isinstance(config, dict):
        raise _Refused("the image configuration is not a JSON object")
    if config.get("os") != "linux" or config.get("architecture") != "amd64":
        raise _Refused(f"the image is {quote_id(config.get('os'))}/{quote_id(config.get('architecture'))}; linux/amd64 is required")
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or not isinstance(diff_ids, list):
        raise _Refused('the image configuration has no "rootfs" of type "layers" with a "diff_ids" list')
    if not all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in diff_ids):
        raise _Refused('the image configuration\'s "rootfs.diff_ids" are not all sha256 digests')
    if len(diff_ids) != layer_count:
        raise _Refused(f"the manifest names {layer_count} layers but the image configuration has {len(diff_ids)} diff ids")
    return diff_ids


def _check(tar: tarfile.TarFile, max_unpacked_bytes: int) -> ImageArchive:
    members = _members(tar)
    manifest_member = members.get(MANIFEST_NAME)
    if manifest_member is None:
        raise _Refused("has no manifest.json: not a docker save tar")
    manifest = _json(_read_small(tar, _regular(members, MANIFEST_NAME, "manifest.json"), MAX_MANIFEST_BYTES, "manifest.json"), "manifest.json")
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        count = len(manifest) if isinstance(manifest, list) else 0
        raise _Refused(f"the archive must hold exactly one image, it holds {count}")
    entry = manifest[0]
    config_name = _member_path(entry.get("Config"), "the manifest's Config")
    layer_names = entry.get("Layers")
    if not isinstance(layer_names, list) or not layer_names:
        raise _Refused('the manifest\'s "Layers" is not a non-empty list')
    if len(layer_names) > MAX_LAYERS:
        raise _Refused(f"the image has {len(layer_names)} layers, over the limit of {MAX_LAYERS}")
    layers = [_member_path(name, "layer") for name in layer_names]
    config_bytes = _read_small(tar, _regular(members, config_name, "config"), MAX_CONFIG_BYTES, f"config {_quoted(config_name)}")
    config_sha256 = hashlib.sha256(config_bytes).hexdigest()
    stated = _digest_of_name(config_name)
    if stated is not None and stated != config_sha256:
        raise _Refused(f"config {_quoted(config_name)} does not match its name's sha256 (changed or cut short)")
    diff_ids = _check_config(_json(config_bytes, f"config {_quoted(config_name)}"), len(layers))
    unpacked = 0
    for index, (name, expected) in enumerate(zip(layers, diff_ids, strict=True)):
        member = _regular(members, name, f"layer {index + 1}")
        what = f"layer {index + 1} {_quoted(name)}"
        diff_id, size = _layer_diff_id(tar, member, max_unpacked_bytes - unpacked, what)
        unpacked += size
        if diff_id != expected:
            raise _Refused(f"{what} does not match the configuration's diff id {index + 1} (changed or cut short)")
    return ImageArchive(config=config_name, config_sha256=config_sha256, layers=len(layers), unpacked_bytes=unpacked)


def check_image_archive(path: Path, *, label: str, max_unpacked_bytes: int) -> ImageArchive:
    """Check that the ``docker save`` tar at ``path`` holds one well-formed image within bounds.

    ``label`` names the tar in the one-line :class:`SubmissionError` raised on the first problem
    (the submission's own name for it, never a server path).
    """
    try:
        with tarfile.open(path, "r:") as tar:
            return _check(tar, max_unpacked_bytes)
    except _Refused as refusal:
        raise SubmissionError(str(refusal), path=label) from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise SubmissionError(f"not a readable docker save tar ({type(error).__name__}: {error})", path=label) from None
