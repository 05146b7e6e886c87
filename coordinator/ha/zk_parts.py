"""How a group's parts (per-member records) sit in ZooKeeper, apart from the I/O (``zk_store``).

A group is its znode ``g_<id>`` (its record and a generation, format ``Z2``) and children: one per
part written on its own (``<quoted key>``: the part and the generation it was written in), and
``_whole``, every part of the group as its last whole write (``save``) left them. A whole write
moves the generation on, so children of an older generation are stale and ignored when loading (and
deleted after, as a chore); a part deleted while ``_whole`` still holds it is written as a tombstone
(value null). Every change of a group is one fenced transaction (its znode when its record changed,
and its children), so a load never sees half a change; a change too large for one transaction
(``jute.maxbuffer``) is written whole instead.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from groupcoord.coordinator.storage.store import GroupRecord, StoreError

__all__ = ["Known", "OP_BYTES", "TAG_V1", "TAG_V2", "WHOLE", "assemble", "child_name", "decode", "encode", "key_of"]

TAG_V1 = b"Z1"  # the record alone (written before parts)
TAG_V2 = b"Z2"  # {"gen": n, "record": ..., "parts": {...}} for the group; {"gen": n, "v": ...} for a part
OP_BYTES = 128  # what one operation of a transaction costs beside its data and path (an estimate, high)
WHOLE = "_whole"  # the child holding every part as the last whole write left them (no key quotes to it)


@dataclass
class Known:
    """What the store knows of one group's znodes (from its load and its own writes since)."""

    gen: int = 0  # -1: written whole in the old format with parts inside: the next write must be whole
    record: GroupRecord = field(default_factory=dict)  # the group's own record as last written
    inside: set[str] = field(default_factory=set)  # the parts ``_whole`` holds (in this generation)
    children: set[str] = field(default_factory=set)  # child znode names that exist, any generation


def child_name(key: str) -> str:
    return quote(key, safe="")


def key_of(name: str) -> str:
    return unquote(name)


def encode(group_id: str, document: Mapping[str, Any], tag: bytes = TAG_V2) -> bytes:
    try:
        text = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise StoreError(f"record of group {group_id!r} is not JSON-serialisable: {exc}") from exc
    return tag + zlib.compress(text, 6)


def decode(group_id: str, data: bytes) -> tuple[bytes, dict[str, Any]]:
    """(format tag, document); raises StoreError naming the group when it is not one of ours."""
    tag = data[:2]
    problem = f"unknown format tag {tag!r}" if tag not in (TAG_V1, TAG_V2) else ""
    document: object = None
    if not problem:
        try:
            document = json.loads(zlib.decompress(data[2:]))
        except (ValueError, zlib.error) as exc:
            problem = str(exc)
    if not problem and not isinstance(document, dict):
        problem = "not a JSON object"
    if problem or not isinstance(document, dict):
        raise StoreError(f"record of group {group_id!r} in ZooKeeper is corrupt: {problem}")
    return tag, document


def assemble(group_id: str, head: bytes, children: Mapping[str, bytes]) -> tuple[GroupRecord, Known]:
    """The group's record, its parts in its ``parts`` entry (``_whole``'s, then the other children of
    the same generation over them), and what the store then knows of it."""
    tag, document = decode(group_id, head)
    if tag == TAG_V1:  # written before parts: the record alone (parts inside it: its next write is whole)
        gen = -1 if document.get("parts") else 0
        return document, Known(gen, {k: v for k, v in document.items() if k != "parts"}, set(), set(children))
    gen, record = document["gen"], document["record"]
    known = Known(gen, record, set(), set(children))
    parts: dict[str, Any] = {}
    whole = children.get(WHOLE)
    if whole is not None:
        _, inside = decode(group_id, whole)
        if inside.get("gen") == gen:
            parts.update(inside["parts"])
            known.inside = set(parts)
    for name, data in children.items():
        if name == WHOLE:
            continue
        _, child = decode(group_id, data)
        if child.get("gen") != gen:
            continue  # left by an older generation: stale
        if child.get("v") is None:
            parts.pop(key_of(name), None)
        else:
            parts[key_of(name)] = child["v"]
    return ({**record, "parts": parts} if parts else dict(record)), known
