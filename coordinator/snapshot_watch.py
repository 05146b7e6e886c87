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
import logging
from collections.abc import Mapping

from coordinator.coordinator import GroupCoordinator
from coordinator.store import FencedError, StoreError
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import snapshot_to_pb

__all__ = ["SnapshotWatcher", "watch_snapshots"]

log = logging.getLogger("groupcoord.snapshots")


class SnapshotWatcher:
    """Reads the snapshot at ``path`` (any thread) and applies it to the coordinator (its loop only)."""

    def __init__(self, coordinator: GroupCoordinator, path: str) -> None:
        self.coordinator = coordinator
        self.path = path
        self._snapshot_id = ""
        self._snapshots: Mapping[str, pb.LoadSnapshot] = {}
        self.last_error = ""

    def read(self) -> Mapping[str, pb.LoadSnapshot]:
        """``{group_id: snapshot}`` at the path now; ``{}`` when there is none yet or it cannot be read."""
        from loadstats.snapshot_io import read_meta, read_snapshots

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
        """Hand each snapshot to its group where the group does not have it yet; returns those group ids.

        Groups the coordinator does not know are skipped (they get it once they exist). A standby
        applies nothing: publishing answers NOT_COORDINATOR there.
        """
        updated = []
        for group_id, snapshot in snapshots.items():
            group = self.coordinator.groups.get(group_id)
            current = None if group is None else group.load_snapshot
            if group is None or (current is not None and current.snapshot_id == snapshot.snapshot_id):
                continue
            try:
                response = self.coordinator.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot))
            except FencedError as fenced:  # our term is over: stand down as a refused request would
                log.warning("lost leadership while applying a load snapshot: %s", fenced)
                self.coordinator.unload("")
                break
            except StoreError as error:  # the group is back as last stored; the next poll tries again
                log.warning("group %s: load snapshot %s not applied: %s", group_id, snapshot.snapshot_id, error)
                continue
            applied = group.load_snapshot
            if response.error.code == pb.NONE and applied is not None and applied.snapshot_id == snapshot.snapshot_id:
                updated.append(group_id)
        if updated:
            log.info("load snapshot %s applied to %s", next(iter(snapshots.values())).snapshot_id, ", ".join(updated))
        return updated


async def watch_snapshots(coordinator: GroupCoordinator, path: str, interval_s: float) -> None:
    """Poll ``path`` every ``interval_s`` seconds until cancelled (runs on the coordinator's loop)."""
    watcher = SnapshotWatcher(coordinator, path)
    loop = asyncio.get_running_loop()
    while True:
        snapshots = await loop.run_in_executor(None, watcher.read)
        watcher.apply(snapshots)
        await asyncio.sleep(interval_s)
