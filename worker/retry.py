"""The join retry policy: what is tried again, at once or after an exponential backoff with jitter.

What is retried, and whether at once or after the backoff, is the ``retry`` column of the error
rules (``worker.rules``); the member core (``worker.member``) runs the loop and asks its driver to
sleep, so the same policy holds in both clients.
"""

from __future__ import annotations

import random

from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import WorkerClosedError
from groupcoord.worker.rules import Retry, rule_for

__all__ = ["at_once", "backoff_s", "retried"]


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
