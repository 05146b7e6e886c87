"""Group records in ZooKeeper, written only by the elected active coordinator (fenced writes).

One persistent znode per group, ``<root>/g_<quoted group id>``, holding the JSON record compressed
with zlib behind a 2-byte format tag (``Z1``). A 100-member, 1,000-task record is ~100 KB of JSON
and a few KB compressed; ZooKeeper refuses znodes over ``jute.maxbuffer`` (1 MB by default), so a
record that is still over ``max_bytes`` (default 1,000,000) after compression raises ``StoreError``
naming the group and its size instead of a cryptic connection loss.

A group's parts (per-member records of a consumer group) are child znodes of the group's, written
with it in the same transaction (``coordinator.ha.zk_parts`` says how they sit); a change too large
for one transaction is written whole (``WholeWriteNeeded``: the runtime then gives the group whole).

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
order, so a won shard's load is one round trip for up to ``READS_AT_ONCE`` groups (and one more for
the per-member parts of those that have them); the election also reads the first records ahead, while
its claim is in flight (``Listing.heads``: ``coordinator.ha.shard_reads`` says when that is safe), so
for most shards the load waits on reads already answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable
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
from groupcoord.coordinator.ha.zk_parts import OP_BYTES, WHOLE, Known, assemble, child_name, encode
from groupcoord.coordinator.storage.store import FencedError, GroupRecord, StoreError, WholeWriteNeeded

__all__ = ["MAX_RECORD_BYTES", "READS_AT_ONCE", "Fencer", "Listed", "Listing", "ZooKeeperStore"]

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


class Listing(NamedTuple):
    """The children of a store's root as read with the win of a term, and reads of some of them sent then."""

    epoch: int
    names: list[str]
    heads: Mapping[str, Any]  # child name -> its ``get_async`` (answered, or in flight), for some names


@runtime_checkable
class Listed(Protocol):
    """A fencer that may hold the group names already, read with the win of its term."""

    def listing(self) -> Listing | None:
        """The names under the store's root as of this term's win (and some records read then), once;
        None: not read, list them. A store that wrote in that term lists for itself (they are older)."""
        ...


_TAG = b"Z1"
_PREFIX = "g_"


