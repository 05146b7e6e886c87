"""Group records in ZooKeeper, written only by the elected active coordinator (fenced writes).

One persistent znode per group, ``<root>/g_<quoted group id>``, holding the JSON record compressed
with zlib behind a 2-byte format tag (``Z1``). A 100-member, 1,000-task record is ~100 KB of JSON
and a few KB compressed; ZooKeeper refuses znodes over ``jute.maxbuffer`` (1 MB by default), so a
record that is still over ``max_bytes`` (default 1,000,000) after compression raises ``StoreError``
naming the group and its size instead of a cryptic connection loss.

Fencing: every write is one ZooKeeper transaction ``[check(epoch, my epoch), check(leader, my
version), set/create/delete]`` (see ``coordinator.ha.election``). Any other coordinator winning bumps
the epoch znode, and our session ending removes our leader znode, so a coordinator that has lost
leadership cannot write, even if it has not noticed yet: the transaction fails and ``save`` raises
``FencedError``. ``save`` also fails at once, without a round trip, when the election already knows
we are not active (e.g. the connection is SUSPENDED). A new active's reads come after its winning
transaction in ZooKeeper's order, so ``load_all`` sees every write any earlier active got acknowledged.

Loading is on a failover's path (a dead coordinator's shards wait for it), so it costs round trips,
not one per group: the listing, then the records' reads pipelined ``READS_AT_ONCE`` at a time (a
bounded backlog, so the session's pings are not queued behind thousands of reads). A missing root
is no groups: the load does not create it (the first write does). A shard's election reads the
listing in the same pipeline as its winning transaction (``Listed``), after it in ZooKeeper's
order, so a won shard's load is one round trip for up to ``READS_AT_ONCE`` groups.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from groupcoord.coordinator.ha.election import Fence
from groupcoord.coordinator.storage.store import FencedError, GroupRecord, StoreError

__all__ = ["MAX_RECORD_BYTES", "READS_AT_ONCE", "Fencer", "Listed", "ZooKeeperStore"]

#: Default ceiling for one compressed record (ZooKeeper's default jute.maxbuffer is 1 MiB - 1).
MAX_RECORD_BYTES = 1_000_000
#: Group records read in one pipeline by ``load_all``.
READS_AT_ONCE = 256

class Fencer(Protocol):
    """What the store needs of an election (``LeaderElection``, or one shard's ``ShardFencer``)."""

    def fence(self) -> Fence:
        """The checks a write must carry; raises ``FencedError`` when not in office."""
        ...

    def recheck(self) -> None: ...


@runtime_checkable
class Listed(Protocol):
    """A fencer that may hold the group names already, read right behind the win of its term."""

    def listing(self) -> tuple[int, list[str]] | None:
        """(this term's epoch, the names under the store's root read right after its win), once; None:
        not read, list them. A store that wrote in that term lists for itself (the names are older)."""
        ...


_TAG = b"Z1"
_PREFIX = "g_"


class ZooKeeperStore:
    """A ``GroupStore`` in ZooKeeper whose writes are fenced by ``election``.

    Calls block for one ZooKeeper round trip, bounded by ``op_timeout``; call them from one thread
    at a time (the coordinator's loop thread). The kazoo client belongs to the caller.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        election: Fencer,
        *,
        op_timeout: float = 10.0,
        max_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        """``root`` holds the group znodes, e.g. ``/groupcoord/<cluster>/groups``."""
        self._client = client
        self.root = root.rstrip("/")
        self._election = election
        self._op_timeout = op_timeout
        self._max_bytes = max_bytes
        self._root_ready = False
        self._written_epoch = -1  # the last fence epoch this store wrote under

    def _path(self, group_id: str) -> str:
        return f"{self.root}/{_PREFIX}{quote(group_id, safe='')}"

    def _wait(self, async_result: Any) -> Any:
        try:
            return async_result.get(timeout=self._op_timeout)
        except SessionExpiredError as exc:
            self._election.recheck()
            raise FencedError(f"ZooKeeper session expired: {exc!r}") from exc
        except (KazooException, KazooTimeoutError) as exc:
            raise StoreError(f"ZooKeeper call failed (outcome unknown): {exc!r}") from exc

    def _ensure_root(self) -> None:
        if not self._root_ready:
            try:
                self._client.ensure_path(self.root)
            except KazooException as exc:
                raise StoreError(f"cannot create {self.root} in ZooKeeper: {exc!r}") from exc
            self._root_ready = True

    def load_all(self) -> dict[str, GroupRecord]:
        """Every group; reads are idempotent, so a dropped connection is retried within ``op_timeout``."""
        retry = KazooRetry(max_tries=10, delay=0.1, backoff=2, max_delay=1.0, deadline=self._op_timeout)
        try:
            raw = retry(self._load_once)
        except SessionExpiredError as exc:
            raise StoreError(f"cannot load groups from ZooKeeper: session expired: {exc!r}") from exc
        except (KazooException, KazooTimeoutError, RetryFailedError) as exc:
            raise StoreError(f"cannot load groups from ZooKeeper: {exc!r}") from exc
        return {group_id: _decode(group_id, data) for group_id, data in raw.items()}

    def _names(self) -> list[str]:
        taken = self._election.listing() if isinstance(self._election, Listed) else None
        if taken is not None and taken[0] > self._written_epoch:
            listed = taken[1]
        else:
            try:
                listed = self._client.get_children_async(self.root).get(timeout=self._op_timeout)
            except NoNodeError:
                return []  # no group was ever written here
        return [name for name in listed if name.startswith(_PREFIX)]

    def _load_once(self) -> dict[str, bytes]:
        names = self._names()
        out: dict[str, bytes] = {}
        for start in range(0, len(names), READS_AT_ONCE):
            batch = names[start:start + READS_AT_ONCE]
            pending = [(name, self._client.get_async(f"{self.root}/{name}")) for name in batch]
            for name, result in pending:
                try:
                    data, _ = result.get(timeout=self._op_timeout)
                except NoNodeError:
                    continue  # deleted between the listing and the read
                out[unquote(name[len(_PREFIX):])] = data
        return out

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        data = _encode(group_id, record, self._max_bytes)
        self._ensure_root()
        path = self._path(group_id)
        # The group usually exists: try set, then create (a single writer makes the race moot,
        # and each attempt is fenced on its own).
        for create in (False, True, False):
            fence = self._election.fence()
            self._written_epoch = max(self._written_epoch, fence.epoch)
            tx = self._client.transaction()
            fence.apply(tx)
            if create:
                tx.create(path, data)
            else:
                tx.set_data(path, data)
            results = self._wait(tx.commit_async())
            error = self._fenced_or_error(results)
            if error is None:
                return
            if not isinstance(error, (NoNodeError, NodeExistsError)):
                raise StoreError(f"cannot save group {group_id!r}: {error!r}") from error
        raise StoreError(f"cannot save group {group_id!r}: its znode keeps appearing and disappearing")

    def delete(self, group_id: str) -> None:
        self._ensure_root()
        fence = self._election.fence()
        self._written_epoch = max(self._written_epoch, fence.epoch)
        tx = self._client.transaction()
        fence.apply(tx)
        tx.delete(self._path(group_id))
        error = self._fenced_or_error(self._wait(tx.commit_async()))
        if error is not None and not isinstance(error, NoNodeError):
            raise StoreError(f"cannot delete group {group_id!r}: {error!r}") from error

    def close(self) -> None:
        """Nothing to release: the kazoo client and the election belong to the caller."""

    def _fenced_or_error(self, results: list[Any]) -> Exception | None:
        """None on success; raise FencedError if a fence check failed; else the failing op's error."""
        if not any(isinstance(r, Exception) for r in results):
            return None
        for r in results[:2]:
            if isinstance(r, (BadVersionError, NoNodeError)):
                self._election.recheck()
                raise FencedError("write refused by ZooKeeper: another coordinator is active (epoch moved on)")
        real = [r for r in results[2:] if isinstance(r, ZookeeperError) and type(r).__name__ not in _ROLLBACK]
        return real[0] if real else StoreError(f"transaction failed: {results!r}")


_ROLLBACK = {"RolledBackError", "RuntimeInconsistency"}


def _encode(group_id: str, record: Mapping[str, Any], max_bytes: int) -> bytes:
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise StoreError(f"record of group {group_id!r} is not JSON-serialisable: {exc}") from exc
    data = _TAG + zlib.compress(text, 6)
    if len(data) > max_bytes:
        raise StoreError(
            f"record of group {group_id!r} is {len(data):,} bytes after zlib compression "
            f"({len(text):,} raw), over the {max_bytes:,}-byte ZooKeeper znode limit"
        )
    return data


def _decode(group_id: str, data: bytes) -> GroupRecord:
    problem = f"unknown format tag {data[:2]!r}" if not data.startswith(_TAG) else ""
    record: object = None
    if not problem:
        try:
            record = json.loads(zlib.decompress(data[len(_TAG):]))
        except (ValueError, zlib.error) as exc:
            problem = str(exc)
    if not problem and not isinstance(record, dict):
        problem = "not a JSON object"
    if problem or not isinstance(record, dict):
        raise StoreError(f"record of group {group_id!r} in ZooKeeper is corrupt: {problem}")
    return record
