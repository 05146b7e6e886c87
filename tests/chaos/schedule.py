"""The seeded fault schedule: which fault, on what, for how long; the same seed gives the same run.

Faults come in rounds. A worker round hits one worker in each of several groups at once (a kill
and restart, or a SIGSTOP past the session); a global round hits what every group shares (the
coordinator, the proxy, the disk, ZooKeeper). The environments share the schedule: ``sqlite`` (one
coordinator on SQLite, workers behind the fault proxy), ``zookeeper`` (two coordinators elected
on a real ZooKeeper) and ``sharded`` (three sharded coordinators, each reaching ZooKeeper through
its own fault proxy).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["ENV_KINDS", "WORKER_KINDS", "FaultSpec", "Round", "make_schedule"]

WORKER_KINDS = ("worker_kill", "worker_stop")
ENV_KINDS: dict[str, tuple[str, ...]] = {
    "sqlite": ("coordinator_kill", "proxy_delay", "proxy_drop", "disk_full"),
    "zookeeper": ("active_kill", "zk_restart"),
    "sharded": ("shard_kill", "shard_stop", "zk_cut"),
}
_SHARE = {"sqlite": 0.6, "zookeeper": 0.4, "sharded": 0.4}
SHARDED_ZK_SESSION_S = 2.0  # the sharded coordinators' ZooKeeper session (environments.ShardedEnv)
_GLOBAL_ROUNDS = 0.3  # of the rounds; a worker round carries several faults


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    group: str = ""  # worker faults: the group whose worker is hit
    slot: int = 0
    hold_s: float = 0.0  # how long the fault lasts before it is healed
    delay_s: float = 0.0  # proxy_delay
    mode: str = ""  # proxy_drop: "drop" (connections closed) or "blackhole" (bytes vanish)
    # proxy faults hit every worker (group "") or one worker (group and slot): a partition of one


@dataclass
class Round:
    env: str
    faults: list[FaultSpec] = field(default_factory=list)


def _worker_fault(rng: random.Random, group: str, slots: int, session_s: float) -> FaultSpec:
    kind = rng.choice(WORKER_KINDS)
    hold = session_s + rng.uniform(0.3, 1.0) if kind == "worker_stop" else 0.0
    return FaultSpec(kind, group=group, slot=rng.randrange(slots), hold_s=round(hold, 3))


def _global_fault(rng: random.Random, env: str, session_s: float, groups: int, slots: int) -> FaultSpec:
    kind = rng.choice(ENV_KINDS[env])
    group, slot = (f"g{rng.randrange(groups)}", rng.randrange(slots)) if rng.random() < 0.5 else ("", 0)
    if kind == "proxy_delay":
        return FaultSpec(kind, group, slot, hold_s=round(rng.uniform(0.5, 2.0), 3),
                         delay_s=round(rng.uniform(0.05, 0.6), 3))
    if kind == "proxy_drop":
        # short: within the session (tasks must keep running); long: past it (tasks must move, once)
        hold = rng.uniform(0.2, session_s * 0.6) if rng.random() < 0.5 else session_s + rng.uniform(0.2, 1.0)
        return FaultSpec(kind, group, slot, hold_s=round(hold, 3), mode=rng.choice(("drop", "blackhole")))
    if kind == "disk_full":
        return FaultSpec(kind, group="", hold_s=round(rng.uniform(1.0, 3.0), 3))
    if kind == "zk_restart":
        return FaultSpec(kind, hold_s=round(rng.uniform(0.2, 1.5), 3))
    if kind in ("shard_stop", "zk_cut"):  # past the coordinator's ZooKeeper session: its shards move
        return FaultSpec(kind, hold_s=round(SHARDED_ZK_SESSION_S + rng.uniform(0.3, 1.5), 3))
    return FaultSpec(kind)


def make_schedule(faults: int, seed: int, *, groups: int, slots: int, session_s: float,
                  envs: tuple[str, ...] = ("sqlite", "zookeeper")) -> dict[str, list[Round]]:
    """``faults`` faults over ``envs`` (60/40 when both), as rounds per environment."""
    rng = random.Random(seed)
    share = {env: _SHARE[env] for env in envs}
    total = sum(share.values())
    budget = {env: round(faults * share[env] / total) for env in envs}
    budget[envs[0]] += faults - sum(budget.values())
    schedule: dict[str, list[Round]] = {}
    for env in envs:
        rounds: list[Round] = []
        left = budget[env]
        names = [f"g{i}" for i in range(groups)]
        while left > 0:
            if rng.random() < _GLOBAL_ROUNDS or left == 1 and rng.random() < 0.5:
                rounds.append(Round(env, [_global_fault(rng, env, session_s, groups, slots)]))
                left -= 1
                continue
            hit = rng.sample(names, k=min(left, rng.randint(1, groups)))
            rounds.append(Round(env, [_worker_fault(rng, g, slots, session_s) for g in sorted(hit)]))
            left -= len(hit)
        schedule[env] = rounds
    return schedule
