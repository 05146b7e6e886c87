"""Every error groupcoord reports, with its wire code and what a client should do.

One registry maps each ``ErrorCode`` of the protocol to an exception class;
the coordinator puts the code on the wire, the worker client raises the class.
A code this version does not know (sent by a newer coordinator) comes back as
the root class carrying the numeric code, so an old client never fails on it.

    GroupCoordError                      root; .code, .message, .retriable (also any unknown code)
    ├── RebalanceNeeded                  join again (keeps member id)
    │   └── RebalanceInProgressError     REBALANCE_IN_PROGRESS
    ├── ResetNeeded                      join again as a new member
    │   ├── UnknownMemberIdError         UNKNOWN_MEMBER_ID
    │   ├── IllegalGenerationError       ILLEGAL_GENERATION
    │   └── FencedMemberEpochError       FENCED_MEMBER_EPOCH (consumer protocol: stop every task, epoch 0)
    ├── CoordinatorMovedError            rediscover the coordinator, then retry
    │   ├── NotCoordinatorError          NOT_COORDINATOR (.coordinator_hint)
    │   ├── CoordinatorNotAvailableError COORDINATOR_NOT_AVAILABLE
    │   └── CoordinatorLoadInProgressError COORDINATOR_LOAD_IN_PROGRESS
    ├── MemberIdRequiredError            MEMBER_ID_REQUIRED (.member_id)
    ├── InvalidAssignmentError           INVALID_ASSIGNMENT
    └── RequestError                     not retriable: the caller must change the request
        ├── InvalidRequestError, InvalidGroupIdError, InvalidSessionTimeoutError,
        ├── InconsistentGroupProtocolError, GroupMaxSizeReachedError,
        ├── GroupIdNotFoundError, DuplicateTaskError, UnknownTaskError,
        │   NonEmptyGroupError, FencedInstanceIdError,
        ├── UnreleasedInstanceIdError, UnsupportedAssignorError (consumer protocol)
        ├── GroupAuthorizationFailedError GROUP_AUTHORIZATION_FAILED (a FindCoordinator entry)
        └── AccessDenied                 gRPC status, not an ErrorCode: fix the credentials or the ACLs
            ├── NotAuthenticatedError    UNAUTHENTICATED: no credential, or one that does not verify
            └── NotAuthorizedError       PERMISSION_DENIED: the principal lacks the right
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import ClassVar

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "ErrorCode",
    "ERRORS_BY_CODE",
    "code_name",
    "error_for",
    "raise_for",
    # the tree, as drawn above
    "GroupCoordError",
    "RebalanceNeeded",
    "RebalanceInProgressError",
    "ResetNeeded",
    "UnknownMemberIdError",
    "IllegalGenerationError",
    "FencedMemberEpochError",
    "CoordinatorMovedError",
    "NotCoordinatorError",
    "CoordinatorNotAvailableError",
    "CoordinatorLoadInProgressError",
    "MemberIdRequiredError",
    "InvalidAssignmentError",
    "RequestError",
    "InvalidRequestError",
    "InvalidGroupIdError",
    "InvalidSessionTimeoutError",
    "InconsistentGroupProtocolError",
    "GroupMaxSizeReachedError",
    "GroupIdNotFoundError",
    "DuplicateTaskError",
    "UnknownTaskError",
    "NonEmptyGroupError",
    "FencedInstanceIdError",
    "UnreleasedInstanceIdError",
    "UnsupportedAssignorError",
    "GroupAuthorizationFailedError",
    "AccessDenied",
    "NotAuthenticatedError",
    "NotAuthorizedError",
]


class ErrorCode(IntEnum):
    """The protocol's ErrorCode enum (a test keeps it equal to the .proto)."""

    NONE = pb.NONE
    UNKNOWN_MEMBER_ID = pb.UNKNOWN_MEMBER_ID
    ILLEGAL_GENERATION = pb.ILLEGAL_GENERATION
    REBALANCE_IN_PROGRESS = pb.REBALANCE_IN_PROGRESS
    NOT_COORDINATOR = pb.NOT_COORDINATOR
    COORDINATOR_NOT_AVAILABLE = pb.COORDINATOR_NOT_AVAILABLE
    INCONSISTENT_GROUP_PROTOCOL = pb.INCONSISTENT_GROUP_PROTOCOL
    INVALID_SESSION_TIMEOUT = pb.INVALID_SESSION_TIMEOUT
    GROUP_MAX_SIZE_REACHED = pb.GROUP_MAX_SIZE_REACHED
    INVALID_ASSIGNMENT = pb.INVALID_ASSIGNMENT
    FENCED_INSTANCE_ID = pb.FENCED_INSTANCE_ID
    INVALID_REQUEST = pb.INVALID_REQUEST
    MEMBER_ID_REQUIRED = pb.MEMBER_ID_REQUIRED
    INVALID_GROUP_ID = pb.INVALID_GROUP_ID
    GROUP_ID_NOT_FOUND = pb.GROUP_ID_NOT_FOUND
    DUPLICATE_TASK = pb.DUPLICATE_TASK
    UNKNOWN_TASK = pb.UNKNOWN_TASK
    NON_EMPTY_GROUP = pb.NON_EMPTY_GROUP
    COORDINATOR_LOAD_IN_PROGRESS = pb.COORDINATOR_LOAD_IN_PROGRESS
    GROUP_AUTHORIZATION_FAILED = pb.GROUP_AUTHORIZATION_FAILED
    FENCED_MEMBER_EPOCH = pb.FENCED_MEMBER_EPOCH
    UNRELEASED_INSTANCE_ID = pb.UNRELEASED_INSTANCE_ID
    UNSUPPORTED_ASSIGNOR = pb.UNSUPPORTED_ASSIGNOR


