"""The places faults happen: ``SqliteEnv`` (one coordinator on SQLite, workers behind the fault
proxy), ``ZooKeeperEnv`` (two coordinators elected on a real ZooKeeper, workers dialling both) and
``ShardedEnv`` (three sharded coordinators on a real ZooKeeper, each behind its own ZooKeeper proxy).

Each environment injects and heals the faults of a ``FaultSpec`` and says when it has settled:
every group Stable with all its workers, every task assigned, and the ownership log agreeing with
the coordinator about who runs each task.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import grpc

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.chaos.cluster import Coordinator, Timing, WorkerPool, answers_as_active, speaks_consumer, wait_for
from tests.chaos.ownership import event
from tests.chaos.proxy import FaultProxy
from tests.chaos.schedule import FaultSpec
from tests.zookeeper_server import ZooKeeperServer

__all__ = ["Env", "ShardedEnv", "SqliteEnv", "ZooKeeperEnv"]

_COORDINATOR = "[coordinator]\ngroup_min_session_timeout_ms = 500\ngroup_initial_rebalance_delay_ms = 0\n"
STORE_FAILED = "store write failed"


class LiveOwners:
    """Who runs what now, from the ownership log, read incrementally."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = ""
        self.owners: dict[str, set[str]] = defaultdict(set)

    def refresh(self) -> dict[str, set[str]]:
        with self._path.open() as handle:
            handle.seek(self._offset)
            text = self._partial + handle.read()
            self._offset = handle.tell()
        *lines, self._partial = text.split("\n")
        for line in lines:
            if not line.strip():
                continue
            e = json.loads(line)
            if e["event"] == "assigned":
                for task in e["tasks"]:
                    self.owners[task].add(e["worker"])
            elif e["event"] in ("revoked", "lost"):
                for task in e["tasks"]:
                    self.owners[task].discard(e["worker"])
            elif e["event"] == "fault" and e["kind"] == "worker_kill" and e["phase"] == "inject":
                for owners in self.owners.values():
                    owners.discard(e["target"])
        return self.owners


