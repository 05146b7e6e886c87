"""What the conversion, the leader-side assignor and the static members' joins ask of ``ConsumerGroups``, as a Protocol (they
are called by it, so importing it back would make a cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from groupcoord.coordinator.model.consumer_answer import ConsumerSettings
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_target import TargetInputs
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Effect, Outbox, Token
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ConsumerSteps"]


class ConsumerSteps(Protocol):
    m: Model
    settings: ConsumerSettings
    groups: dict[str, ConsumerGroup]
    _last_assign: dict[str, float]
    _new_member_id: Callable[[str], str]

    def _persist(self, out: Outbox, group: ConsumerGroup) -> None: ...

    def _changed(self, out: Outbox, group: ConsumerGroup) -> None: ...

    def _renewed(self, out: Outbox, group: ConsumerGroup, member: ConsumerMember, request: pb.GroupHeartbeatRequest,
                 token: Token) -> pb.Error | None: ...

    def _remove(self, out: Outbox, group: ConsumerGroup, member: ConsumerMember, why: str) -> None: ...

    def _ask_target(self, out: Outbox, group: ConsumerGroup) -> None: ...

    def _install(self, group: ConsumerGroup, inputs: TargetInputs, result: Any) -> list[Effect]: ...

    def admission(self, group: ConsumerGroup | None, request: pb.GroupHeartbeatRequest, assignor: str,
                  principal: str) -> pb.Error | None: ...

    def forget_assignments(self, out: Outbox, group_id: str) -> None: ...
