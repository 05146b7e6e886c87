"""Picking up load snapshots from a path: ``groupcoord serve --snapshots PATH``.

Why: the statistics job is often run by a scheduler (cron, Airflow, ``spark-submit`` on a
cluster) that writes the snapshot to a shared path and has no business reaching the coordinator.
With ``--snapshots`` the coordinator looks at that path every ``--snapshot-poll-s`` seconds and
hands a new snapshot to every group it knows, exactly as ``groupcoord stats --coordinator``
would publish it (an older snapshot never replaces a newer one).

Cheap when nothing changed: each poll reads only ``_meta.json`` (the job swaps whole versions in
atomically, so its snapshot id names the content); the Parquet files are read once per new id,
in a worker thread, never on the event loop. A missing path is "no snapshot yet"; an unreadable
one is logged once per distinct error and the coordinator carries on with what it had.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping

from google.protobuf.message import Message

from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import snapshot_to_pb

__all__ = ["SnapshotWatcher", "watch_snapshots"]

log = logging.getLogger("groupcoord.snapshots")


class SnapshotWatcher:
    """Reads the snapshot at ``path`` (any thread) and applies it to the coordinator (its loop only)."""

    def __init__(self, router: ShardRouter, path: str) -> None:
        self.router = router
        self.path = path
        self._snapshot_id = ""
        self._snapshots: Mapping[str, pb.LoadSnapshot] = {}
        self.last_error = ""

    def read(self) -> Mapping[str, pb.LoadSnapshot]:
        """``{group_id: snapshot}`` at the path now; ``{}`` when there is none yet or it cannot be read."""
        from groupcoord.loadstats.snapshot_io import read_meta, read_snapshots

        try:
            snapshot_id = str(read_meta(self.path).get("snapshot_id", ""))
            if snapshot_id != self._snapshot_id:
                snapshots = {g: snapshot_to_pb(s) for g, s in read_snapshots(self.path).items()}
                self._snapshot_id, self._snapshots = snapshot_id, snapshots
                log.info("load snapshot %s found at %s: %d group(s)", snapshot_id, self.path, len(snapshots))
            self.last_error = ""
        except FileNotFoundError:
            return {}  # nothing written there yet
        except Exception as error:  # noqa: BLE001 - a bad file must not stop the coordinator
            message = f"cannot read the load snapshot at {self.path}: {error}"
            if message != self.last_error:
                log.warning("%s (keeping the snapshots the groups have)", message)
            self.last_error = message
            return {}
        return self._snapshots

    def apply(self, snapshots: Mapping[str, pb.LoadSnapshot]) -> list[str]:
        """Hand each snapshot to its group where the group does not have it yet, as a
        PublishLoadSnapshot would; returns those group ids.

        Groups the coordinator does not know are skipped (they get it once they exist). A standby
        applies nothing (it answers NOT_COORDINATOR); a failed store write is logged and the next
        poll tries again.
        """
        offered = []
        for group_id, snapshot in snapshots.items():
            runtime = self.router.for_group(group_id)  # a shard this process does not lead has no groups here
            group = runtime.groups.get(group_id)
            current = None if group is None else group.load_snapshot
            if group is None or (current is not None and current.snapshot_id == snapshot.snapshot_id):
                continue
            request = pb.PublishLoadSnapshotRequest(snapshot=snapshot)
            runtime.submit(functools.partial(runtime.model.publish_load_snapshot, request),
                           pb.PublishLoadSnapshotResponse, _log_refusal(group_id, snapshot.snapshot_id))
            applied = group.load_snapshot
            if applied is not None and applied.snapshot_id == snapshot.snapshot_id:
                offered.append(group_id)
        if offered:
            log.info("load snapshot %s applied to %s", next(iter(snapshots.values())).snapshot_id, ", ".join(offered))
        return offered


def _log_refusal(group_id: str, snapshot_id: str) -> Callable[[Message], None]:
    def answered(response: Message) -> None:
        failure = response.error  # type: ignore[attr-defined]
        if failure.code != pb.NONE:
            log.warning("group %s: load snapshot %s not applied: %s", group_id, snapshot_id, failure.message)

    return answered


def _load_reader() -> None:
    """Import the Parquet reader now (a worker thread): pyarrow.dataset is 2.9 s of CPU to import (9.5 s at
    load 15), which the first snapshot's pick-up waited for (over 20 s at load 50-70). Without pyarrow the
    first read says so, once."""
    try:
        import pyarrow.dataset  # noqa: F401 - the import is the point
    except ImportError:
        pass


async def watch_snapshots(router: ShardRouter, path: str, interval_s: float) -> None:
    """Poll ``path`` every ``interval_s`` seconds until cancelled (runs on the coordinator's loop), the
    snapshot reader imported first, so the first snapshot is applied a poll after it lands."""
    watcher = SnapshotWatcher(router, path)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, _load_reader)
    log.info("watching %s for load snapshots every %gs", path, interval_s)
    while True:
        snapshots = await loop.run_in_executor(None, watcher.read)
        watcher.apply(snapshots)
        await asyncio.sleep(interval_s)
