"""Every error groupcoord reports, with its wire code and what a client should do.

One registry maps each ``ErrorCode`` of the protocol to an exception class;
the coordinator puts the code on the wire, the worker client raises the class.

    GroupCoordError                      root; .code, .message, .retriable
    ├── RebalanceNeeded                  join again (keeps member id)
    │   └── RebalanceInProgressError     REBALANCE_IN_PROGRESS
    ├── ResetNeeded                      join again as a new member
    │   ├── UnknownMemberIdError         UNKNOWN_MEMBER_ID
    │   └── IllegalGenerationError       ILLEGAL_GENERATION
    ├── CoordinatorMovedError            rediscover the coordinator, then retry
    │   ├── NotCoordinatorError          NOT_COORDINATOR (.coordinator_hint)
    │   ├── CoordinatorNotAvailableError COORDINATOR_NOT_AVAILABLE
    │   └── CoordinatorLoadInProgressError COORDINATOR_LOAD_IN_PROGRESS
    ├── MemberIdRequiredError            MEMBER_ID_REQUIRED (.member_id)
    ├── InvalidAssignmentError           INVALID_ASSIGNMENT
    └── RequestError                     not retriable: the caller must change the request
        ├── InvalidRequestError, InvalidGroupIdError, InvalidSessionTimeoutError,
        ├── InconsistentGroupProtocolError, GroupMaxSizeReachedError,
        └── GroupIdNotFoundError, DuplicateTaskError, UnknownTaskError,
            NonEmptyGroupError, FencedInstanceIdError
"""

from __future__ import annotations

from enum import IntEnum

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "ErrorCode",
    "GroupCoordError",
    "RebalanceNeeded",
    "ResetNeeded",
    "CoordinatorMovedError",
    "RequestError",
    "error_for",
    "raise_for",
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


class GroupCoordError(Exception):
    """Root of every error the coordinator reports."""

    code: ErrorCode = ErrorCode.NONE
    retriable: bool = False

    def __init__(self, message: str = "", *, coordinator_hint: str = "", member_id: str = "") -> None:
        super().__init__(message or self.code.name)
        self.message = message or self.code.name
        self.coordinator_hint = coordinator_hint
        self.member_id = member_id

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class RebalanceNeeded(GroupCoordError):
    retriable = True


class ResetNeeded(GroupCoordError):
    retriable = True


class CoordinatorMovedError(GroupCoordError):
    retriable = True


class RequestError(GroupCoordError):
    retriable = False


def _error(name: str, base: type[GroupCoordError], code: ErrorCode) -> type[GroupCoordError]:
    return type(name, (base,), {"code": code, "__doc__": f"{code.name} from the coordinator."})


RebalanceInProgressError = _error("RebalanceInProgressError", RebalanceNeeded, ErrorCode.REBALANCE_IN_PROGRESS)
UnknownMemberIdError = _error("UnknownMemberIdError", ResetNeeded, ErrorCode.UNKNOWN_MEMBER_ID)
IllegalGenerationError = _error("IllegalGenerationError", ResetNeeded, ErrorCode.ILLEGAL_GENERATION)
NotCoordinatorError = _error("NotCoordinatorError", CoordinatorMovedError, ErrorCode.NOT_COORDINATOR)
CoordinatorNotAvailableError = _error(
    "CoordinatorNotAvailableError", CoordinatorMovedError, ErrorCode.COORDINATOR_NOT_AVAILABLE
)
CoordinatorLoadInProgressError = _error(
    "CoordinatorLoadInProgressError", CoordinatorMovedError, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
)
MemberIdRequiredError = _error("MemberIdRequiredError", GroupCoordError, ErrorCode.MEMBER_ID_REQUIRED)
MemberIdRequiredError.retriable = True
InvalidAssignmentError = _error("InvalidAssignmentError", GroupCoordError, ErrorCode.INVALID_ASSIGNMENT)
InvalidAssignmentError.retriable = True
InvalidRequestError = _error("InvalidRequestError", RequestError, ErrorCode.INVALID_REQUEST)
InvalidGroupIdError = _error("InvalidGroupIdError", RequestError, ErrorCode.INVALID_GROUP_ID)
InvalidSessionTimeoutError = _error("InvalidSessionTimeoutError", RequestError, ErrorCode.INVALID_SESSION_TIMEOUT)
InconsistentGroupProtocolError = _error(
    "InconsistentGroupProtocolError", RequestError, ErrorCode.INCONSISTENT_GROUP_PROTOCOL
)
GroupMaxSizeReachedError = _error("GroupMaxSizeReachedError", RequestError, ErrorCode.GROUP_MAX_SIZE_REACHED)
GroupIdNotFoundError = _error("GroupIdNotFoundError", RequestError, ErrorCode.GROUP_ID_NOT_FOUND)
DuplicateTaskError = _error("DuplicateTaskError", RequestError, ErrorCode.DUPLICATE_TASK)
UnknownTaskError = _error("UnknownTaskError", RequestError, ErrorCode.UNKNOWN_TASK)
NonEmptyGroupError = _error("NonEmptyGroupError", RequestError, ErrorCode.NON_EMPTY_GROUP)
FencedInstanceIdError = _error("FencedInstanceIdError", RequestError, ErrorCode.FENCED_INSTANCE_ID)

_BY_CODE: dict[ErrorCode, type[GroupCoordError]] = {
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
    )
}


def error_for(error: pb.Error, *, member_id: str = "") -> GroupCoordError | None:
    """The exception for a response's ``error`` field, or None when it is NONE."""
    if error.code == pb.NONE:
        return None
    cls = _BY_CODE.get(ErrorCode(error.code), GroupCoordError)
    return cls(error.message, coordinator_hint=error.coordinator_hint, member_id=member_id)


def raise_for(error: pb.Error, *, member_id: str = "") -> None:
    """Raise the exception for ``error`` unless it is NONE."""
    exc = error_for(error, member_id=member_id)
    if exc is not None:
        raise exc
