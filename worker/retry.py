"""The join retry policy: what is tried again, at once or after an exponential backoff with jitter.

What is retried, and whether at once or after the backoff, is the ``retry`` column of the error
rules (``worker.rules``); the member core (``worker.member``) runs the loop and asks its driver to
sleep, so the same policy holds in both clients.

A coordinator that could not be reached (the rows that rediscover: refused, timed out, not the
coordinator, loading) is tried again at least once a heartbeat interval, as Stable's heartbeats
are: a restarted or failed-over coordinator restarts every member's session when it loads the
groups, and a member heard from within that session keeps its place without a rebalance. The
full backoff (up to ``retry_backoff_max_ms``, 10 s by default) put a member that had lost its
tasks during a long restart up to 10 s past the coordinator's return: its session had expired by
then and the group rebalanced with every task idle (the chaos run: 18 tasks unowned 6.2 s after a
restart answered, past the session plus the rebalance timeout).
"""

from __future__ import annotations

import random

from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import WorkerClosedError
from groupcoord.worker.rules import Retry, rule_for

__all__ = ["at_once", "backoff_s", "retried", "wait_s"]


def retried(error: BaseException) -> bool:
    """Every failure is tried again but a close, a cancellation and the rows that say never (a bug too:
    it may pass)."""
    if isinstance(error, WorkerClosedError) or not isinstance(error, Exception):
        return False
    rule = rule_for(error)
    return rule is None or rule.retry is not Retry.NEVER


def at_once(error: BaseException | None) -> bool:
    """The coordinator said exactly what to do next (join again, as a new member, with this id): do it now."""
    rule = None if error is None else rule_for(error)
    return rule is not None and rule.retry is Retry.AT_ONCE


def backoff_s(config: WorkerConfig, attempt: int, rng: random.Random | None = None) -> float:
    """The wait after failed attempt number ``attempt`` (from 1): the initial backoff doubling per attempt,
    plus up to one initial backoff of jitter (so members that failed together do not retry together),
    at most the maximum backoff.

    >>> from groupcoord.worker.config import WorkerConfig
    >>> cfg = WorkerConfig(group_id="g", coordinators=("h:1",), retry_backoff_ms=100, retry_backoff_max_ms=1000)
    >>> [round(backoff_s(cfg, n, random.Random(0)), 3) for n in (1, 2, 3, 5, 9)]
    [0.184, 0.284, 0.484, 1.0, 1.0]
    """
    initial = config.retry_backoff_ms / 1000
    jitter = (rng or random).uniform(0, initial)
    exponent = min(attempt - 1, 64)
    return max(0.0, min(initial * 2.0**exponent + jitter, config.retry_backoff_max_ms / 1000))


def wait_s(config: WorkerConfig, error: BaseException, attempt: int, rng: random.Random | None = None) -> float:
    """The wait before the attempt after failed attempt number ``attempt``: none when the coordinator said
    what to do next, the backoff otherwise, at most a heartbeat interval when the coordinator could not be
    reached (it restarts our session when it is back: be heard from within it).

    >>> from groupcoord import errors
    >>> cfg = WorkerConfig(group_id="g", coordinators=("h:1",), heartbeat_interval_ms=300)
    >>> [round(wait_s(cfg, errors.CoordinatorNotAvailableError("refused"), n, random.Random(0)), 3) for n in (1, 3, 9)]
    [0.184, 0.3, 0.3]
    >>> round(wait_s(cfg, errors.InvalidAssignmentError("refused"), 9, random.Random(0)), 3)
    10.0
    """
    if at_once(error):
        return 0.0
    wait = backoff_s(config, attempt, rng)
    rule = rule_for(error)
    if rule is not None and rule.rediscover:
        wait = min(wait, config.heartbeat_interval_ms / 1000)
    return wait
