"""Run a seeded fault schedule against real processes and judge the ownership log.

    python -m tests.chaos.run --faults 1000 --seed 17            # `make chaos`
    python -m tests.chaos.run --faults 50 --seed 1 --groups 3    # what CI runs (tests/chaos/test_chaos.py)
    python -m tests.chaos.run --env sharded --faults 300 --seed 17   # `make chaos` too; CI: 8 faults, seed 8
    python -m tests.chaos.run --protocol consumer --faults 300 --seed 17    # workers on the consumer protocol
    python -m tests.chaos.run --protocol mixed --faults 300 --seed 17       # half of them: groups that convert

Prints the faults injected by kind, the violations (must be 0), the longest unowned gap per kind
and the time to settle after each fault (median, max); exits 1 on any violation or a fault the
system did not settle from. The two environments (SQLite behind the fault proxy, ZooKeeper HA)
run at the same time, each on its own log under ``--workdir``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.cluster import GROUP_PROTOCOLS, Timing
from tests.chaos.environments import Env, ShardedEnv, SqliteEnv, ZooKeeperEnv
from tests.chaos.ownership import OwnershipLog, Report, blame, check
from tests.chaos.schedule import Round, make_schedule

__all__ = ["EnvResult", "main", "run_env", "run_schedule"]

SETTLE_TIMEOUT_S = 60.0
CONVERTED, CONVERTED_BACK = "converted to the consumer protocol", "converted back to the classic protocol"


@dataclass
class EnvResult:
    env: str
    report: Report | None = None
    settle: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # kind -> seconds
    unsettled: list[str] = field(default_factory=list)
    store_failures: dict[int, int] = field(default_factory=dict)
    groups_after_restart: int = -1
    conversions: tuple[int, int] = (0, 0)  # classic -> consumer, and back (the coordinators' logs)
    error: str = ""
    seconds: float = 0.0


def run_round(env: Env, rnd: Round, result: EnvResult) -> None:
    crashed = env.workers.dead()
    if crashed:
        result.unsettled.append(f"worker process(es) died on their own: {', '.join(crashed)}")
        for slot, proc in list(env.workers.procs.items()):
            if proc.poll() is not None:
                env.workers.start(slot)
        env.wait_settled(SETTLE_TIMEOUT_S)
    began = time.monotonic()
    injected = [(spec, *env.inject(spec)) for spec in rnd.faults]
    healed: list[tuple[str, float]] = []
    for spec, fid, state in sorted(injected, key=lambda item: item[0].hold_s):
        time.sleep(max(0.0, began + spec.hold_s - time.monotonic()))  # the fault's duration is the point
        env.heal(fid, spec, state)
        healed.append((spec.kind, time.monotonic()))
    try:
        env.wait_settled(SETTLE_TIMEOUT_S)
    except AssertionError as timeout:
        result.unsettled.append(f"{[s.kind for s in rnd.faults]}: {timeout}")
        return
    settled = time.monotonic()
    for kind, at in healed:  # each fault from its own heal (a round heals its faults one by one)
        result.settle[kind].append(settled - at)


def run_env(env: Env, rounds: list[Round], result: EnvResult) -> None:
    began = time.monotonic()
    try:
        env.start()
        env.wait_settled(120)
        since = time.time()
        for rnd in rounds:
            run_round(env, rnd, result)
        env.stop_workers(converted_back=lambda: env.coordinator_logs().count(CONVERTED_BACK))
        logs = env.coordinator_logs()
        result.conversions = (logs.count(CONVERTED), logs.count(CONVERTED_BACK))
        result.store_failures = dict(env.store_failures)
        if isinstance(env, SqliteEnv):
            result.groups_after_restart = env.verify_store()
        t = env.timing
        result.report = check(OwnershipLog.read(env.log_path), session_s=t.session_s,
                              rebalance_timeout_s=t.rebalance_timeout_s, heartbeat_s=t.heartbeat_s, since=since)
    except Exception as failure:  # noqa: BLE001 - reported with the table, and fails the run
        result.error = f"{type(failure).__name__}: {failure}"
    finally:
        env.close()
        result.seconds = time.monotonic() - began


def run_schedule(faults: int, seed: int, *, groups: int = 3, slots: int = 3, tasks_per_group: int = 6,
                 workdir: Path | None = None, envs: tuple[str, ...] = ("sqlite", "zookeeper"),
                 timing: Timing | None = None, protocol: str = "classic") -> list[EnvResult]:
    timing = timing or Timing()
    workdir = workdir or Path(tempfile.mkdtemp(prefix="groupcoord-chaos-"))
    schedule = make_schedule(faults, seed, groups=groups, slots=slots, session_s=timing.session_s, envs=envs)
    kinds: dict[str, type[Env]] = {"sqlite": SqliteEnv, "zookeeper": ZooKeeperEnv, "sharded": ShardedEnv}
    results = [EnvResult(name) for name in envs]
    threads = []
    for result in results:
        env = kinds[result.env](workdir / result.env, timing, groups, slots, tasks_per_group,
                                random.Random(f"{seed}/{result.env}"), group_protocol=protocol)
        threads.append(threading.Thread(target=run_env, args=(env, schedule[result.env], result), name=result.env))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def violations(results: list[EnvResult]) -> list[str]:
    out = []
    for r in results:
        if r.error:
            out.append(f"{r.env}: run failed: {r.error}")
        out += [f"{r.env}: did not settle: {u}" for u in r.unsettled]
        if r.report is not None:
            out += [f"{r.env}: {v}" for v in r.report.violations]
    return out


def table(results: list[EnvResult]) -> str:
    count: dict[str, int] = defaultdict(int)
    bad: dict[str, int] = defaultdict(int)
    gap: dict[str, float] = defaultdict(float)
    settle: dict[str, list[float]] = defaultdict(list)
    allowed = 0
    notices: list[float] = []
    for r in results:
        for kind, values in r.settle.items():
            settle[kind] += values
        if r.report is None:
            continue
        for fault in r.report.faults:
            count[fault.kind] += 1
        for g in r.report.gaps:
            kind = g.fault.kind if g.fault else "(none)"
            gap[kind] = max(gap[kind], g.seconds)
            bad[kind] += g.excess > 0
        for o in r.report.overlaps:
            allowed += o.allowed
            if not o.allowed:
                fault = blame(r.report.faults, o.second.start, o.task.partition("-")[0])
                bad[fault.kind if fault else "(none)"] += 1
        notices += r.report.stop_notice
    lines = [(f"{'fault kind':<18}{'injected':>9}{'violations':>11}{'longest gap s':>15}"
              f"{'settle med s':>14}{'settle max s':>14}")]
    for kind in sorted(set(count) | set(settle) | set(gap)):
        values = settle.get(kind, [])
        med = statistics.median(values) if values else math.nan
        top = max(values) if values else math.nan
        lines.append(f"{kind:<18}{count.get(kind, 0):>9}{bad.get(kind, 0):>11}{gap.get(kind, 0.0):>15.2f}"
                     f"{med:>14.2f}{top:>14.2f}")
    every = [v for values in settle.values() for v in values]
    lines.append(f"{'total':<18}{sum(count.values()):>9}{len(violations(results)):>11}{max(gap.values(), default=0):>15.2f}"
                 f"{statistics.median(every) if every else math.nan:>14.2f}{max(every, default=math.nan):>14.2f}")
    lines.append(f"overlaps allowed (SIGSTOPped owner, stopped within the bound after SIGCONT): {allowed}; "
                 f"SIGCONT -> stop logged: max {max(notices, default=0):.3f}s")
    for r in results:
        extra = ""
        if r.env == "sqlite":
            bit = sum(1 for n in r.store_failures.values() if n > 0)
            extra = (f"; disk_full faults that refused a write: {bit}/{len(r.store_failures)} "
                     f"({sum(r.store_failures.values())} writes refused); groups loaded after a final restart: "
                     f"{r.groups_after_restart}")
        if r.conversions != (0, 0):
            extra += f"; groups converted to the consumer protocol {r.conversions[0]}, back {r.conversions[1]}"
        lines.append(f"{r.env}: {r.seconds:.0f}s{extra}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--groups", type=int, default=3, help="groups per environment (3 workers each)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--env", choices=["both", "sqlite", "zookeeper", "sharded"], default="both",
                        help="both = sqlite and zookeeper at once; sharded = three sharded coordinators")
    parser.add_argument("--protocol", choices=GROUP_PROTOCOLS, default="classic",
                        help="what the workers speak: classic (JoinGroup/SyncGroup; half the groups eager, half "
                             "cooperative), consumer (GroupHeartbeat), or mixed (every other worker of each group "
                             "on the consumer protocol: the groups convert and convert back)")
    args = parser.parse_args(argv)
    envs = ("sqlite", "zookeeper") if args.env == "both" else (args.env,)
    began = time.monotonic()
    results = run_schedule(args.faults, args.seed, groups=args.groups, workdir=args.workdir, envs=envs,
                           protocol=args.protocol)
    print(table(results))
    problems = violations(results)
    for problem in problems[:50]:
        print("VIOLATION", problem)
    load = os.getloadavg()
    print(f"{args.faults} faults, seed {args.seed}, protocol {args.protocol}, {time.monotonic() - began:.0f}s, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
