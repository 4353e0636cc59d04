"""Bearer tokens: high-entropy random strings of which only the SHA-256 is stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_token(prefix: str) -> tuple[str, str]:
    """A fresh token (``prefix`` + 256 random bits, URL-safe) and its SHA-256 hex digest."""
    token = f"{prefix}_{secrets.token_urlsafe(32)}"
    return token, token_digest(token)


def token_digest(token: str) -> str:
    """SHA-256 hex of a token. A plain hash suffices: the token itself has 256 bits of entropy."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def same_digest(stored: str, presented: str) -> bool:
    """Constant-time comparison of two digests."""
    return hmac.compare_digest(stored.encode("ascii"), presented.encode("ascii"))
