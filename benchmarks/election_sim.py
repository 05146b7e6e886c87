"""The shard elections at internet size on one machine (issue 37): N coordinators, S shards, G groups.

    python benchmarks/election_sim.py [--coordinators 100 --shards 1024 --groups 20000] [--quick]

One real ZooKeeper (Debian's package, ``mntr`` enabled); each simulated coordinator is the real
``ShardElections`` on its own kazoo session, and its runtime is stood for by what touches ZooKeeper:
a shard it wins is loaded (``ZooKeeperStore.load_all`` of the shard's group records), a shard it
hands over is drained at once. No gRPC servers. The coordinators run in host processes (this script
with ``--host``): the bulk one each, as deployed (``--procs N``: in N), one process holding the
coordinator killed alone, one holding the ten killed at once (one SIGKILL ends all ten), and one
started later (the coordinator added). Measured:

- start: time from the start to an even spread (every shard led, each coordinator S//N or one more);
- steady state: each election thread's CPU share over a window (target: under 10 %), opened once no
  election read has been made for a second, and the reads, writes and new terms within it;
- one coordinator SIGKILLed: time until each of its shards has a new leader that has loaded it
  (p50/p99/max; target: within its ZooKeeper session + ZooKeeper's tickTime + 1 s, see below), split
  into its parts, the reads and writes ZooKeeper served meanwhile (its own
  ``mntr`` counters ``zk_cnt_readlatency``/``zk_cnt_updatelatency``; target: reads at most
  10 x coordinators x its shards), the election reads the coordinators made, their election
  threads' CPU share meanwhile;
- one coordinator added: shards moved and the time to the even spread again;
- ten killed at once: as for one.

Where a failover's time goes, per lost shard (p50/max): ``zookeeper``, the kill to ZooKeeper's
expiry of the session (its own log line "Expiring session 0x..."; the session's timeout counted from
the last ping heard, then rounded up to the next tick: ZooKeeper checks expiry once per
``tickTime``); ``notify``, the expiry to the first watch event reaching the coordinator that won the
shard; ``queued``, that event to its election step beginning; ``read``, the step's reads;
``claim``, the plan and the winning transaction; ``load``, the shard's groups loaded. The last five
are the election code's own timestamps (``ShardElections.wins``) and the stand-in runtime's.
ZooKeeper's part may be up to a tick over the session, so three checks are printed: the issue's
session + 1 s, session + tick + 1 s, and 1 s for everything after the expiry (``--tick-ms``, 2,000
by default as ZooKeeper's own; the test server's 500 shows the trade-off). The expiry times of the
killed sessions and the slowest shards' own timestamps are printed too.

Clocks: every process reads ``time.monotonic`` (one system-wide clock on Linux), so a host's "won
shard s at t" and the killer's "killed at t0" compare directly; ZooKeeper's log stamps wall-clock
milliseconds, turned to ``monotonic`` with the offset read at the kill.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import gc
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.exceptions import KazooException

from benchmarks.cpu_cap import process_cpu_s
from groupcoord.coordinator.ha import departures, shard_reads
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_election import ShardElections, ensure_cluster
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.runtime.heap import pace_collector
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.coordinator.storage.store import StoreError
from tests.zookeeper_server import ZooKeeperServer, _four_letter

ZK_ROOT = "/groupcoord/sim"
TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- host


class SimCoordinator:
    """One coordinator: its elections, and a stand-in runtime that loads a shard it wins."""

    def __init__(self, zk: str, name: str, shards: int, session_s: float) -> None:
        self.name = name
        self.client = connect(zk, session_timeout=session_s)
        self.elections = ShardElections(self.client, ZK_ROOT, name, shards, session_timeout=session_s)
        self.won: dict[int, float] = {}
        self.stores: dict[int, ZooKeeperStore] = {}  # one per shard, as the runtime keeps them
        self.in_office: set[int] = set()  # as its callbacks said: polling it costs the survivors nothing
        self.loaded_groups = 0
        self.loading: set[int] = set()  # shards being loaded
        self.changes = threading.Lock()  # office watchers run on the election thread (a win) and the callbacks'
        self.loads = ThreadPoolExecutor(min(32, (os.cpu_count() or 1) + 4))  # asyncio's default executor's size
        for office in self.elections.offices:
            office.watch(lambda office=office: self._changed(office))

    def _changed(self, office: Any) -> None:  # a runtime's office watcher (any thread)
        if office.in_office():
            self.in_office.add(office.shard)
            with self.changes:
                if self.won.get(office.shard, -1.0) >= 0 or office.shard in self.loading:
                    return
                self.loading.add(office.shard)
            self.loads.submit(self._load, office)
        else:
            self.in_office.discard(office.shard)
            if office.shard in self.won:
                self.won[office.shard] = -1.0
            office.drained()

    def _load(self, office: Any) -> None:
        """A won shard's groups, off the callback thread as the runtime loads them (its loop's executor)."""
        store = self.stores.setdefault(office.shard, ZooKeeperStore(
            self.client, self.elections.groups_path(office.shard), self.elections.fencer(office.shard)))
        try:
            while office.in_office():  # a load that timed out (a loaded machine) is tried again
                try:
                    self.loaded_groups += len(store.load_all())
                except StoreError:
                    continue
                if office.in_office():
                    self.won[office.shard] = time.monotonic()
                break
        finally:
            with self.changes:
                self.loading.discard(office.shard)

    def election_cpu(self) -> float:
        """CPU seconds of this coordinator's election thread so far."""
        wanted = f"shard-election {self.name}"
        for thread in threading.enumerate():
            if thread.name == wanted and thread.native_id is not None:
                try:
                    fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    return 0.0
                return (int(fields[11]) + int(fields[12])) / TICKS
        return 0.0

    def stats(self) -> dict[str, Any]:
        leads = sorted(self.in_office.copy())
        wins = self.elections.wins
        session = self.client.client_id[0] if self.client.client_id else 0
        return {"leads": leads, "won": {s: self.won[s] for s in leads if self.won.get(s, -1) >= 0},
                "wins": {s: wins[s] for s in leads if s in wins}, "session": f"{session:x}",
                "reads": self.elections.reads, "cpu": self.election_cpu()}


