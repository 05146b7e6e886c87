"""Bearer tokens, kept hashed: the server holds only each token's SHA-256, never the token.

A token file has one line per token: the principal's name and the token's hash, ``sha256:`` and 64
hex digits; ``#`` starts a comment::

    # name           hash of the token (printf %s "$TOKEN" | sha256sum)
    worker-shop      sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8

A plain hash is enough because tokens are random (``openssl rand -hex 32`` gives 256 bits): a
password would need a slow, salted hash (scrypt); a random token cannot be guessed from its hash
faster than by trying tokens at the server. Several lines may carry the same name (rotation: the
old and the new token both work until the old line is removed and the file reloaded).
The token ``t`` authenticates as principal ``User:<name>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["TokenFileError", "TokenTable", "hash_token", "parse_tokens"]

_LINE = re.compile(r"^(?P<name>\S+)\s+sha256:(?P<hash>[0-9a-fA-F]{64})$")
_NAME = re.compile(r"^[A-Za-z0-9._@=,+-]+$")


class TokenFileError(ValueError):
    """A token file line that is not ``NAME sha256:HEX`` (the message names the line, never a token)."""


def hash_token(token: str) -> str:
    """The hex SHA-256 of ``token`` as the file stores it (without the ``sha256:`` prefix)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenTable:
    """Hash -> principal. ``principal_for`` looks the presented token's hash up: the lookup's timing
    depends on the hash, not on the token, so it tells an attacker nothing they can use."""

    by_hash: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def principal_for(self, token: str) -> str | None:
        name = self.by_hash.get(hash_token(token))
        return None if name is None else f"User:{name}"

    def __len__(self) -> int:
        return len(self.by_hash)


def parse_tokens(text: str, *, source: str = "token file") -> TokenTable:
    by_hash: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _LINE.match(line)
        if match is None:
            raise TokenFileError(f"{source} line {number}: expected 'NAME sha256:<64 hex digits>'")
        name, digest = match["name"], match["hash"].lower()
        if not _NAME.match(name):
            raise TokenFileError(f"{source} line {number}: name {name!r} may use letters, digits and ._@=,+- only")
        if by_hash.get(digest, name) != name:
            raise TokenFileError(f"{source} line {number}: this hash is already given to {by_hash[digest]!r}")
        by_hash[digest] = name
    return TokenTable(MappingProxyType(by_hash))
