"""The join retry policy: tenacity with exponential backoff and jitter, and an injectable sleep."""

from __future__ import annotations

import logging
from collections.abc import Callable

import tenacity

from groupcoord import errors
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.transport import WorkerClosedError

__all__ = ["join_retrying"]

log = logging.getLogger("groupcoord.worker")

# The coordinator said exactly what to do next (join again, as a new member, with this id): do it now.
_AT_ONCE = (errors.RebalanceNeeded, errors.ResetNeeded, errors.MemberIdRequiredError)


def join_retrying(
    config: WorkerConfig,
    *,
    sleep: Callable[[float], None],
    stopped: Callable[[], bool],
    where: Callable[[], str],
) -> tenacity.Retrying:
    """Retry every failure but a RequestError (fatal) or a close, until ``stopped()``.

    ``where()`` names the coordinator the next attempt goes to (for the log line).
    """
    initial = config.retry_backoff_ms / 1000
    backoff = tenacity.wait_exponential_jitter(multiplier=initial, max=config.retry_backoff_max_ms / 1000, jitter=initial)

    def failure(retry_state: tenacity.RetryCallState) -> BaseException | None:
        return retry_state.outcome.exception() if retry_state.outcome else None

    def wait(retry_state: tenacity.RetryCallState) -> float:
        return 0.0 if isinstance(failure(retry_state), _AT_ONCE) else float(backoff(retry_state))

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        error = failure(retry_state)
        if not isinstance(error, _AT_ONCE):
            log.warning(
                "%s: %s; retrying in %.2fs (attempt %d, coordinator %s)",
                config.client_id, error, retry_state.upcoming_sleep, retry_state.attempt_number, where(),
            )

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda e: not isinstance(e, (errors.RequestError, WorkerClosedError))),
        wait=wait,
        stop=lambda retry_state: stopped(),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