class Env:
    """What both environments share: groups, workers, the log, settling."""

    name = ""

    def __init__(self, workdir: Path, timing: Timing, groups: int, slots: int, tasks_per_group: int,
                 rng: random.Random, group_protocol: str = "classic") -> None:
        self.workdir = workdir
        self.group_protocol = group_protocol  # classic | consumer | mixed (cluster.speaks_consumer)
        workdir.mkdir(parents=True, exist_ok=True)
        self.timing = timing
        self.rng = rng
        self.groups = [f"g{i}" for i in range(groups)]
        # half the groups cooperative (KIP-429), half eager
        self.protocol_of = {g: ("cooperative" if i % 2 else "eager") for i, g in enumerate(self.groups)}
        self.tasks = {g: [f"{g}-t{i}" for i in range(tasks_per_group)] for g in self.groups}
        self.slots = slots
        self.log_path = workdir / "ownership.log"
        self.log_path.touch()
        self.live = LiveOwners(self.log_path)
        self._ids = 0
        self.workers: WorkerPool
        self.admin: AdminClient
        self.store_failures: dict[int, int] = {}  # disk_full fault id -> store writes refused meanwhile

    # --------------------------------------------------------------- log

    def log(self, what: str, /, **fields: object) -> None:
        with self.log_path.open("a") as handle:
            handle.write(event(what, time.time(), **fields))

    def fault_line(self, fid: int, spec: FaultSpec, phase: str, target: str = "") -> None:
        self.log("fault", id=fid, kind=spec.kind, phase=phase, target=target, group=spec.group)

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # --------------------------------------------------------------- settling

    def settled(self) -> bool:
        owners = self.live.refresh()
        for group in self.groups:
            try:
                d = self.admin.describe_group(group)
            except errors.GroupCoordError:
                return False
            if d.state != pb.STABLE or len(d.members) != self.slots:
                return False
            assigned = {t.task_id: m.member.client_id for m in d.members for t in m.assigned}
            if sorted(assigned) != self.tasks[group]:
                return False
            if any(owners.get(task, set()) != {worker} for task, worker in assigned.items()):
                return False
        return True

    def wait_settled(self, timeout: float) -> float:
        return wait_for(self.settled, timeout, f"{self.name}: every group settled")

    def coordinator_settings(self) -> str:
        """The ``[coordinator]`` table every coordinator of the run gets: consumer-protocol members
        heartbeat at the interval it sets, so at the classic workers' interval."""
        return _COORDINATOR + f"consumer_heartbeat_interval_ms = {self.timing.heartbeat_ms}\n"

    def start_workers(self, address_of: Callable[[str], str]) -> None:
        self.workers = WorkerPool(self.log_path, address_of, self.timing, self.protocol_of, self.slots,
                                  self.group_protocol)
        if self.group_protocol != "mixed":
            self.workers.start_all()
            return
        # mixed: the classic workers form each group first, so the consumer ones convert it
        classic = [s for s in self.workers.all_slots() if not speaks_consumer("mixed", s)]
        for slot in classic:
            self.workers.start(slot)
        wait_for(lambda: self._formed_by(classic), 120, f"{self.name}: the classic workers' groups formed")
        for slot in self.workers.all_slots():
            if slot not in classic:
                self.workers.start(slot)

    def _formed_by(self, slots: list[str]) -> bool:
        for group in self.groups:
            count = sum(1 for s in slots if s.startswith(group + "/"))
            try:
                d = self.admin.describe_group(group)
            except errors.GroupCoordError:
                return False
            if count and (d.state != pb.STABLE or len(d.members) != count):
                return False
        return True

    def coordinator_logs(self) -> str:
        """Every coordinator's log of this run, as one text (the conversions are counted in it)."""
        return "".join(c.log_text() for c in self.coordinators_of_run())

    def coordinators_of_run(self) -> list[Coordinator]:
        return list(getattr(self, "coordinators", [])) + ([self.coordinator] if hasattr(self, "coordinator") else [])

    def put_tasks(self) -> None:
        for group, tasks in self.tasks.items():
            self.admin.put_tasks(group, tasks)

    # --------------------------------------------------------------- faults

    def inject(self, spec: FaultSpec) -> tuple[int, object]:
        """Inject ``spec``; returns its id and what ``heal`` needs."""
        fid = self.next_id()
        if spec.kind == "worker_kill":
            slot = f"{spec.group}/w{spec.slot}"
            victim = self.workers.names[slot]
            self.workers.kill(slot)
            self.fault_line(fid, spec, "inject", victim)  # after the death: every line of the victim precedes it
            return fid, slot
        if spec.kind == "worker_stop":
            slot = f"{spec.group}/w{spec.slot}"
            self.fault_line(fid, spec, "inject", self.workers.names[slot])
            self.workers.signal(slot, signal.SIGSTOP)
            return fid, slot
        return fid, self.inject_global(fid, spec)

    def heal(self, fid: int, spec: FaultSpec, state: object) -> None:
        if spec.kind == "worker_kill":
            assert isinstance(state, str)
            name = self.workers.start(state)
            self.fault_line(fid, spec, "heal", name)
        elif spec.kind == "worker_stop":
            assert isinstance(state, str)
            self.fault_line(fid, spec, "heal", self.workers.names[state])  # before SIGCONT: notice is measured from here
            self.workers.signal(state, signal.SIGCONT)
        else:
            self.heal_global(fid, spec, state)

    def start(self) -> None:
        raise NotImplementedError

    def inject_global(self, fid: int, spec: FaultSpec) -> object:
        raise NotImplementedError

    def heal_global(self, fid: int, spec: FaultSpec, state: object) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def stop_workers(self, converted_back: Callable[[], int] | None = None) -> None:
        """Stop every worker. Mixed groups: the consumer-protocol workers first, and (``converted_back``
        counting the coordinators' conversions back) until every group has converted back to the classic
        protocol, as Kafka's coordinator does when a group's last consumer-protocol member leaves."""
        self.log("end")
        if self.group_protocol == "mixed" and converted_back is not None:
            before = converted_back()
            self.workers.stop(only=lambda slot: speaks_consumer("mixed", slot))
            wait_for(lambda: converted_back() >= before + len(self.groups), 60,
                     f"{self.name}: every group converted back once its consumer-protocol workers left")
        self.workers.stop()


