"""Which shard a group belongs to: the one hash every coordinator and client agrees on.

``shard_of(group_id, shards)`` is the first 8 bytes of the SHA-256 of the UTF-8 group id, read
as an unsigned big-endian integer, modulo ``shards``. Not Python's ``hash`` (salted per process)
and not CRC-32 (linear: ids differing in one character land in related shards). SHA-256 is in
every language's standard library, so a client in another language can compute the same shard.
"""

from __future__ import annotations

import hashlib

__all__ = ["shard_of"]


def shard_of(group_id: str, shards: int) -> int:
    """The shard of ``group_id`` among ``shards`` (>= 1). Example: ``shard_of("orders", 64)``."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    if shards == 1:
        return 0
    digest = hashlib.sha256(group_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards
