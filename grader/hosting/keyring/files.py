"""Where the competition's keys and secrets live: one folder of the state folder, one file each.

Every path below ``STATE/keys`` is spelled here and nowhere else, so the loaders, the
scoring jobs that name the blinding key's file, and the admin commands agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.reports.keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME

#: The state folder's subfolder that holds them (0700, like the state folder).
KEYS_FOLDER = "keys"


@dataclass(frozen=True)
class KeyFiles:
    """The key and secret files inside the keys folder ``folder``."""

    folder: Path

    @property
    def host_private(self) -> Path:
        """The host's Ed25519 signing key (PKCS#8 PEM, 0600, encrypted under the passphrase when one is set)."""
        return self.folder / PRIVATE_KEY_NAME

    @property
    def host_public(self) -> Path:
        """Its public half (PEM, served as ``/host-key.pub``)."""
        return self.folder / PUBLIC_KEY_NAME

    @property
    def log_private(self) -> Path:
        """The transparency log's signing key (kept like the host key)."""
        return self.folder / "log.key"

    @property
    def log_verifier(self) -> Path:
        """The log's verifier key (``<origin>+<hex id>+<base64 key>``), the one clients pass as ``--log-key``."""
        return self.folder / "log.vkey"

    @property
    def partition_secret(self) -> Path:
        """The partition secret (hex, 0600), revealed at the end."""
        return self.folder / "partition.secret"

    @property
    def blinding_secret(self) -> Path:
        """The blinding key (hex, 0600), revealed at the end."""
        return self.folder / "blinding.secret"

    @property
    def session_secret(self) -> Path:
        """The session cookies' key (hex, 0600), never served."""
        return self.folder / "session.secret"


def key_files(state_root: Path) -> KeyFiles:
    """The key files of the state folder ``state_root``."""
    return KeyFiles(state_root / KEYS_FOLDER)