class CollectorPauses:
    """The cycle collector's runs in this host process, each (began, seconds, generation): a run holds
    the GIL, so it stands every coordinator of the process still, for as long as its heap takes."""

    def __init__(self) -> None:
        self.runs: collections.deque[tuple[float, float, int]] = collections.deque(maxlen=100_000)
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:  # gc.callbacks' signature
        if phase == "start":
            self._began = time.monotonic()
        else:
            self.runs.append((self._began, time.monotonic() - self._began, info["generation"]))


def host(args: argparse.Namespace) -> int:
    """A host process: its coordinators, answering ``stats``, ``gc`` and ``stop`` on stdin."""
    pauses = CollectorPauses()
    gc.callbacks.append(pauses)
    pace_collector()  # as the coordinator's process paces it (coordinator/runtime/heap.py)
    if args.records_ahead is not None:
        shard_reads.RECORDS_AHEAD = args.records_ahead
    if args.plan_on_departure:
        departures.PLAN_ON_DEPARTURE = True
    coordinators = [SimCoordinator(args.zk, name, args.shards, args.session) for name in args.names.split(",")]
    for coordinator in coordinators:
        coordinator.elections.start()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            print(json.dumps({c.name: c.stats() for c in coordinators}), flush=True)
        elif line.strip() == "gc":
            print(json.dumps(list(pauses.runs)), flush=True)
        elif line.strip() == "freeze":  # the start is over: see ``Sim.settle``
            gc.collect()
            gc.freeze()
            print(json.dumps({"frozen": gc.get_freeze_count()}), flush=True)
        elif line.strip() == "stop":
            break
    os._exit(0)  # the ZooKeeper server is thrown away next: no graceful leave to wait for


# ---------------------------------------------------------------------------------------------- driver


@dataclass
class Host:
    proc: subprocess.Popen[str]
    names: list[str]
    alive: bool = True

    def ask(self, what: str = "stats") -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{what}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


