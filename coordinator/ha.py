"""Active/standby coordinators elected through ZooKeeper (``groupcoord serve --store zookeeper``).

Every process serves gRPC all the time. A standby answers NOT_COORDINATOR with
the active's address (read from the election node). On winning, a process
loads every group from ZooKeeper (answering COORDINATOR_LOAD_IN_PROGRESS
meanwhile) and becomes active; members keep their generation and sessions, so
heartbeating workers carry on without a rebalance. On losing (its ZooKeeper
session suspended or expired, the process paused for longer than half the
session timeout, or a write refused by the fence) it drops every group at once
and goes back to standby; every request and every timer first asks the
election whether this process is still in office.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from coordinator.coordinator import GroupCoordinator
from coordinator.server import serve_forever

__all__ = ["run_ha_coordinator", "HighAvailability"]

log = logging.getLogger("groupcoord.ha")


class HighAvailability:
    """Ties a LeaderElection to a GroupCoordinator running on an asyncio loop."""

    def __init__(self, coordinator: GroupCoordinator, election: Any, store: Any,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.coordinator = coordinator
        self.election = election
        self.store = store
        self.loop = loop
        coordinator.active = False
        coordinator.store = store
        # asked on every request and before timers fire: after a process pause the election may know
        # (or find out first) that our term is over before ``on_lost`` gets through to the loop
        coordinator.office_check = election.is_leader

    # election callbacks run on the election's callback thread: hop onto the loop
    def on_elected(self, epoch: int) -> None:
        self.loop.call_soon_threadsafe(self._become_active, epoch)

    def on_lost(self) -> None:
        self.loop.call_soon_threadsafe(self._become_standby)

    def _become_active(self, epoch: int) -> None:
        coordinator = self.coordinator
        coordinator.unload(self.election.address)  # drop anything left from an earlier term
        coordinator.active = True
        coordinator.loading = True
        try:
            count = coordinator.load()
        except Exception:
            log.exception("loading groups failed; standing down")
            coordinator.unload("")
            coordinator.loading = False
            self.election.recheck()
            return
        coordinator.loading = False
        log.info("active (epoch %d): %d group(s) loaded", epoch, count)

    def _become_standby(self) -> None:
        if self.coordinator.active or self.coordinator.groups:
            log.warning("lost leadership: standing by")
        self.coordinator.unload(self.election.current_leader() or "")

    async def refresh_hint(self) -> None:
        """Keep the address standbys hand out current."""
        while True:
            if not self.coordinator.active:
                self.coordinator.active_hint = self.election.current_leader() or ""
            await asyncio.sleep(0.2)


def run_ha_coordinator(options: Any) -> int:
    from coordinator.election import LeaderElection, connect
    from coordinator.load_reports import attach_sample_log
    from coordinator.runtime import start_snapshot_watch
    from coordinator.zk_store import ZooKeeperStore
    from loadstats.sample_log import SampleLog

    try:
        client = connect(options.zk, session_timeout=options.zk_session_timeout_s)
    except Exception as error:  # kazoo raises its own timeout types
        raise ValueError(f"cannot reach ZooKeeper at {options.zk}: {error}") from None
    samples = SampleLog(options.data_dir / "samples")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        coordinator = GroupCoordinator(options.coordinator)
        coordinator.active = False
        attach_sample_log(coordinator, samples)
        ready: asyncio.Future[Any] = loop.create_future()

        def started(running: Any) -> None:
            ready.set_result(running)

        serving = loop.create_task(serve_forever(coordinator, options.listen, on_started=started))
        running = await ready
        advertise = options.advertise or f"{options.listen.rpartition(':')[0]}:{running.port}"
        # the callbacks name ``ha``, built next: the store needs the election first
        election = LeaderElection(client, f"{options.zk_root}/election", advertise,
                                  on_elected=lambda epoch: ha.on_elected(epoch), on_lost=lambda: ha.on_lost(),
                                  session_timeout=options.zk_session_timeout_s)
        store = ZooKeeperStore(client, f"{options.zk_root}/groups", election)
        ha = HighAvailability(coordinator, election, store, loop)
        hint_task = loop.create_task(ha.refresh_hint())
        watching = start_snapshot_watch(coordinator, options)  # applies only while active
        print(f"groupcoord coordinator listening on {advertise} (ZooKeeper {options.zk}, standby until elected)",
              file=sys.stderr, flush=True)
        election.start()
        try:
            await serving
        finally:
            hint_task.cancel()
            if watching is not None:
                watching.cancel()
            await loop.run_in_executor(None, election.stop)

    try:
        asyncio.run(main())
    finally:
        samples.close()
        client.stop()
        client.close()
    return 0