class SqliteEnv(Env):
    name = "sqlite"

    def start(self) -> None:
        self.coordinator = Coordinator("coordinator", self.workdir, '[server]\nstore = "sqlite"\n' + self.coordinator_settings())
        self.coordinator.start()
        wait_for(lambda: answers_as_active(self.coordinator.address), 60, "the coordinator")
        # one proxy per worker slot: a proxy fault hits every worker, or one alone (a partition of one)
        self.proxies = {f"{g}/w{i}": FaultProxy(self.coordinator.port).start()
                        for g in self.groups for i in range(self.slots)}
        self.admin = AdminClient(self.coordinator.address)
        self.put_tasks()
        self.start_workers(lambda slot: self.proxies[slot].address)

    def proxies_of(self, spec: FaultSpec) -> list[FaultProxy]:
        return [self.proxies[f"{spec.group}/w{spec.slot}"]] if spec.group else list(self.proxies.values())

    def inject_global(self, fid: int, spec: FaultSpec) -> object:
        if spec.kind == "coordinator_kill":
            self.coordinator.kill()
            self.fault_line(fid, spec, "inject", "coordinator")
            self.coordinator.start()  # at once; heal = when it serves again
            return None
        if spec.kind == "proxy_delay":
            for proxy in self.proxies_of(spec):
                proxy.delay(spec.delay_s)
        elif spec.kind == "proxy_drop":
            for proxy in self.proxies_of(spec):
                proxy.drop() if spec.mode == "drop" else proxy.blackhole()
        elif spec.kind == "disk_full":
            before = self.coordinator.log_text().count(STORE_FAILED)
            self.coordinator.refuse_file_writes(True)
            self.fault_line(fid, spec, "inject", "coordinator")
            # a graceful restart of one worker makes the group write (leave, expiry, rebalance)
            slot = f"{self.rng.choice(self.groups)}/w{self.rng.randrange(self.slots)}"
            self.workers.procs[slot].terminate()
            return before, slot
        self.fault_line(fid, spec, "inject", self.workers.names[f"{spec.group}/w{spec.slot}"] if spec.group else "proxy")
        return None

    def heal_global(self, fid: int, spec: FaultSpec, state: object) -> None:
        if spec.kind == "coordinator_kill":
            wait_for(lambda: answers_as_active(self.coordinator.address), 60, "the restarted coordinator")
            self.fault_line(fid, spec, "heal", "coordinator")
        elif spec.kind in ("proxy_delay", "proxy_drop"):
            for proxy in self.proxies_of(spec):
                proxy.heal()
            self.fault_line(fid, spec, "heal", self.workers.names[f"{spec.group}/w{spec.slot}"] if spec.group else "proxy")
        elif spec.kind == "disk_full":
            assert isinstance(state, tuple)
            before, slot = state
            self.coordinator.refuse_file_writes(False)
            self.fault_line(fid, spec, "heal", "coordinator")
            self.workers.procs[slot].wait(30)
            self.workers.start(slot)
            self.store_failures[fid] = self.coordinator.log_text().count(STORE_FAILED) - before

    def verify_store(self) -> int:
        """Kill and restart the coordinator once more: the store opens (quick_check) and every group loads."""
        self.coordinator.kill()
        self.coordinator.start()
        wait_for(lambda: answers_as_active(self.coordinator.address), 60, "the coordinator on its final store")
        return len(self.admin.list_groups())

    def close(self) -> None:
        if hasattr(self, "workers"):
            self.workers.stop()
        for proxy in getattr(self, "proxies", {}).values():
            proxy.close()
        if hasattr(self, "admin"):
            self.admin.close()
        if hasattr(self, "coordinator"):
            self.coordinator.stop()


class ZooKeeperEnv(Env):
    name = "zookeeper"

    def start(self) -> None:
        self.zk = ZooKeeperServer()
        self.zk.start()
        config = (f'[server]\nstore = "zookeeper"\nzk = "{self.zk.hosts}"\nzk_session_timeout_s = 4.0\n'
                  f'zk_root = "/groupcoord/chaos"\n' + self.coordinator_settings())
        self.coordinators = [Coordinator(f"c{i}", self.workdir, config) for i in range(2)]
        for c in self.coordinators:
            c.start()
        self.addresses = ",".join(c.address for c in self.coordinators)
        wait_for(lambda: self.active() is not None, 60, "an active coordinator")
        self.admin = AdminClient(self.addresses)
        self.put_tasks()
        self.start_workers(lambda slot: self.addresses)

    def active(self) -> Coordinator | None:
        return next((c for c in self.coordinators if c.alive() and answers_as_active(c.address, 0.5)), None)

    def inject_global(self, fid: int, spec: FaultSpec) -> object:
        if spec.kind == "active_kill":
            victim = self.active()
            if victim is None:  # between terms: the next to answer is the one to kill
                wait_for(lambda: self.active() is not None, 60, "an active coordinator")
                victim = self.active()
            assert victim is not None
            victim.kill()
            self.fault_line(fid, spec, "inject", victim.name)
            victim.start()  # back at once, as a standby
            return victim
        self.zk.stop()
        self.fault_line(fid, spec, "inject", "zookeeper")
        return None

    def heal_global(self, fid: int, spec: FaultSpec, state: object) -> None:
        if spec.kind == "zk_restart":
            self.zk.start()
        wait_for(lambda: self.active() is not None, 60, "an active coordinator")
        self.fault_line(fid, spec, "heal", "zookeeper" if spec.kind == "zk_restart" else "coordinator")

    def close(self) -> None:
        if hasattr(self, "workers"):
            self.workers.stop()
        if hasattr(self, "admin"):
            self.admin.close()
        for c in getattr(self, "coordinators", []):
            c.stop()
        if hasattr(self, "zk"):
            self.zk.close()