def code_name(code: int) -> str:
    """``ErrorCode`` name of ``code``, or ``ERROR_<n>`` for a code this version does not know."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


class GroupCoordError(Exception):
    """Root of every error the coordinator reports.

    Its subclasses fix ``code``; the root itself takes ``code=`` for a code
    this version has no class for.
    """

    code: ErrorCode | int = ErrorCode.NONE
    retriable: ClassVar[bool] = False

    def __init__(
        self, message: str = "", *, code: int | None = None, coordinator_hint: str = "", member_id: str = ""
    ) -> None:
        if code is not None:
            self.code = code
        self.message = message or code_name(self.code)
        super().__init__(self.message)
        self.coordinator_hint = coordinator_hint
        self.member_id = member_id

    def __str__(self) -> str:
        return f"{code_name(self.code)}: {self.message}"


# ------------------------------------------------------------------ join again, keeping the member id


class RebalanceNeeded(GroupCoordError):
    """The group is rebalancing: join again with the same member id."""

    retriable = True


class RebalanceInProgressError(RebalanceNeeded):
    """REBALANCE_IN_PROGRESS from the coordinator."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


# ------------------------------------------------------------------ join again as a new member


class ResetNeeded(GroupCoordError):
    """The member id or generation is stale: forget them and join as a new member."""

    retriable = True


class UnknownMemberIdError(ResetNeeded):
    """UNKNOWN_MEMBER_ID from the coordinator."""

    code = ErrorCode.UNKNOWN_MEMBER_ID


class IllegalGenerationError(ResetNeeded):
    """ILLEGAL_GENERATION from the coordinator."""

    code = ErrorCode.ILLEGAL_GENERATION


class FencedMemberEpochError(ResetNeeded):
    """FENCED_MEMBER_EPOCH (consumer protocol): the member's epoch is stale; it must stop every task and
    join again with member epoch 0."""

    code = ErrorCode.FENCED_MEMBER_EPOCH


# ------------------------------------------------------------------ find the active coordinator


class CoordinatorMovedError(GroupCoordError):
    """This address cannot serve the request now: rediscover the coordinator, then retry."""

    retriable = True


class NotCoordinatorError(CoordinatorMovedError):
    """NOT_COORDINATOR from the coordinator (``coordinator_hint`` names the active one, if known)."""

    code = ErrorCode.NOT_COORDINATOR


class CoordinatorNotAvailableError(CoordinatorMovedError):
    """COORDINATOR_NOT_AVAILABLE from the coordinator, or no address answered."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class CoordinatorLoadInProgressError(CoordinatorMovedError):
    """COORDINATOR_LOAD_IN_PROGRESS from the coordinator (a new active is loading its groups)."""

    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


# ------------------------------------------------------------------ retriable on their own


class MemberIdRequiredError(GroupCoordError):
    """MEMBER_ID_REQUIRED from the coordinator: join again with ``member_id``."""

    code = ErrorCode.MEMBER_ID_REQUIRED
    retriable = True


class InvalidAssignmentError(GroupCoordError):
    """INVALID_ASSIGNMENT from the coordinator: the leader's assignment broke a rule; the group rebalances."""

    code = ErrorCode.INVALID_ASSIGNMENT
    retriable = True


