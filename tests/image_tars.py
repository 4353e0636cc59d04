"""Hand-made ``docker save`` tars for intake tests: sound ones, and ones missing, cutting or corrupting a part.

Written with tarfile and hashlib only (no engine), in the legacy layout ``docker save``
of Docker 20-24 writes: ``<config sha256>.json``, ``<id>/layer.tar``, ``manifest.json``.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar holding ``members`` (info, data) in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return buffer.getvalue()


def file_member(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def link_member(name: str, target: str, *, hard: bool = False) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info, None


def layer(files: dict[str, bytes] | None = None) -> bytes:
    """A layer: a tar of ``files`` (one small script by default)."""
    files = files if files is not None else {"run": b"#!/bin/sh\necho hello\n"}
    return tar_of([file_member(name, data, 0o755) for name, data in files.items()])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_tar(
    layers: list[bytes],
    *,
    config: dict[str, Any] | None = None,
    config_bytes: bytes | None = None,
    stored_layers: dict[int, bytes] | None = None,
    omit: tuple[str, ...] = (),
    extra: list[tuple[tarfile.TarInfo, bytes | None]] | None = None,
    layer_names: list[str] | None = None,
) -> bytes:
    """A ``docker save`` tar of one image whose diff ids are those of ``layers``.

    ``stored_layers`` replaces what is stored for some layers (cut short, corrupted) without changing the
    configuration; ``config_bytes`` replaces the configuration's bytes (kept under the name of the real one);
    ``omit`` leaves out members ("config", "layer0", "layer1", ...).
    """
    document = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"User": "10001", "Cmd": ["/run"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha256(body) for body in layers]},
    }
    document.update(config or {})
    real_config = json.dumps(document, sort_keys=True).encode()
    config_name = sha256(real_config) + ".json"
    names = layer_names or [f"{sha256(body + bytes([n]))}/layer.tar" for n, body in enumerate(layers)]
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    if "config" not in omit:
        members.append(file_member(config_name, real_config if config_bytes is None else config_bytes))
    for n, (name, body) in enumerate(zip(names, layers, strict=True)):
        if f"layer{n}" not in omit:
            members.append(file_member(name, (stored_layers or {}).get(n, body)))
    members.extend(extra or [])
    members.append(file_member("manifest.json", json.dumps([{"Config": config_name, "RepoTags": None, "Layers": names}]).encode()))
    return tar_of(members)


def image_submission(folder: Path, tar: bytes, *, name: str = "crafted") -> Path:
    """A Docker submission folder carrying ``tar`` as its ``image.tar``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "image.tar").write_bytes(tar)
    (folder / "submission.json").write_text(
        json.dumps({"kind": "docker", "name": name, "mode": "retrieve", "image": "image.tar", "training": {"setting": "zero-shot", "datasets": []}}),
        encoding="utf-8",
    )
    return folder


def engine_refused_tar() -> bytes:
    """Sound in every part intake checks, refused by ``docker load``: the layer hard-links a file it does not hold."""
    return image_tar([tar_of([link_member("link", "nothere", hard=True)])])