class ShardedEnv(Env):
    """Three ``groupcoord serve --sharded`` coordinators (12 shards) on a real ZooKeeper, each reaching it
    through its own fault proxy; workers dial all three and follow NOT_COORDINATOR to their shard's leader.

    Faults: ``shard_kill`` (one coordinator SIGKILLed, restarted at once on the same address: its shards
    move to the others, then some come back), ``shard_stop`` (one SIGSTOPped past its ZooKeeper session,
    then SIGCONT: it must act for nothing it lost), ``zk_cut`` (one coordinator's ZooKeeper traffic
    black-holed past its session while workers still reach it, then healed).
    """

    name = "sharded"
    shards = 12
    zk_session_s = 2.0

    def start(self) -> None:
        self.zk = ZooKeeperServer()
        self.zk.start()
        self.zk_proxies = [FaultProxy(self.zk.port).start() for _ in range(3)]
        self.coordinators = [
            Coordinator(f"c{i}", self.workdir,
                        f'[server]\nstore = "zookeeper"\nzk = "{proxy.address}"\n'
                        f'zk_session_timeout_s = {self.zk_session_s}\nzk_root = "/groupcoord/chaos-sharded"\n'
                        f"sharded = true\nshards = {self.shards}\n" + self.coordinator_settings())
            for i, proxy in enumerate(self.zk_proxies)]
        for c in self.coordinators:
            c.start()
        self.addresses = ",".join(c.address for c in self.coordinators)
        wait_for(self.every_shard_led, 60, "every shard led")
        self.admin = AdminClient(self.addresses)
        self.put_tasks()
        self.start_workers(lambda slot: self.addresses)

    def every_shard_led(self) -> bool:
        for c in self.coordinators:
            try:
                with grpc.insecure_channel(c.address) as channel:
                    answer = pb_grpc.GroupAdminStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=1)
            except grpc.RpcError:
                continue
            return len(answer.shard_infos) == self.shards and all(s.leader for s in answer.shard_infos)
        return False

    def inject_global(self, fid: int, spec: FaultSpec) -> object:
        victim = self.rng.randrange(len(self.coordinators))
        c = self.coordinators[victim]
        if spec.kind == "shard_kill":
            c.kill()
            self.fault_line(fid, spec, "inject", c.name)
            c.start()  # at once, same address: it waits for its old session to end, then takes its share
        elif spec.kind == "shard_stop":
            self.fault_line(fid, spec, "inject", c.name)
            assert c.proc is not None
            c.proc.send_signal(signal.SIGSTOP)
        else:  # zk_cut
            self.zk_proxies[victim].blackhole()
            self.fault_line(fid, spec, "inject", c.name)
        return victim

    def heal_global(self, fid: int, spec: FaultSpec, state: object) -> None:
        assert isinstance(state, int)
        c = self.coordinators[state]
        if spec.kind == "shard_stop":
            assert c.proc is not None
            c.proc.send_signal(signal.SIGCONT)
        elif spec.kind == "zk_cut":
            self.zk_proxies[state].heal()
        wait_for(self.every_shard_led, 60, "every shard led")
        self.fault_line(fid, spec, "heal", c.name)

    def close(self) -> None:
        if hasattr(self, "workers"):
            self.workers.stop()
        if hasattr(self, "admin"):
            self.admin.close()
        for c in getattr(self, "coordinators", []):
            c.stop()
        for proxy in getattr(self, "zk_proxies", []):
            proxy.close()
        if hasattr(self, "zk"):
            self.zk.close()
