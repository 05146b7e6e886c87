"""The shard balancing decisions (``coordinator.ha.balance``), as pure functions: exact answers
for the cases that matter, and a simulated cluster that must settle evenly with few moves."""

from __future__ import annotations

import random

import pytest

from groupcoord.coordinator.ha.balance import Plan, plan, targets


def test_targets_sum_to_the_shards_and_the_extra_goes_to_who_leads_most() -> None:
    assert targets(["a", "b", "c"], {"a": 0, "b": 30, "c": 0}, 64) == {"b": 22, "a": 21, "c": 21}
    assert targets(["a", "b", "c"], {}, 64) == {"a": 22, "b": 21, "c": 21}
    assert targets([], {}, 64) == {}
    assert sum(targets([f"m{i}" for i in range(7)], {}, 64).values()) == 64


def test_a_lone_coordinator_takes_every_free_shard() -> None:
    assert plan("a", ["a"], {}, 4) == Plan(take=[0, 1, 2, 3])


def test_free_shards_are_handed_out_once_between_members() -> None:
    leaders: dict[int, str | None] = {}
    a, b = plan("a", ["a", "b"], leaders, 6), plan("b", ["a", "b"], leaders, 6)
    assert sorted(a.take + b.take) == list(range(6)) and not set(a.take) & set(b.take)
    assert (len(a.take), len(b.take)) == (3, 3)


def test_a_dead_coordinators_shards_go_to_the_living() -> None:
    leaders: dict[int, str | None] = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    live = ["a", "b"]  # c died: its member node is gone, its leader nodes maybe not yet
    a, b = plan("a", live, leaders, 6), plan("b", live, leaders, 6)
    assert sorted(a.take + b.take) == [2, 5] and len(a.take) == len(b.take) == 1


def test_a_joiner_gets_shards_handed_over_a_few_at_a_time() -> None:
    leaders: dict[int, str | None] = {s: "a" for s in range(6)}
    assert plan("a", ["a", "b"], leaders, 6, max_moves=2) == Plan(release=[5, 4], receivers={5: "b", 4: "b"})
    assert plan("b", ["a", "b"], leaders, 6) == Plan()  # nothing free: it waits for the hand-over
    leaders[5] = leaders[4] = None
    assert plan("b", ["a", "b"], leaders, 6).take == [4, 5]
    assert plan("a", ["a", "b"], leaders, 6) == Plan()  # never hands over while a shard is free


def test_overdue_shards_are_taken_by_whoever_sees_them() -> None:
    leaders: dict[int, str | None] = {0: "a", 1: "b", 2: None}
    assert plan("a", ["a", "b"], leaders, 3).take == [2]  # a leads least... tie by address
    assert plan("b", ["a", "b"], leaders, 3).take == []
    assert plan("b", ["a", "b"], leaders, 3, overdue=[2]).take == [2]


def test_a_balanced_cluster_does_nothing() -> None:
    leaders: dict[int, str | None] = {s: "abc"[s % 3] for s in range(64)}
    for me in "abc":
        assert plan(me, list("abc"), leaders, 64) == Plan()


@pytest.mark.parametrize("seed", range(20))
def test_a_simulated_cluster_settles_evenly_with_no_shard_moved_twice(seed: int) -> None:
    """Members join and die at random; each round every member acts on the same view. When it
    settles, counts differ by at most one, and joining moved only as many shards as needed."""
    rng = random.Random(seed)
    shards = 64
    members = ["a"]
    leaders: dict[int, str | None] = {}
    for _ in range(rng.randint(1, 4)):
        _settle(members, leaders, shards)
        if rng.random() < 0.3 and len(members) > 1:
            dead = rng.choice(members)
            members.remove(dead)
            leaders = {s: (None if who == dead else who) for s, who in leaders.items()}
        else:
            members.append(f"m{len(members)}-{rng.randint(0, 99)}")
        before = dict(leaders)
        moved = _settle(members, leaders, shards)
        counts = [sum(1 for who in leaders.values() if who == m) for m in members]
        assert sum(counts) == shards and max(counts) - min(counts) <= 1, counts
        assert all(times == 1 for times in moved.values()), moved  # no shard went back and forth
        kept = sum(1 for s, who in before.items() if who is not None and leaders[s] == who)
        assert kept >= shards - len([1 for who in before.values() if who is None]) - (shards // len(members) + 1)


def _settle(members: list[str], leaders: dict[int, str | None], shards: int) -> dict[int, int]:
    moved: dict[int, int] = {}
    for _ in range(200):
        plans = {m: plan(m, members, leaders, shards) for m in members}
        if all(p == Plan() for p in plans.values()):
            return moved
        for m, p in plans.items():
            for s in p.release:
                leaders[s] = None
                moved[s] = moved.get(s, 0) + 1
        for m, p in plans.items():
            for s in p.take:
                if leaders.get(s) is None:  # the election: the first create wins
                    leaders[s] = m
    raise AssertionError("did not settle in 200 rounds")


@pytest.mark.parametrize("seed", range(20))
def test_the_hand_out_gives_each_free_shard_to_the_lowest_count_under_target(seed: int) -> None:
    """The rule as the module states it, one free shard at a time, against ``plan`` (which uses a heap)."""
    rng = random.Random(seed)
    members = [f"c{i:02d}" for i in range(rng.randint(2, 30))]
    shards = rng.randint(len(members), 300)
    leaders = {s: rng.choice(members) for s in range(shards) if rng.random() < 0.8}
    counts = {m: sum(1 for who in leaders.values() if who == m) for m in members}
    want = targets(members, counts, shards)
    expected: dict[str, list[int]] = {m: [] for m in members}
    for shard in (s for s in range(shards) if s not in leaders):
        under = [m for m in members if counts[m] < want[m]]
        if under:
            receiver = min(under, key=lambda m: (counts[m], m))
            counts[receiver] += 1
            expected[receiver].append(shard)
    for me in members:
        assert plan(me, members, leaders, shards).take == expected[me]
