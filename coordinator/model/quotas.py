"""Per-principal quotas: how many groups one principal may create, and how many catalog tasks its
groups may hold (issue 26: one tenant created 2,000 groups in 1.9 s). Only authenticated principals
have quotas; without authentication everyone is the same caller and the global limits apply.

Each check returns None or INVALID_REQUEST naming the principal, the figure and the config key.
The count is over ``Model.created_by`` (kept as groups are created and dropped), so a check costs
O(groups the principal created), never O(all groups).
"""

from __future__ import annotations

from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["group_creation", "tasks"]


def group_creation(m: Model, principal: str) -> pb.Error | None:
    """May ``principal`` create one more group?"""
    if not principal:
        return None
    created = len(m.created_by(principal))
    if created >= m.config.max_groups_per_principal:
        return error(pb.INVALID_REQUEST, f"{principal} has created {created} groups; at most "
                     f"{m.config.max_groups_per_principal} (max_groups_per_principal): delete one first")
    return None


def tasks(m: Model, creator: str, new: int) -> pb.Error | None:
    """May the groups ``creator`` created hold ``new`` more catalog tasks?"""
    if not creator or new <= 0:
        return None
    held = sum(len(group.tasks) for gid in m.created_by(creator) if (group := m.groups.get(gid)) is not None)
    if held + new > m.config.max_tasks_per_principal:
        return error(pb.INVALID_REQUEST, f"the groups {creator} created would hold {held + new} tasks; at most "
                     f"{m.config.max_tasks_per_principal} (max_tasks_per_principal)")
    return None
