"""OAuth installations at rest: sealed with Fernet when TOKEN_ENCRYPTION_KEY is set, stored as they are
otherwise.

A sealed record is `{"fernet": "<token>"}`: the whole installation (every token, refresh token and id in it)
as JSON, encrypted and authenticated with the first key (cryptography's Fernet: AES-128-CBC and HMAC-SHA256).
Every key decrypts (MultiFernet), so a key is rotated by putting a new one first, running
`mlresearch-bot migrate` (it re-seals every installation with the first key), then dropping the old one.
A plain record (written before a key was set) is read as it is and sealed the next time it is saved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from bot.errors import SecretError

SEALED = "fernet"


class TokenCipher:
    """Fernet over TOKEN_ENCRYPTION_KEY's keys: the first seals, every one opens."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("TokenCipher needs at least one key")
        self._keys = MultiFernet([Fernet(key) for key in keys])

    @classmethod
    def of(cls, keys: Sequence[str]) -> TokenCipher | None:
        """The cipher for `keys` (Settings.token_encryption_keys), or None when there is none."""
        return cls(keys) if keys else None

    def encrypt(self, data: bytes) -> str:
        return self._keys.encrypt(data).decode()

    def decrypt(self, token: str) -> bytes:
        return self._keys.decrypt(token.encode())


def seal(record: dict[str, Any], cipher: TokenCipher | None) -> dict[str, Any]:
    """What the store keeps for `record`: sealed with the cipher's first key, or `record` itself without
    one."""
    if cipher is None:
        return record
    return {SEALED: cipher.encrypt(json.dumps(record).encode())}


def unseal(stored: dict[str, Any], cipher: TokenCipher | None) -> dict[str, Any]:
    """The record the store kept: opened when sealed, as it is when plain. Raises SecretError."""
    token = stored.get(SEALED)
    if not isinstance(token, str) or len(stored) != 1:
        return stored
    if cipher is None:
        raise SecretError("the installation is encrypted and TOKEN_ENCRYPTION_KEY is not set")
    try:
        opened = json.loads(cipher.decrypt(token))
    except InvalidToken:
        raise SecretError("the installation was encrypted with a key TOKEN_ENCRYPTION_KEY does not hold") \
            from None
    except ValueError:
        raise SecretError("the installation's encrypted data is damaged") from None
    if not isinstance(opened, dict):
        raise SecretError("the installation's encrypted data is damaged")
    return opened
