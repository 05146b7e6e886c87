"""Task downtime: a rolling restart and a scale-out, eager vs cooperative vs cooperative + static (classic
protocol) vs consumer protocol, with static instance ids too.

    python benchmarks/downtime_bench.py [--quick] [--heartbeat-interval-ms N]

Real processes: the coordinator (``groupcoord serve``, in-memory store) in its
own process, and ``groupcoord worker`` processes whose JSON lines (read by one
thread per worker, to the last line after exit) form an ownership log of
(time, member, generation, task, start|stop). Every row uses the ``sticky``
assignor, so only the protocol and static membership differ. The consumer protocol's rows run
``groupcoord worker --protocol consumer`` (the coordinator assigns, sticky, and sets the heartbeat
interval: the coordinator is given the workers' interval); its static row gives each worker an
instance id, so a SIGTERMed worker leaves with epoch -2 and its tasks wait for its next process:

- rolling restart: N workers, each in turn SIGTERMed, waited for, started again
  (same name, same instance id in the static row); the next one only once the
  group is Stable with every task assigned and running again;
- scale-out: N/2 workers, then N/2 more started at once, until Stable with every
  worker holding tasks.

Columns, all from the log between the first moment the group was Stable with
every task running (T0) and the end of the scenario (T1): task-seconds not
running (a task is down from its stop event to its next start event anywhere;
the "+warm-up" column adds WARMUP_S to each start, for tasks that take time to be
up), tasks moved (started on a worker other than the one that ran it last),
rebalances (generation at T1 minus at T0, from DescribeGroup; the consumer
protocol's group epoch), double ownership
(a task started while another worker still ran it; must be 0, checked over the
whole log), the worst single outage, and wall time T0..T1. Exit 1 on double
ownership or a scenario that did not settle in time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from groupcoord.admin import AdminClient
from groupcoord.v1 import groupcoord_pb2 as pb

GROUP = "downtime"
# A real task is not up the instant it is started (connections, state to load): the second downtime
# column counts each start as this much more time down. The eager protocol restarts every task of
# the group at each rebalance, so this is where it pays.
WARMUP_S = 1.0
SCENARIOS = ("rolling restart", "scale-out")
CONSUMER = "consumer"  # a row's protocol: a classic rebalance protocol (eager, cooperative) or the consumer protocol
ROWS = (("eager", "eager", False), ("cooperative", "cooperative", False), ("cooperative + static", "cooperative", True),
        ("consumer", CONSUMER, False), ("consumer + static", CONSUMER, True))


@dataclass(frozen=True)
class Settings:
    workers: int
    tasks: int
    session_ms: int
    heartbeat_ms: int
    rebalance_ms: int
    settle_s: float  # one wait for the group to settle
    row_budget_s: float  # a whole row, formation included
    env: dict[str, str]
    tmp: Path  # the workers' and the coordinator's stderr (the --dump directory if given)
    log_level: str
    restart_pause_s: float  # between a worker's exit and its new start: a service slower to start than this one


@dataclass(frozen=True, order=True)
class Event:
    ts: float
    stop_first: int  # at equal times a stop sorts before a start: a handover at one instant is no overlap
    member: str
    generation: int
    task: str
    kind: str  # "start" | "stop"


class OwnershipLog:
    """The workers' events as one log, plus what each member runs now (kept per member in its own line
    order, which is exact even though lines of different members arrive in any order)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self.running: dict[str, set[str]] = {}
        self.generation: dict[str, int] = {}
        self.notes: list[str] = []

    def feed(self, member: str, line: str) -> None:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            with self.lock:
                self.notes.append(f"{member}: not a JSON line: {line.strip()[:120]}")
            return
        kind = {"assigned": "start", "revoked": "stop", "lost": "stop"}.get(event.get("event", ""))
        with self.lock:
            if "generation" in event:
                self.generation[member] = int(event["generation"])
            if kind is None:
                return
            running = self.running.setdefault(member, set())
            generation = self.generation.get(member, -1)
            for task in event.get("tasks", []):
                self.events.append(Event(float(event["ts"]), int(kind == "start"), member, generation, task, kind))
                (running.add if kind == "start" else running.discard)(task)
            if event["event"] == "lost":
                self.notes.append(f"{member}: lost {len(event['tasks'])} task(s) at generation {generation}")

    def exited(self, member: str, ts: float) -> None:
        """A process is gone: anything it never said it stopped stops now (and that is worth a note)."""
        with self.lock:
            left = sorted(self.running.get(member, set()))
            if left:
                self.notes.append(f"{member}: exited without a stop line for {len(left)} task(s), e.g. {left[:3]}")
                generation = self.generation.get(member, -1)
                self.events.extend(Event(ts, 0, member, generation, task, "stop") for task in left)
                self.running[member] = set()

    def matches(self, assigned: dict[str, str]) -> bool:
        """Every task runs on exactly the member DescribeGroup names, and nobody runs anything else."""
        with self.lock:
            runners: dict[str, list[str]] = {}
            for member, tasks in self.running.items():
                for task in tasks:
                    runners.setdefault(task, []).append(member)
        return runners == {task: [member] for task, member in assigned.items()}


