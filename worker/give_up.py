"""When a cooperative worker must give its tasks up while a JoinGroup or SyncGroup goes unanswered.

A cooperative worker keeps running its tasks through a re-join. That is safe only while the
coordinator still counts it a member: once the coordinator could have removed it, it may have
given the tasks to someone else, and they must stop here (``on_lost``) before they start there.

While our call is unanswered we cannot tell whether it arrived, so the earliest removal counts:

* the call never arrived: the session expires a session timeout after the coordinator last
  answered us (a heartbeat, even one answered REBALANCE_IN_PROGRESS, a JoinGroup or SyncGroup
  answer: each restarts the session there). We count from when we *sent* that call, which is
  no later than when the coordinator restarted the session.
* the call arrived and is held: the coordinator answers it within the rebalance timeout
  (members held in a phase are not expired); a phase that ends without us removes us then.
  Counting from when our call was sent is again no later than the coordinator's own count.

Waiting for the call's own deadline (rebalance timeout plus request timeout) instead left a
task on two workers for most of a minute (issue 26). The rule is a pure function so the
threaded client and an asyncio client compute the same deadline.

The worker gives up a margin *before* that time (``give_up_margin``): the coordinator's removal
is never early, but the worker's own wake-up can be late (a loaded machine, a busy interpreter),
and stopping a task takes time too. Giving up exactly at the earliest removal lost that race
when the coordinator re-assigned the tasks within a few milliseconds of removing us (seen in CI
with coordinator and workers in one process).
"""

from __future__ import annotations

__all__ = ["give_up_at", "give_up_margin"]


def give_up_at(*, last_answer: float, sent: float, session_timeout_s: float, rebalance_timeout_s: float) -> float:
    """The monotonic time by which tasks must be given up if the call is still unanswered.

    ``last_answer``: when we sent the last call the coordinator answered (its session restarted
    after that); ``sent``: when the unanswered JoinGroup or SyncGroup went out.

    >>> give_up_at(last_answer=100.0, sent=103.0, session_timeout_s=6.0, rebalance_timeout_s=30.0)
    106.0
    >>> give_up_at(last_answer=100.0, sent=100.5, session_timeout_s=45.0, rebalance_timeout_s=10.0)
    110.5
    """
    return min(last_answer + session_timeout_s, sent + rebalance_timeout_s)


def give_up_margin(*, session_timeout_s: float, heartbeat_interval_s: float) -> float:
    """How long before the earliest removal the worker gives up: a heartbeat interval, or a tenth of
    the session if that is longer (the session is what the coordinator counts).

    >>> give_up_margin(session_timeout_s=45.0, heartbeat_interval_s=3.0)
    4.5
    >>> give_up_margin(session_timeout_s=4.0, heartbeat_interval_s=0.2)
    0.4
    """
    return max(heartbeat_interval_s, session_timeout_s / 10)
