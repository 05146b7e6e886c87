"""Which members one Session stream carries (news for them goes to it), learnt from what the coordinator answers:
a join's member id, a consumer member's epoch, a leave, and the errors that say a member is gone here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from groupcoord.coordinator.rpc.session_checks import member_key
from groupcoord.coordinator.rpc.session_envelope import Body
from groupcoord.coordinator.rpc.session_registry import MemberKey, SessionRegistry, StreamHandle
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CarriedMembers"]

_GONE = frozenset({pb.UNKNOWN_MEMBER_ID, pb.FENCED_INSTANCE_ID, pb.FENCED_MEMBER_EPOCH, pb.NOT_COORDINATOR})


class CarriedMembers:
    """A stream's members, kept in step with the process's registry."""

    def __init__(self, registry: SessionRegistry, stream: StreamHandle, limit: int) -> None:
        self._registry = registry
        self._stream = stream
        self._limit = limit  # session_max_members: a member past it is not carried (it goes unary)
        self.keys: set[MemberKey] = set()

    def __iter__(self) -> Iterator[MemberKey]:
        return iter(list(self.keys))

    def carry(self, key: MemberKey) -> None:
        if key not in self.keys:
            self.keys.add(key)
            self._registry.carry(key, self._stream)

    def let_go(self, key: MemberKey) -> None:
        if key in self.keys:
            self.keys.discard(key)
            self._registry.drop(key, self._stream)

    def forget(self, key: MemberKey) -> None:
        """The registry let the member go (another stream took it, or its shard moved)."""
        self.keys.discard(key)

    def note(self, body: Body, request: Any, response: Any) -> None:
        """Which members the stream carries now, from what the coordinator answered."""
        code = response.error.code
        if code in _GONE:
            self.let_go(member_key(request))
            return
        name = body.name
        if name == "sync_group" or name == "heartbeat":  # (the commonest: nothing to learn; no field read)
            return
        group_id = request.group_id
        if name == "join_group":
            if response.member_id and code in (pb.NONE, pb.MEMBER_ID_REQUIRED) and len(self.keys) < self._limit:
                self.carry((group_id, response.member_id))
        elif name == "group_heartbeat":
            if code == pb.NONE and response.member_id:
                key = (group_id, response.member_id)
                if response.member_epoch < 0:
                    self.let_go(key)
                elif key in self.keys or len(self.keys) < self._limit:
                    self.carry(key)
        elif name == "leave_group":
            self.let_go(member_key(request))
            for each in request.members:
                self.let_go((group_id, each.member_id or each.instance_id))