class Worker:
    """One ``groupcoord worker`` process; its stdout goes, line by line, into the log."""

    def __init__(self, name: str, address: str, protocol: str, static: bool, s: Settings, log: OwnershipLog) -> None:
        self.name, self.log = name, log
        self.signalled = False
        command = [sys.executable, "-m", "groupcoord.cli", "--log-level", s.log_level, "worker", "--group", GROUP,
                   "--coordinator", address, "--name", name, "--assignor", "sticky",
                   "--session-timeout-ms", str(s.session_ms), "--heartbeat-interval-ms", str(s.heartbeat_ms),
                   "--rebalance-timeout-ms", str(s.rebalance_ms)]
        command += ["--protocol", CONSUMER] if protocol == CONSUMER else ["--rebalance-protocol", protocol]
        if static:
            command += ["--instance-id", name]
        self.stderr_path = s.tmp / f"{name}-{time.monotonic_ns()}.err"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
                                         env=s.env)
        self.reader = threading.Thread(target=self._pump, name=f"log-{name}", daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.feed(self.name, line)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, wait for the exit, then for the last line it printed."""
        if not self.signalled:  # once: a second SIGTERM during interpreter shutdown would kill it mid-exit
            self.proc.terminate()
            self.signalled = True
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.log.notes.append(f"{self.name}: no exit {timeout:.0f}s after SIGTERM; SIGKILLed")
            self.proc.kill()
            code = self.proc.wait(5)
        exit_ts = time.time()
        self.reader.join(10)  # EOF: every line the process wrote is in the log
        self.log.exited(self.name, exit_ts)
        if code != 0:
            tail = self.stderr_path.read_text().strip().splitlines()[-3:]
            self.log.notes.append(f"{self.name}: exit status {code}: {' | '.join(tail)}")


@dataclass
class Result:
    scenario: str
    row: str
    downtime: float = math.nan
    downtime_warm: float = math.nan  # the same, when a started task takes WARMUP_S to be up
    worst: float = 0.0  # the longest single outage of any task
    moved: int = 0
    stops: int = 0
    rebalances: int = 0
    double: list[str] = field(default_factory=list)
    wall: float = math.nan
    error: str = ""
    notes: list[str] = field(default_factory=list)


def analyse(events: list[Event], tasks: list[str], t0: float, t1: float, result: Result) -> None:
    """Downtime, moves and double ownership from the log alone (never from what the coordinator says)."""
    owners: dict[str, set[str]] = {t: set() for t in tasks}
    down_since = dict.fromkeys(tasks, -math.inf)
    last_runner: dict[str, str] = {}
    outage: dict[str, float] = dict.fromkeys(tasks, 0.0)
    warm_outage: dict[str, float] = dict.fromkeys(tasks, 0.0)

    def down(task: str, since: float, until: float, warmup: float = 0.0) -> None:
        seconds = max(0.0, min(until, t1) - max(since, t0))
        outage[task] = outage.get(task, 0.0) + seconds
        warm_outage[task] = warm_outage.get(task, 0.0) + seconds + (warmup if t0 < until <= t1 else 0.0)
        result.worst = max(result.worst, seconds)

    for e in sorted(events):
        running = owners.setdefault(e.task, set())
        if e.kind == "start":
            others = running - {e.member}
            if others:
                result.double.append(f"{e.ts:.3f} {e.task} started on {e.member} (generation {e.generation}) "
                                     f"while {', '.join(sorted(others))} ran it")
            if e.member in running:
                result.notes.append(f"{e.member} started {e.task} again without stopping it ({e.ts:.3f})")
            if not running:
                down(e.task, down_since.get(e.task, -math.inf), e.ts, WARMUP_S)
            if t0 < e.ts <= t1 and last_runner.get(e.task, e.member) != e.member:
                result.moved += 1
            running.add(e.member)
            last_runner[e.task] = e.member
        else:
            result.stops += t0 < e.ts <= t1
            if e.member not in running:
                result.notes.append(f"{e.member} stopped {e.task}, which it did not run ({e.ts:.3f})")
            running.discard(e.member)
            if not running:
                down_since[e.task] = e.ts
    for task, running in owners.items():
        if not running:
            down(task, down_since.get(task, -math.inf), t1)
    result.downtime = sum(outage.values())
    result.downtime_warm = sum(warm_outage.values())


def start_coordinator(s: Settings) -> tuple[subprocess.Popen[bytes], str]:
    """``groupcoord serve`` on a free loopback port, in its own process (its CPU apart from ours)."""
    data = Path(tempfile.mkdtemp(prefix="coordinator-", dir=s.tmp))
    err = data / "serve.err"
    config = data / "coordinator.toml"  # consumer-protocol members heartbeat at the interval it sets: the workers'
    config.write_text(f"[coordinator]\nconsumer_heartbeat_interval_ms = {s.heartbeat_ms}\n")
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0",
                                 "--config", str(config), "--store", "memory", "--data-dir", str(data),
                                 "--initial-rebalance-delay-ms", "1000"],
                                stdout=subprocess.DEVNULL, stderr=stderr, env=s.env)
    deadline = time.monotonic() + 120  # a start took over 30 s niced at load 18 (its imports alone take 4 s idle)
    while time.monotonic() < deadline and proc.poll() is None:
        for line in err.read_text().splitlines():
            if "listening on " in line:
                return proc, line.split("listening on ", 1)[1].split()[0]
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"the coordinator did not start: {err.read_text().strip()[-300:]}")


def settled(tasks: list[str], names: list[str], log: OwnershipLog, replaced: dict[str, str] | None = None,
            every_member_busy: bool = False) -> Callable[[pb.DescribeGroupResponse], bool]:
    """Stable, exactly these members (restarted ones under a new member id), every task assigned, and the
    workers' own lines say each task runs where the coordinator says."""
    def check(d: pb.DescribeGroupResponse) -> bool:
        ids = {m.member.client_id: m.member.member_id for m in d.members}
        assigned = {t.task_id: m.member.client_id for m in d.members for t in m.assigned}
        return (d.state == pb.STABLE and sorted(ids) == sorted(names) and sorted(assigned) == tasks
                and all(ids[n] != old for n, old in (replaced or {}).items())
                and (not every_member_busy or all(m.assigned for m in d.members)) and log.matches(assigned))
    return check


def epoch_of(d: pb.DescribeGroupResponse) -> int:
    """The classic generation, or the consumer group's epoch (one per change of membership)."""
    return int(d.group_epoch) if d.group_type == CONSUMER else int(d.generation)


def run_row(scenario: str, row: str, protocol: str, static: bool, s: Settings, dump: Path | None) -> Result:
    result = Result(scenario, row)
    log = OwnershipLog()
    tasks = sorted(f"t{i:03d}" for i in range(s.tasks))
    coordinator, address = start_coordinator(s)
    admin = AdminClient(address)
    workers: dict[str, Worker] = {}
    deadline = time.monotonic() + s.row_budget_s

    def wait(predicate: Callable[[pb.DescribeGroupResponse], bool], what: str) -> pb.DescribeGroupResponse:
        timeout = max(1.0, min(s.settle_s, deadline - time.monotonic()))
        try:
            return admin.wait_for(GROUP, predicate, timeout, poll_s=0.1)
        except TimeoutError as error:
            raise TimeoutError(f"{what}: {error}") from None

    t0 = t1 = math.nan
    try:
        admin.put_tasks(GROUP, tasks)
        first = [f"w{i}" for i in range(s.workers if scenario == "rolling restart" else s.workers // 2)]
        workers = {n: Worker(n, address, protocol, static, s, log) for n in first}
        before = wait(settled(tasks, first, log), "forming the group")
        t0 = time.time()
        if scenario == "rolling restart":
            for name in first:
                old = next(m.member.member_id for m in admin.describe_group(GROUP).members
                           if m.member.client_id == name)
                workers[name].stop()
                time.sleep(s.restart_pause_s)
                workers[name] = Worker(name, address, protocol, static, s, log)
                after = wait(settled(tasks, first, log, {name: old}), f"after restarting {name}")
        else:
            every = [f"w{i}" for i in range(s.workers)]
            workers.update({n: Worker(n, address, protocol, static, s, log) for n in every if n not in workers})
            after = wait(settled(tasks, every, log, every_member_busy=True), "scaling out")
        t1 = time.time()
        result.rebalances = epoch_of(after) - epoch_of(before)
        result.wall = t1 - t0
    except (TimeoutError, RuntimeError) as error:
        result.error = str(error)
        with log.lock:
            result.notes.append(f"not running at timeout: {sorted(set(tasks) - set().union(*log.running.values()))}")
    finally:
        for worker in workers.values():  # all at once; stop() then signals none twice
            if worker.proc.poll() is None:
                worker.proc.terminate()
                worker.signalled = True
        for worker in workers.values():
            worker.stop()
        admin.close()
        coordinator.terminate()
        try:
            coordinator.wait(10)
        except subprocess.TimeoutExpired:
            coordinator.kill()
            coordinator.wait(5)
    now = time.time()
    if dump is not None:
        with open(dump / f"{scenario}-{row}.jsonl".replace(" ", "_").replace("+", "plus"), "w") as out:
            out.write(json.dumps({"t0": t0, "t1": t1}) + "\n")
            out.writelines(json.dumps(e.__dict__) + "\n" for e in sorted(log.events))
    analyse(log.events, tasks, now if math.isnan(t0) else t0, now if math.isnan(t1) else t1, result)
    result.notes = log.notes + result.notes
    return result


def report(results: list[Result], s: Settings, scale_from: int) -> bool:
    """Print the table and the target; returns whether every row is sound (settled, no double ownership)."""
    print(f"\nTask downtime, {s.tasks} tasks, assignor sticky in every row (only the protocol differs); "
          f"session {s.session_ms / 1000:g} s, heartbeat {s.heartbeat_ms / 1000:g} s, "
          f"rebalance timeout {s.rebalance_ms / 1000:g} s; coordinator in its own process")
    pause = f", {s.restart_pause_s:g} s between exit and start" if s.restart_pause_s else ""
    print(f"rolling restart: {s.workers} workers one by one{pause}; scale-out: {scale_from} -> {s.workers} workers\n")
    head = (f"{'scenario':<16}{'row':<22}{'down task-s':>12}{'eager/row':>10}{'+warm-up':>10}{'eager/row':>10}"
            f"{'stops':>7}{'moved':>7}"
            f"{'rebalances':>11}{'double own.':>12}{'worst s':>9}{'wall s':>8}")
    print(head)
    print("-" * len(head))
    sound = True
    for scenario in SCENARIOS:
        rows = [r for r in results if r.scenario == scenario]
        eager = next((r.downtime for r in rows if r.row == "eager" and not r.error), math.nan)
        eager_warm = next((r.downtime_warm for r in rows if r.row == "eager" and not r.error), math.nan)
        for r in rows:
            if r.error:
                print(f"{r.scenario:<16}{r.row:<22}  FAILED: {r.error}")
                sound = False
                continue
            ratio = eager / r.downtime if r.downtime > 0 else math.inf
            warm = eager_warm / r.downtime_warm if r.downtime_warm > 0 else math.inf
            print(f"{r.scenario:<16}{r.row:<22}{r.downtime:>12.1f}{ratio:>9.{1 if ratio >= 1 else 2}f}x"
                  f"{r.downtime_warm:>10.1f}{warm:>9.{1 if warm >= 1 else 2}f}x{r.stops:>7}{r.moved:>7}"
                  f"{r.rebalances:>11}{len(r.double):>12}{r.worst:>9.2f}{r.wall:>8.1f}")
            sound = sound and not r.double
    print()
    for scenario in SCENARIOS:
        by_row = {r.row: r for r in results if r.scenario == scenario and not r.error}
        if "eager" in by_row and "cooperative + static" in by_row:
            for label, eager_s, best in (
                ("instant tasks", by_row["eager"].downtime, by_row["cooperative + static"].downtime),
                (f"{WARMUP_S:g} s warm-up", by_row["eager"].downtime_warm, by_row["cooperative + static"].downtime_warm),
            ):
                ratio = eager_s / best if best > 0 else math.inf
                verdict = "met" if ratio >= 10 else "NOT met"
                print(f"target (cooperative + static >= 10x less downtime than eager), {scenario}, {label}: "
                      f"{verdict} ({ratio:.{1 if ratio >= 1 else 2}f}x)")
    for scenario in SCENARIOS:  # issue 34: the classic protocol's best against the consumer protocol's
        by_row = {r.row: r for r in results if r.scenario == scenario and not r.error}
        if "cooperative + static" in by_row and "consumer + static" in by_row:
            classic, consumer = by_row["cooperative + static"], by_row["consumer + static"]
            print(f"{scenario}: consumer + static {consumer.downtime:.1f} task-s down ({consumer.downtime_warm:.1f} "
                  f"with warm-up), {consumer.moved} moved, {consumer.wall:.1f} s; cooperative + static "
                  f"{classic.downtime:.1f} ({classic.downtime_warm:.1f}), {classic.moved} moved, {classic.wall:.1f} s")
    for r in results:
        for line in r.double[:5]:
            print(f"DOUBLE OWNERSHIP ({r.scenario}, {r.row}): {line}")
        for note in r.notes[:8]:
            print(f"note ({r.scenario}, {r.row}): {note}")
    return sound


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke size: 4 workers, 40 tasks")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=3000,
                        help="the workers' heartbeat interval, which paces how soon they hear of a rebalance "
                             "(default 3000, the console worker's and Kafka's default)")
    parser.add_argument("--scenario", choices=["all", "rolling", "scale-out"], default="all")
    parser.add_argument("--restart-pause-s", type=float, default=0.0,
                        help="wait this long before starting a restarted worker again (default 0)")
    parser.add_argument("--dump", type=Path, help="write each row's ownership log (JSON lines) into this directory")
    parser.add_argument("--session-timeout-ms", type=int, default=30_000,
                        help="longer than a restart takes, as docs/rebalancing.md asks of static members")
    args = parser.parse_args()
    workers, tasks = (4, 40) if args.quick else (10, 200)
    with tempfile.TemporaryDirectory(prefix="downtime-bench-") as tmp:
        s = Settings(workers=workers, tasks=tasks, session_ms=args.session_timeout_ms,
                     heartbeat_ms=args.heartbeat_interval_ms, rebalance_ms=30_000,
                     settle_s=30 if args.quick else 60, row_budget_s=60 if args.quick else 240,
                     env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                                   os.environ.get("PYTHONPATH")]))),
                     tmp=args.dump or Path(tmp), log_level="info" if args.dump else "warning",
                     restart_pause_s=args.restart_pause_s)
        s.tmp.mkdir(parents=True, exist_ok=True)
        results = []
        for scenario in [c for c in SCENARIOS if args.scenario in ("all", c.split()[0])]:
            for row, protocol, static in ROWS:
                started = time.monotonic()
                results.append(run_row(scenario, row, protocol, static, s, args.dump))
                print(f"{scenario}, {row}: done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
        return 0 if report(results, s, workers // 2) else 1


if __name__ == "__main__":
    sys.exit(main())