@dataclass
class Sim:
    args: argparse.Namespace
    zk: Any
    hosts: list[Host] = field(default_factory=list)
    wall_offset: float = 0.0  # time.time() - time.monotonic() at the last kill
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (monotonic, hosts' CPU s, ZooKeeper's)

    def spawn(self, *groups: list[str]) -> list[Host]:
        """One host process per list of names, started together; returns once all have started."""
        made = [Host(subprocess.Popen(
            [sys.executable, __file__, "--host", "--zk", self.zk.hosts, "--names", ",".join(names),
             "--shards", str(self.args.shards), "--session", str(self.args.session),
             *(["--records-ahead", str(self.args.records_ahead)] if self.args.records_ahead is not None else []),
             *(["--plan-on-departure"] if self.args.plan_on_departure else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True), names)
            for names in groups]
        self.hosts.extend(made)
        for h in made:
            assert h.proc.stdout is not None
            if "ready" not in h.proc.stdout.readline():
                raise RuntimeError(f"host {h.names[0]}... did not start")
        return made

    def settle(self) -> None:
        """Each host's heap so far set aside from its cycle collector (``gc.freeze``). A host holds what
        a few dozen coordinator processes would: its collector's full runs walk all their heaps at once
        and stand all of them still (0.3-0.6 s measured in a ten-at-once failover), where each real
        process walks its own, a few dozen times smaller. The views and records of the start stay
        alive and are not walked again; what a failover makes is collected as before."""
        for h in self.hosts:
            if h.alive:
                h.ask("freeze")

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for h in self.hosts:
            if h.alive:
                out.update(h.ask())
        return out

    def kill(self, h: Host) -> float:
        at = time.monotonic()
        self.wall_offset = time.time() - at
        os.killpg(h.proc.pid, signal.SIGKILL)
        h.proc.wait(30)
        h.alive = False
        return at

    def even(self, view: dict[str, Any]) -> bool:
        counts = [len(v["leads"]) for v in view.values()]
        low = self.args.shards // len(counts)
        loaded = all(str(s) in v["won"] for v in view.values() for s in v["leads"])
        return loaded and sum(counts) == self.args.shards and all(c in (low, low + 1) for c in counts)

    def wait_even(self, budget: float) -> tuple[float, dict[str, Any]]:
        started = time.monotonic()
        while True:
            self.samples.append((time.monotonic(), self.hosts_cpu(), self.zk_cpu()))
            view = self.view()
            if self.even(view):
                return time.monotonic() - started, view
            if time.monotonic() - started > budget:
                raise RuntimeError(f"no even spread after {budget:.0f}s: "
                                   f"{sorted(len(v['leads']) for v in view.values())}")
            time.sleep(1.0)  # polling a condition with a deadline; the hosts time the wins themselves

    def quiet(self, settle_s: float = 1.0, budget: float = 60.0) -> dict[str, Any]:
        """The view once no coordinator has made an election read for ``settle_s``: an even spread is seen as
        soon as the last shard is won and loaded, while the others may still be reading its new leader node."""
        started, view = time.monotonic(), self.view()
        while True:
            time.sleep(settle_s)  # polling a condition with a deadline, as ``wait_even``
            later = self.view()
            if sum(v["reads"] for v in later.values()) == sum(v["reads"] for v in view.values()):
                return later
            if time.monotonic() - started > budget:
                raise RuntimeError(f"election reads still going on {budget:.0f}s after an even spread")
            view = later

    def mntr(self) -> dict[str, int]:
        text = _four_letter(self.zk.port, b"mntr", timeout=10).decode()
        values = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
        return {"reads": int(values["zk_cnt_readlatency"]), "writes": int(values["zk_cnt_updatelatency"])}

    def failover(self, victims: list[Host], before: dict[str, Any]) -> dict[str, Any]:
        """SIGKILL ``victims``; time until every shard they led has a new leader, and its costs."""
        names = [n for h in victims for n in h.names]
        lost = sorted(s for n in names for s in before[n]["leads"])
        probe = Probe(self.zk.hosts)  # its session opened and closed outside the counters' window
        counters, reads = self.mntr(), sum(v["reads"] for n, v in before.items() if n not in names)
        cpu = {n: v["cpu"] for n, v in before.items() if n not in names}
        load = os.getloadavg()[0]
        try:
            probe.begin()
            killed = max(self.kill(h) for h in victims)
            self.samples = []
            spent, view = self.wait_even(self.args.session * 3 + 120)
            probe.stop()
            done = time.monotonic()
            self.samples.append((done, self.hosts_cpu(), self.zk_cpu()))
            after = self.mntr()
        finally:
            probe.close()
        won = {s: t for v in view.values() for s, t in v["won"].items()}
        times = sorted(won[str(s)] - killed for s in lost)
        window = done - killed
        expired = self.expiries({before[n]["session"] for n in names})
        first = min(expired.values(), default=done)  # the 1 s samples' last before it (else their first): a
        since = max((p for p in self.samples if p[0] < first), default=self.samples[0])  # window, never empty
        busy = (self.samples[-1][1] - since[1]) / max(done - since[0], 1e-9)  # cores, from about the expiry on
        zk_busy = (self.samples[-1][2] - since[2]) / max(done - since[0], 1e-9)
        runs = [run for h in self.hosts if h.alive for run in h.ask("gc") if first <= run[0] <= done]
        trips = sorted(seconds for at, seconds in probe.trips if first <= at <= done) or [float("nan")]
        return {"shards": len(lost), "p50": statistics.median(times), "p99": _pct(times, 0.99), "max": times[-1],
                "zk_reads": after["reads"] - counters["reads"] - probe.sent, "zk_writes": after["writes"] - counters["writes"],
                "election_reads": sum(v["reads"] for v in view.values()) - reads,
                "cpu_share": max((view[n]["cpu"] - c) / window for n, c in cpu.items()), "even_s": spent, "load": load,
                "hosts_cores": busy, "zk_cores": zk_busy, "busy_window": done - since[0],
                "probe": {"p50": statistics.median(trips), "max": trips[-1], "count": len(probe.trips)},
                "gc": {"longest": max((r[1] for r in runs), default=0.0), "seconds": sum(r[1] for r in runs),
                       "full": sum(1 for r in runs if r[2] == 2)},
                "parts": parts(lost, view, expired, before, killed),
                "expiries": sorted(at - killed for at in expired.values()), "slowest": slowest(lost, view, expired, before, killed)}

    def zk_cpu(self) -> float:
        """CPU seconds ZooKeeper's process has used so far."""
        return process_cpu_s(self.zk.pid) if self.zk.pid is not None else 0.0

    def hosts_cpu(self) -> float:
        """CPU seconds the live host processes have used so far (the survivors' whole processes)."""
        total = 0.0
        for h in self.hosts:
            if h.alive:
                try:
                    fields = Path(f"/proc/{h.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                total += (int(fields[11]) + int(fields[12])) / TICKS
        return total

    def expiries(self, sessions: set[str]) -> dict[str, float]:
        """When ZooKeeper expired each of ``sessions`` (hex ids), on our monotonic clock, from its log."""
        out: dict[str, float] = {}
        for line in self.zk.log_path.read_text(errors="replace").splitlines():
            found = EXPIRING.search(line)
            if found and found["session"] in sessions:
                wall = datetime.datetime.strptime(found["at"], "%Y%m%d%H%M%S.%f%z").timestamp()
                out[found["session"]] = wall - self.wall_offset
        return out


class Probe:
    """A client of its own in the driver, reading one node every 20 ms while a failover runs: its round
    trips say what ZooKeeper and the machine give any client then, apart from the hosts' own queues."""

    def __init__(self, hosts: str) -> None:
        self.trips: list[tuple[float, float]] = []  # (sent at, seconds)
        self.failed = 0
        self._client = connect(hosts, session_timeout=30)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def begin(self) -> None:
        self._thread.start()

    @property
    def sent(self) -> int:
        """The reads it made (taken off ZooKeeper's count of the survivors' reads)."""
        return len(self.trips) + self.failed

    def _run(self) -> None:
        while not self._stop.wait(0.02):  # a sampling period, not an ordering
            sent = time.monotonic()
            try:
                self._client.exists(ZK_ROOT)
            except KazooException:  # a probe that failed says so by its gap
                self.failed += 1
            else:
                self.trips.append((sent, time.monotonic() - sent))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def close(self) -> None:
        self.stop()
        self._client.stop()
        self._client.close()


EXPIRING = re.compile(r"^(?P<at>\d{14}\.\d{3}[+-]\d{4}) .*Expiring session 0x(?P<session>[0-9a-f]+),")
PARTS = ("zookeeper", "notify", "queued", "read", "claim", "load")  # and "after_expiry": the last five


def parts(lost: list[int], view: dict[str, Any], expired: dict[str, float], before: dict[str, Any],
          killed: float) -> dict[str, dict[str, float]]:
    """Each lost shard's failover split at ZooKeeper's expiry and its winner's own timestamps: p50 and max
    per part (seconds). A shard whose winner's step began before the expiry (a recheck) has its
    parts from the expiry on counted from there."""
    owner = {s: v["session"] for v in before.values() for s in v["leads"]}
    split: dict[str, list[float]] = {part: [] for part in PARTS}
    for shard in lost:
        winner = next((v for v in view.values() if str(shard) in v["wins"]), None)
        expiry = expired.get(owner[shard])
        if winner is None or expiry is None:
            continue
        noticed, began, read, won = winner["wins"][str(shard)]
        marks = [killed, expiry, max(noticed, expiry), max(began, expiry), max(read, expiry), max(won, expiry),
                 winner["won"][str(shard)]]
        for part, start, end in zip(PARTS, marks, marks[1:]):
            split[part].append(end - start)
        split.setdefault("after_expiry", []).append(marks[-1] - expiry)
    return {part: {"p50": statistics.median(v), "max": max(v)} for part, v in split.items() if v}


def slowest(lost: list[int], view: dict[str, Any], expired: dict[str, float], before: dict[str, Any],
            killed: float, count: int = 3) -> list[dict[str, Any]]:
    """The ``count`` lost shards led again last: since the kill, their old leader's expiry, and the winning
    step's notice, start and win, and whether a watch event started that step (else its 1 s recheck)."""
    owner = {s: v["session"] for v in before.values() for s in v["leads"]}
    rows = []
    for shard in lost:
        name, winner = next(((n, v) for n, v in view.items() if str(shard) in v["wins"]), ("?", None))
        if winner is None or owner[shard] not in expired:
            continue
        noticed, began, _, won = winner["wins"][str(shard)]
        rows.append({"shard": shard, "winner": name, "expiry": expired[owner[shard]] - killed,
                     "noticed": noticed - killed, "began": began - killed, "won": won - killed,
                     "loaded": winner["won"][str(shard)] - killed, "event": noticed < began})
    return sorted(rows, key=lambda r: r["loaded"])[-count:]


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def seed(zk_hosts: str, shards: int, groups: int) -> None:
    """The cluster record, every shard's nodes, and ``groups`` small group records, spread by hash."""
    client = connect(zk_hosts, session_timeout=30)
    try:
        ensure_cluster(client, ZK_ROOT, shards)
        client.ensure_path(f"{ZK_ROOT}/shards")
        for suffix in ("", "/epoch", "/groups"):
            for result in [client.create_async(f"{ZK_ROOT}/shards/{s}{suffix}", b"") for s in range(shards)]:
                result.get(timeout=60)
        record = b"Z1" + zlib.compress(json.dumps({"generation": 1, "members": {}, "tasks": []}).encode())
        for start in range(0, groups, 2000):
            batch = [client.create_async(f"{ZK_ROOT}/shards/{shard_of(f'g{i}', shards)}/groups/g_g{i}", record)
                     for i in range(start, min(groups, start + 2000))]
            for result in batch:
                result.get(timeout=60)
    finally:
        client.stop()
        client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    zk = ZooKeeperServer(tick_ms=args.tick_ms)
    zk.config.write_text(zk.config.read_text().replace("4lw.commands.whitelist=ruok,srvr,stat,cons",
                                                       "4lw.commands.whitelist=ruok,srvr,stat,cons,mntr"))
    stamps = "-Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=yyyyMMddHHmmss.SSSZ"
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {stamps}".strip()
    zk.start()  # its log lines now carry wall-clock milliseconds (ZooKeeper's expiry of a session)
    sim = Sim(args, zk)
    try:
        seed(zk.hosts, args.shards, args.groups)
        n, many = args.coordinators, args.kill_many
        names = [f"c{i:03d}" for i in range(n)]
        bulk = names[: n - 1 - many]
        started = time.monotonic()
        per = -(-len(bulk) // args.procs) if args.procs > 0 else 1  # 0: one process each, as deployed
        groups = [bulk[i:i + per] for i in range(0, len(bulk), per)]
        *_, one, ten = sim.spawn(*groups, [names[n - 1 - many]], names[n - many:])
        all_started = time.monotonic() - started
        spread_s, view = sim.wait_even(600)
        spread_s = time.monotonic() - started
        sim.settle()
        view = sim.quiet()  # the last win's notifications read by all: the window opens on a cluster at rest
        cpu0, t0 = {k: v["cpu"] for k, v in view.items()}, time.monotonic()
        reads0, zk0, terms0 = sum(v["reads"] for v in view.values()), sim.mntr(), _terms(view)
        time.sleep(args.steady)  # the steady-state window being measured
        view, zk1 = sim.view(), sim.mntr()
        steady = {"cpu_share": max((view[k]["cpu"] - c) / (time.monotonic() - t0) for k, c in cpu0.items()),
                  "election_reads": sum(v["reads"] for v in view.values()) - reads0,
                  "zk_reads": zk1["reads"] - zk0["reads"], "zk_writes": zk1["writes"] - zk0["writes"],
                  "new_terms": len({shard for _, shard, _ in terms0 ^ _terms(view)})}
        one_out = sim.failover([one], view)
        view = sim.view()
        before = {s: k for k, v in view.items() for s in v["leads"]}
        added_at = time.monotonic()
        sim.spawn(["c-added"])
        _, view = sim.wait_even(120)
        added = {"moves": sum(1 for k, v in view.items() for s in v["leads"] if before.get(s) != k),
                 "even_s": time.monotonic() - added_at}
        sim.settle()
        many_out = sim.failover([ten], view)
        return {"bulk_procs": len(groups), "started_s": all_started, "spread_s": spread_s, "steady": steady, "one": one_out, "added": added, "many": many_out}
    finally:
        for h in sim.hosts:
            if h.alive and h.proc.stdin is not None:
                try:
                    h.proc.stdin.write("stop\n")
                    h.proc.stdin.flush()
                    h.proc.wait(30)
                except (OSError, subprocess.TimeoutExpired):
                    os.killpg(h.proc.pid, signal.SIGKILL)
        zk.close()


def _terms(view: dict[str, Any]) -> set[tuple[str, int, tuple[float, ...]]]:
    """Each led shard with its leader and the stamps of the step that won it: a new term changes them."""
    return {(name, shard, tuple(v["wins"].get(str(shard), ()))) for name, v in view.items() for shard in v["leads"]}


def report(args: argparse.Namespace, out: dict[str, Any], load: str) -> bool:
    n, one, many = args.coordinators, out["one"], out["many"]
    print(f"\nelection_sim: {n} coordinators, {args.shards} shards, {args.groups} groups, ZooKeeper session "
          f"{args.session:g}s, {out['bulk_procs']}+3 host processes; load average {load}")
    print(f"start to even spread: {out['spread_s']:.1f}s (every coordinator connected and started after "
          f"{out['started_s']:.1f}s); steady state ({args.steady:g}s): election thread "
          f"{100 * out['steady']['cpu_share']:.2f}% busy at most, {out['steady']['election_reads']} election reads, "
          f"{out['steady']['zk_reads']} reads and {out['steady']['zk_writes']} writes served, "
          f"{out['steady']['new_terms']} shard(s) in a new term")
    print("\n| event | load avg | shards | new leader p50 | p99 | max | ZK reads | ZK writes | election reads | "
          "election thread busy (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, row in ((f"1 of {n} SIGKILLed", one), (f"{args.kill_many} of {n} SIGKILLed at once", many)):
        print(f"| {label} | {row['load']:.1f} | {row['shards']} | {row['p50']:.2f}s | {row['p99']:.2f}s | {row['max']:.2f}s | "
              f"{row['zk_reads']} | {row['zk_writes']} | {row['election_reads']} | {100 * row['cpu_share']:.1f}% |")
    print(f"\none coordinator added: {out['added']['moves']} shard(s) moved, even again after "
          f"{out['added']['even_s']:.1f}s")
    print(f"\nwhere the time went, per lost shard, p50 / max (ZooKeeper tickTime {args.tick_ms} ms):\n")
    print("| event | " + " | ".join(PARTS) + " | after the expiry |")
    print("|---|" + "---:|" * (len(PARTS) + 1))
    for label, row in ((f"1 of {n} SIGKILLed", one), (f"{args.kill_many} of {n} SIGKILLed at once", many)):
        cells = [f"{row['parts'][k]['p50']:.2f} / {row['parts'][k]['max']:.2f}s" if k in row["parts"] else "?"
                 for k in (*PARTS, "after_expiry")]
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, row in ((f"1 of {n}", one), (f"{args.kill_many} of {n}", many)):
        print(f"\n{label}: sessions expired at " + ", ".join(f"{t:.2f}" for t in row["expiries"])
              + f"s after the kill; the surviving host processes used {row['hosts_cores']:.2f} cores (ZooKeeper "
              f"{row['zk_cores']:.2f}, a probe client's read {1000 * row['probe']['p50']:.1f} / "
              f"{1000 * row['probe']['max']:.1f} ms) over the "
              f"{row['busy_window']:.1f}s from the expiry to the even spread (their cycle collector: "
              f"{row['gc']['seconds']:.2f}s, {row['gc']['full']} full runs, the longest {row['gc']['longest']:.2f}s "
              "holding a whole process); the shards led again last (s after the kill):")
        for r in row["slowest"]:
            print(f"  shard {r['shard']}: old leader expired {r['expiry']:.2f}, {r['winner']} noticed {r['noticed']:.2f} "
                  f"({'a watch event' if r['event'] else 'its recheck'}), began {r['began']:.2f}, won {r['won']:.2f}, "
                  f"loaded {r['loaded']:.2f}")
    target = args.session + args.tick_ms / 1000 + 1
    ours = one["parts"].get("after_expiry", {}).get("max", float("inf"))
    expired = max(one["expiries"], default=float("nan"))
    print(f"\n1 killed: ZooKeeper expired its session {expired:.2f}s after the kill (session {args.session:g}s, "
          f"tickTime {args.tick_ms / 1000:g}s: {expired - args.session:+.2f}s against the session alone)")
    checks = [
        (f"1 killed: every shard led again within session + 1 s ({args.session + 1:g}s), as issue 37 states it",
         one["max"] <= args.session + 1),
        (f"1 killed: every shard led again within session + tick + 1 s ({target:g}s)", one["max"] <= target),
        ("1 killed: every shard led again within 1 s of ZooKeeper's expiry of the session", ours <= 1.0),
        (f"1 killed: ZK reads <= 10 x coordinators x its shards ({10 * n * one['shards']})",
         one["zk_reads"] <= 10 * n * one["shards"]),
        ("steady state: election thread under 10 % busy", out["steady"]["cpu_share"] < 0.10),
    ]
    for what, ok in checks:
        print(f"{'PASS' if ok else 'MISS'}: {what}")
    return all(ok for _, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinators", type=int, default=100)
    parser.add_argument("--shards", type=int, default=1024)
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument("--procs", type=int, default=0,
                        help="host processes for the bulk of the coordinators (default 0: one each, as deployed; "
                             "a few: less memory and a faster start, but coordinators of one process queue for "
                             "its GIL)")
    parser.add_argument("--kill-many", type=int, default=10)
    parser.add_argument("--session", type=float, default=10.0, help="ZooKeeper session timeout, seconds")
    parser.add_argument("--tick-ms", type=int, default=2000,
                        help="ZooKeeper's tickTime (sessions expire up to a tick late); 2000 is its default")
    parser.add_argument("--steady", type=float, default=10.0, help="steady-state window, seconds")
    parser.add_argument("--records-ahead", type=int, default=None,
                        help="group records a claim reads ahead of its answer (default: shard_reads.RECORDS_AHEAD; 0: none)")
    parser.add_argument("--plan-on-departure", action="store_true",
                        help="plan on one departure named by its member node's event, before the members' read "
                             "(coordinator/ha/departures.py; off by default)")
    parser.add_argument("--quick", action="store_true", help="20 coordinators, 256 shards, 2,000 groups")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line too")
    parser.add_argument("--host", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--zk", default="", help=argparse.SUPPRESS)
    parser.add_argument("--names", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host:
        return host(args)
    if args.quick:
        args.coordinators, args.shards, args.groups, args.procs, args.kill_many = 20, 256, 2000, 2, 5
        args.session, args.steady = 4.0, 5.0
    if args.coordinators < args.kill_many + 3:
        parser.error("--coordinators must leave at least 2 beside the killed ones")
    out = run(args)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ok = report(args, out, load)
    if args.json:
        print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