# ------------------------------------------------------------------ the caller must change the request


class RequestError(GroupCoordError):
    """Not retriable: the same request will fail the same way."""

    retriable = False


class InvalidRequestError(RequestError):
    """INVALID_REQUEST from the coordinator."""

    code = ErrorCode.INVALID_REQUEST


class InvalidGroupIdError(RequestError):
    """INVALID_GROUP_ID from the coordinator."""

    code = ErrorCode.INVALID_GROUP_ID


class InvalidSessionTimeoutError(RequestError):
    """INVALID_SESSION_TIMEOUT from the coordinator."""

    code = ErrorCode.INVALID_SESSION_TIMEOUT


class InconsistentGroupProtocolError(RequestError):
    """INCONSISTENT_GROUP_PROTOCOL from the coordinator."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class GroupMaxSizeReachedError(RequestError):
    """GROUP_MAX_SIZE_REACHED from the coordinator."""

    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class GroupIdNotFoundError(RequestError):
    """GROUP_ID_NOT_FOUND from the coordinator."""

    code = ErrorCode.GROUP_ID_NOT_FOUND


class DuplicateTaskError(RequestError):
    """DUPLICATE_TASK from the coordinator."""

    code = ErrorCode.DUPLICATE_TASK


class UnknownTaskError(RequestError):
    """UNKNOWN_TASK from the coordinator."""

    code = ErrorCode.UNKNOWN_TASK


class NonEmptyGroupError(RequestError):
    """NON_EMPTY_GROUP from the coordinator."""

    code = ErrorCode.NON_EMPTY_GROUP


class FencedInstanceIdError(RequestError):
    """FENCED_INSTANCE_ID from the coordinator."""

    code = ErrorCode.FENCED_INSTANCE_ID


class UnreleasedInstanceIdError(RequestError):
    """UNRELEASED_INSTANCE_ID (consumer protocol): another live member holds this instance id."""

    code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignorError(RequestError):
    """UNSUPPORTED_ASSIGNOR (consumer protocol): the coordinator has no assignor of that name."""

    code = ErrorCode.UNSUPPORTED_ASSIGNOR


class GroupAuthorizationFailedError(RequestError):
    """GROUP_AUTHORIZATION_FAILED: FindCoordinator will not locate a group the caller may not describe."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class AccessDenied(RequestError):
    """The coordinator refused the caller, not the request (a gRPC status; no ErrorCode)."""

    status: ClassVar[str] = ""

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class NotAuthenticatedError(AccessDenied):
    status = "UNAUTHENTICATED"


class NotAuthorizedError(AccessDenied):
    status = "PERMISSION_DENIED"


ERRORS_BY_CODE: Mapping[int, type[GroupCoordError]] = MappingProxyType({
    cls.code: cls
    for cls in (
        RebalanceInProgressError,
        UnknownMemberIdError,
        IllegalGenerationError,
        NotCoordinatorError,
        CoordinatorNotAvailableError,
        CoordinatorLoadInProgressError,
        MemberIdRequiredError,
        InvalidAssignmentError,
        InvalidRequestError,
        InvalidGroupIdError,
        InvalidSessionTimeoutError,
        InconsistentGroupProtocolError,
        GroupMaxSizeReachedError,
        GroupIdNotFoundError,
        DuplicateTaskError,
        UnknownTaskError,
        NonEmptyGroupError,
        FencedInstanceIdError,
        GroupAuthorizationFailedError,
        FencedMemberEpochError,
        UnreleasedInstanceIdError,
        UnsupportedAssignorError,
    )
})
"""The one ``{code: class}`` registry; a code missing here falls back to ``GroupCoordError``."""


def error_for(error: pb.Error, *, member_id: str = "") -> GroupCoordError | None:
    """The exception for a response's ``error`` field, or None when it is NONE."""
    if error.code == pb.NONE:
        return None
    cls = ERRORS_BY_CODE.get(error.code)
    if cls is None:  # a newer coordinator's code: the root class keeps the number
        return GroupCoordError(
            error.message, code=error.code, coordinator_hint=error.coordinator_hint, member_id=member_id
        )
    return cls(error.message, coordinator_hint=error.coordinator_hint, member_id=member_id)


def raise_for(error: pb.Error, *, member_id: str = "") -> None:
    """Raise the exception for ``error`` unless it is NONE."""
    exc = error_for(error, member_id=member_id)
    if exc is not None:
        raise exc