_SWEEP_BATCH = 1_000  # deletes per transaction when sweeping stale children (each a short path)


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
        self._known: dict[str, Known] = {}  # per group: its generation and znodes (``zk_parts.Known``)
        self._unsure: set[str] = set()  # groups whose last write failed: ``_known`` is read again

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
        records: dict[str, GroupRecord] = {}
        self._known, self._unsure = {}, set()
        for group_id, (head, children) in raw.items():
            records[group_id], self._known[group_id] = assemble(group_id, head, children)
        return records

    def _names(self) -> tuple[list[str], Mapping[str, Any]]:
        """The group znodes' names, and the reads of some of them already sent (the election's, at its win)."""
        taken = self._election.listing() if isinstance(self._election, Listed) else None
        heads: Mapping[str, Any] = {}
        if taken is not None and taken.epoch > self._written_epoch:
            listed, heads = taken.names, taken.heads
        else:
            try:
                listed = self._client.get_children_async(self.root).get(timeout=self._op_timeout)
            except NoNodeError:
                return [], {}  # no group was ever written here
        return [name for name in listed if name.startswith(_PREFIX)], heads

    def _load_once(self) -> dict[str, tuple[bytes, dict[str, bytes]]]:
        client, timeout = self._client, self._op_timeout
        names, ahead = self._names()
        out: dict[str, tuple[bytes, dict[str, bytes]]] = {}
        for start in range(0, len(names), READS_AT_ONCE):
            batch = names[start:start + READS_AT_ONCE]
            heads = [(name, ahead[name] if name in ahead else client.get_async(f"{self.root}/{name}")) for name in batch]
            parented: list[tuple[str, bytes, Any]] = []
            for name, head in heads:
                try:
                    data, stat = head.get(timeout=timeout)
                except NoNodeError:
                    continue  # deleted between the listing and the read
                if stat.numChildren:  # a group with parts (per-member records): list them, in one more round trip
                    parented.append((name, data, client.get_children_async(f"{self.root}/{name}")))
                else:
                    out[unquote(name[len(_PREFIX):])] = (data, {})
            reads: list[tuple[str, bytes, list[tuple[str, Any]]]] = []
            for name, data, listing in parented:
                try:
                    children = listing.get(timeout=timeout)
                except NoNodeError:
                    continue
                reads.append((name, data, [(child, client.get_async(f"{self.root}/{name}/{child}"))
                                           for child in children]))
            for name, data, pending in reads:  # every group's parts read in one more round trip
                out[unquote(name[len(_PREFIX):])] = (data, self._parts_read(pending))
        return out

    def _parts_read(self, pending: list[tuple[str, Any]]) -> dict[str, bytes]:
        got: dict[str, bytes] = {}
        for child, read in pending:
            try:
                got[child] = read.get(timeout=self._op_timeout)[0]
            except NoNodeError:
                continue  # a stale part swept meanwhile: a load ignores those anyway
        return got

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        """The group whole, in a new generation: its record, and every part in its ``_whole`` child."""
        known = self._current(group_id) or Known()
        head = {key: value for key, value in record.items() if key != "parts"}
        parts = record.get("parts") or {}
        gen = max(known.gen, 0) + 1
        ops = [(self._path(group_id), encode(group_id, {"gen": gen, "record": head}), group_id not in self._known)]
        if parts:
            whole = f"{self._path(group_id)}/{WHOLE}"
            ops.append((whole, encode(group_id, {"gen": gen, "parts": parts}), WHOLE not in known.children))
        size = sum(len(data) for _, data, _ in ops)
        if size > self._max_bytes:
            raise StoreError(f"record of group {group_id!r} is {size:,} bytes after zlib compression, over the "
                             f"{self._max_bytes:,}-byte ZooKeeper znode limit")
        self._commit(group_id, [("put", path, data, create) for path, data, create in ops])
        stale = known.children - {WHOLE}
        self._known[group_id] = Known(gen, head, set(parts), (known.children | ({WHOLE} if parts else set())))
        self._sweep(group_id, stale)

    def save_parts(self, group_id: str, record: Mapping[str, Any] | None, parts: Mapping[str, Any]) -> None:
        """The parts (and the group's record, if given) in one fenced transaction; ``WholeWriteNeeded``
        if it would be over ``max_bytes``."""
        known = self._current(group_id)
        if known is not None and known.gen < 0:
            raise WholeWriteNeeded(f"group {group_id!r} was written whole before parts: once more, whole")
        if known is None:
            if record is None:
                raise StoreError(f"group {group_id!r}: parts written before the group's record")
            known = Known(gen=1)
        path = self._path(group_id)
        ops: list[tuple[str, str, bytes, bool]] = []
        if record is not None:
            ops.append(("put", path, encode(group_id, {"gen": known.gen, "record": dict(record)}),
                        group_id not in self._known))
        made, gone = set(), set()
        for key, value in parts.items():
            name = child_name(key)
            child = f"{path}/{name}"
            if value is None and key not in known.inside:
                if name in known.children:
                    ops.append(("delete", child, b"", False))
                    gone.add(name)
                continue
            ops.append(("put", child, encode(group_id, {"gen": known.gen, "v": value}), name not in known.children))
            made.add(name)
        size = sum(len(data) + len(op_path) + OP_BYTES for _, op_path, data, _ in ops)
        if size > self._max_bytes:
            raise WholeWriteNeeded(f"group {group_id!r}: a change of {len(parts):,} records is {size:,} bytes, over "
                                   f"one ZooKeeper transaction's {self._max_bytes:,}")
        self._commit(group_id, ops)
        if record is not None:
            known.record = dict(record)
        known.children = (known.children | made) - gone
        self._known[group_id] = known

    def delete(self, group_id: str) -> None:
        self._ensure_root()
        known = self._known.pop(group_id, None) or Known()
        path = self._path(group_id)
        if len(known.children) > _SWEEP_BATCH:  # too many for one transaction: orphan them first, in one
            self._commit(group_id, [("put", path, encode(group_id, {"gen": known.gen + 1, "record": known.record}),
                                     False)])
            self._sweep(group_id, set(known.children), strict=True)
            known.children = set()
        ops = [("delete", f"{path}/{name}", b"", False) for name in sorted(known.children)]
        ops.append(("delete", path, b"", False))
        try:
            self._commit(group_id, ops)
        except StoreError as exc:
            if not isinstance(exc.__cause__, NoNodeError):
                raise

    def _current(self, group_id: str) -> Known | None:
        """What we know of the group's znodes, read again if a write of it failed (it may have landed)."""
        if group_id in self._unsure:
            self._ensure_root()
            path = self._path(group_id)
            try:
                head = self._wait(self._client.get_async(path))[0]
                names = self._wait(self._client.get_children_async(path))
                children = {name: self._wait(self._client.get_async(f"{path}/{name}"))[0] for name in names}
            except StoreError as exc:
                if not isinstance(exc.__cause__, NoNodeError):
                    raise
                self._known.pop(group_id, None)
            else:
                self._known[group_id] = assemble(group_id, head, children)[1]
            self._unsure.discard(group_id)
        return self._known.get(group_id)

    def _commit(self, group_id: str, ops: list[tuple[str, str, bytes, bool]]) -> None:
        try:
            self._transaction(group_id, ops)
        except FencedError:
            raise
        except StoreError:
            self._unsure.add(group_id)  # its outcome may be unknown: read the group again before the next write
            raise

    def _transaction(self, group_id: str, ops: list[tuple[str, str, bytes, bool]]) -> None:
        """``ops`` (put: set, or create when its flag says the znode is new; delete) in one fenced
        transaction. A znode missing where it was thought to be (or there where it was not) is tried
        once more the other way (the group's own znode only: a single writer makes that race moot)."""
        self._ensure_root()
        for attempt in range(3):
            fence = self._election.fence()
            self._written_epoch = max(self._written_epoch, fence.epoch)
            tx = self._client.transaction()
            fence.apply(tx)
            for kind, path, data, create in ops:
                if kind == "delete":
                    tx.delete(path)
                elif create:
                    tx.create(path, data)
                else:
                    tx.set_data(path, data)
            error = self._fenced_or_error(self._wait(tx.commit_async()))
            if error is None:
                return
            if not isinstance(error, (NoNodeError, NodeExistsError)) or attempt == 2:
                raise StoreError(f"cannot save group {group_id!r}: {error!r}") from error
            head = ops[0]
            if head[0] != "put" or head[1] != self._path(group_id):
                raise StoreError(f"cannot save group {group_id!r}: {error!r}") from error
            ops = [(head[0], head[1], head[2], not head[3]), *ops[1:]]  # its znode: set <-> create
        raise StoreError(f"cannot save group {group_id!r}: its znode keeps appearing and disappearing")

    def _sweep(self, group_id: str, names: set[str], strict: bool = False) -> None:
        """Delete stale children (a chore: a load ignores them), a batch per fenced transaction."""
        path = self._path(group_id)
        ordered = sorted(names)
        for start in range(0, len(ordered), _SWEEP_BATCH):
            batch = ordered[start:start + _SWEEP_BATCH]
            try:
                self._commit(group_id, [("delete", f"{path}/{name}", b"", False) for name in batch])
            except StoreError:
                if strict:
                    raise
                return  # left for later: stale children are ignored
            known = self._known.get(group_id)
            if known is not None:
                known.children -= set(batch)

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
