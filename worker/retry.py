"""The join retry policy: tenacity with exponential backoff and jitter, and an injectable sleep.

What is retried, and whether at once or after the backoff, is the ``retry`` column of the error
rules (``worker.rules``); the threaded client gets a ``Retrying``, the asyncio one an
``AsyncRetrying`` built from the same policy.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import tenacity

from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.rules import Retry, rule_for
from groupcoord.worker.transport import WorkerClosedError

__all__ = ["async_join_retrying", "join_retrying", "retried"]

log = logging.getLogger("groupcoord.worker")


def retried(error: BaseException) -> bool:
    """Every failure is tried again but a close, a cancellation and the rows that say never (a bug too:
    it may pass)."""
    if isinstance(error, WorkerClosedError) or not isinstance(error, Exception):
        return False
    rule = rule_for(error)
    return rule is None or rule.retry is not Retry.NEVER


def _at_once(error: BaseException | None) -> bool:
    """The coordinator said exactly what to do next (join again, as a new member, with this id): do it now."""
    rule = None if error is None else rule_for(error)
    return rule is not None and rule.retry is Retry.AT_ONCE


def _policy(config: WorkerConfig, stopped: Callable[[], bool], where: Callable[[], str]) -> dict[str, Any]:
    initial = config.retry_backoff_ms / 1000
    backoff = tenacity.wait_exponential_jitter(multiplier=initial, max=config.retry_backoff_max_ms / 1000, jitter=initial)

    def failure(retry_state: tenacity.RetryCallState) -> BaseException | None:
        return retry_state.outcome.exception() if retry_state.outcome else None

    def wait(retry_state: tenacity.RetryCallState) -> float:
        return 0.0 if _at_once(failure(retry_state)) else float(backoff(retry_state))

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        error = failure(retry_state)
        if not _at_once(error):
            log.warning(
                "%s: %s; retrying in %.2fs (attempt %d, coordinator %s)",
                config.client_id, error, retry_state.upcoming_sleep, retry_state.attempt_number, where(),
            )

    return {
        "retry": tenacity.retry_if_exception(retried),
        "wait": wait,
        "stop": lambda retry_state: stopped(),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def join_retrying(
    config: WorkerConfig,
    *,
    sleep: Callable[[float], None],
    stopped: Callable[[], bool],
    where: Callable[[], str],
) -> tenacity.Retrying:
    """Retry what the rules say, until ``stopped()``. ``where()`` names the next coordinator (for the log)."""
    return tenacity.Retrying(sleep=sleep, **_policy(config, stopped, where))


def async_join_retrying(
    config: WorkerConfig,
    *,
    sleep: Callable[[float], Awaitable[None]],
    stopped: Callable[[], bool],
    where: Callable[[], str],
) -> tenacity.AsyncRetrying:
    """``join_retrying`` for a coroutine: the backoff is awaited on the loop."""
    return tenacity.AsyncRetrying(sleep=sleep, **_policy(config, stopped, where))
