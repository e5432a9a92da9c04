"""Tokens: random secrets shown once; the store keeps only their hash."""

from __future__ import annotations

import hashlib
import secrets


def hash_token(token: str) -> str:
    """Tokens are random 256-bit secrets, so one SHA-256 is enough to store them safely."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "sp_" + secrets.token_urlsafe(32)
