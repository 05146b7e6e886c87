"""The checks a Session stream's message passes before its unary twin sees it: its size (the stream's bound and
the twin's), the ACLs for its group (the guard's verdict cached per stream while the policy is the same), the
owners of the members it names (never cached: a member may appear at any time), the stream's requests in flight
and members. A refusal is the message's own answer (``pb.Error``); the stream goes on."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import grpc

from groupcoord.coordinator.auth.guard import Denied, Guard
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import error
from groupcoord.coordinator.rpc.gate import request_bounds
from groupcoord.coordinator.rpc.session_envelope import BODIES, ENVELOPE_SLACK, Body
from groupcoord.coordinator.rpc.session_registry import MemberKey
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["SEND_UNARY", "MessageChecks", "member_key"]

SEND_UNARY = error(pb.INVALID_REQUEST, "this stream carries session_max_members members: send it as a unary call")
"""The refusal of a member past ``session_max_members``: answered with an empty body, the protocol's "send it
unary" (a process holding more members than one stream carries goes on, the extra ones over unary calls)."""
_ACL_CACHE_MAX = 1_024  # groups one stream's cache remembers (cleared whole past it)


def member_key(request: Any) -> MemberKey:
    """The member a request is for: (group id, member id, else instance id)."""
    return (request.group_id, request.member_id or getattr(request, "instance_id", ""))


class MessageChecks:
    """One stream's checks; ``guard`` None (or its policy off): no authorization."""

    def __init__(self, config: CoordinatorConfig, guard: Guard | None, principal: str) -> None:
        self.config = config
        self.principal = principal
        self._guard = guard if guard is not None and guard.policy.enabled else None
        self._policy = guard.policy if guard is not None else None
        self._acls: dict[str, Denied | None] = {}
        bounds = request_bounds(config)
        self._bounds = {number: min(config.session_max_message_bytes,
                                    bounds.get(body.method, config.max_message_bytes)) + ENVELOPE_SLACK
                        for number, body in BODIES.items()}
        self.within_every_bound = min(self._bounds.values())
        """A message of at most this many bytes passes every body's bound, so a batch of at most this many
        bytes needs no request of it sized (``ByteSize``, 2 µs a request: a rebalance's batches are a few KiB)."""

    def bound(self, body: Body) -> int:
        return self._bounds[body.number]

    def too_large(self, body: Body, size: int) -> pb.Error | None:
        bound = self._bounds[body.number]
        if size <= bound:
            return None
        return error(pb.INVALID_REQUEST, f"{body.method_name}: {size:,} bytes; at most {bound:,} on a Session "
                     f"stream (session_max_message_bytes, and the unary call's bound)")

    def refusal(self, body: Body, request: Any, size: int, in_flight: int,
                carried: AbstractSet[MemberKey], key: MemberKey | None = None) -> pb.Error | None:
        """Why this message is answered with an error without reaching its twin (None: it goes on); ``key``: its
        ``member_key``, when the caller has it."""
        too_large = self.too_large(body, size)
        if too_large is not None:
            return too_large
        guard = self._guard
        if guard is not None:
            group_id = request.group_id
            denied = self.group_denied(body, group_id)
            if denied is not None:
                return denied
            rule = guard.rules[body.method]
            refused = guard.members_denied(body.method, self.principal, rule, request, group_id)
            if refused is not None:
                return error(pb.GROUP_AUTHORIZATION_FAILED, refused.message)
        limit = self.config.session_max_in_flight
        if in_flight >= limit:
            return error(pb.INVALID_REQUEST, f"{in_flight} requests of this stream wait for their answers, at "
                         f"most {limit} (session_max_in_flight): send it again once an answer comes")
        limit = self.config.session_max_members
        if len(carried) >= limit and body.name != "leave_group" and (key or member_key(request)) not in carried:
            return SEND_UNARY
        return None

    def group_denied(self, body: Body, group_id: str, id_bytes: int = -1) -> pb.Error | None:
        """The guard's verdict on the group (id length, ACLs), cached while the policy is the same."""
        guard = self._guard
        if guard is None:
            return None
        if guard.policy is not self._policy:  # reloaded (SIGHUP): decide afresh
            self._policy = guard.policy
            self._acls.clear()
        if group_id in self._acls:
            denied = self._acls[group_id]
        else:
            denied = guard.before_parsing(body.method, self.principal, group_id, id_bytes=id_bytes)
            if len(self._acls) >= _ACL_CACHE_MAX:
                self._acls.clear()
            self._acls[group_id] = denied
        if denied is None:
            return None
        if denied.code == grpc.StatusCode.INVALID_ARGUMENT:
            return error(pb.INVALID_REQUEST, denied.message)
        return error(pb.GROUP_AUTHORIZATION_FAILED, denied.message)
