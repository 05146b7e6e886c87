"""The worker's error rules: one table (worker/rules.py), what each row makes a client do, and the docs'
copy of it kept equal to the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from groupcoord import errors
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.retry import retried
from groupcoord.worker.rules import ERROR_RULES, Retry, StableAction, error_table_markdown, rule_for
from groupcoord.worker.session import Membership
from groupcoord.worker.states import TRANSITIONS

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- worker-error-rules -->", "<!-- /worker-error-rules -->"


def test_every_wire_code_and_access_denial_has_a_row_and_unknown_codes_fall_on_the_root() -> None:
    for cls in [*errors.ERRORS_BY_CODE.values(), errors.NotAuthenticatedError, errors.NotAuthorizedError]:
        rule = rule_for(cls("x"))
        assert rule is not None and rule.error is not errors.GroupCoordError, cls
    newer = rule_for(errors.GroupCoordError("from a newer coordinator", code=999))
    assert newer is not None and newer.error is errors.GroupCoordError and not newer.fatal
    assert rule_for(RuntimeError("a bug")) is None


def test_the_rows_fire_only_triggers_of_the_state_table_and_no_row_is_shadowed() -> None:
    legal = {row[0] for row in TRANSITIONS}
    assert {rule.joining for rule in ERROR_RULES} <= legal
    assert {rule.stable.value for rule in ERROR_RULES} - {"keep"} <= legal
    for i, rule in enumerate(ERROR_RULES):  # an earlier row for a superclass would hide this one
        assert not any(issubclass(rule.error, earlier.error) for earlier in ERROR_RULES[:i]), rule.error
    assert all(rule.fatal == (rule.joining == "stop") for rule in ERROR_RULES)


@pytest.mark.parametrize(("error", "at_once", "fatal", "forgets"), [
    (errors.RebalanceInProgressError(), True, False, ""),
    (errors.MemberIdRequiredError(member_id="m-2"), True, False, ""),
    (errors.UnknownMemberIdError(), True, False, "member"),
    (errors.IllegalGenerationError(), True, False, "generation"),
    (errors.NotCoordinatorError(coordinator_hint="h:1"), False, False, ""),
    (errors.CoordinatorNotAvailableError(), False, False, ""),
    (errors.CoordinatorLoadInProgressError(), False, False, ""),
    (errors.InvalidAssignmentError(), False, False, ""),
    (errors.FencedInstanceIdError(), False, True, ""),
    (errors.InconsistentGroupProtocolError(), False, True, ""),
    (errors.NotAuthorizedError(), False, True, ""),
])
def test_what_a_failed_join_does(error: errors.GroupCoordError, at_once: bool, fatal: bool, forgets: str) -> None:
    """``forgets``: "member" (id and generation), "generation" (the id kept, as Kafka's client on
    ILLEGAL_GENERATION) or nothing."""
    session = Membership(WorkerConfig(group_id="g", coordinators="h:1", rebalance_protocol="cooperative"),
                         lambda: 0.0)
    session.member_id, session.generation = "m-1", 4
    rule, lose = session.join_failed(error)
    assert rule is not None and (rule.retry is Retry.AT_ONCE) == at_once and rule.fatal == fatal
    assert retried(error) == (not fatal)
    assert (session.member_id == "", session.generation == -1) == (forgets == "member", forgets != "")
    assert lose == (forgets != "")  # cooperative: after a reset what runs may be someone else's
    if isinstance(error, errors.MemberIdRequiredError):
        assert session.member_id == "m-2"


def test_a_heartbeat_that_loses_the_coordinator_keeps_the_tasks_for_a_session() -> None:
    now = [0.0]
    session = Membership(WorkerConfig(group_id="g", coordinators="h:1", session_timeout_ms=1000,
                                      heartbeat_interval_ms=100, rebalance_protocol="cooperative"), lambda: now[0])
    session.heartbeat_ok(0.0)
    now[0] = 0.9
    assert session.heartbeat_failed(errors.CoordinatorNotAvailableError()).action is StableAction.KEEP
    now[0] = 1.0
    verdict = session.heartbeat_failed(errors.CoordinatorNotAvailableError())
    assert verdict.action is StableAction.REJOIN and verdict.lose_tasks
    assert session.heartbeat_failed(errors.FencedInstanceIdError()).action is StableAction.STOP
    verdict = session.heartbeat_failed(errors.UnknownMemberIdError())
    assert verdict.action is StableAction.REJOIN and verdict.lose_tasks and session.member_id == ""


def _documented_tables() -> dict[str, str]:
    """Every copy of the table in the docs (README.md and docs/**/*.md), by file."""
    found: dict[str, str] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, flags=re.DOTALL):
            found[str(path.relative_to(ROOT))] = match.group(1)
    return found


def test_the_docs_table_is_the_rules_table() -> None:
    """On a difference, paste the table printed below between the markers."""
    tables = _documented_tables()
    assert tables, f"no {BEGIN} ... {END} block in README.md or docs/"
    expected = error_table_markdown()
    for path, table in tables.items():
        assert table == expected, f"{path}: the error table is stale; it should read:\n{expected}"
