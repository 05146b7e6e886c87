"""What both acts of ``groupcoord demo`` share: narration, waiting for a group state, showing a group."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

from groupcoord.admin import AdminClient
from groupcoord.cli.describe import describe_as_dict, print_describe
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["DemoFailed", "GroupCheck", "say", "show_group", "stable", "subprocess_env", "wait_for_group"]

GroupCheck = Callable[[pb.DescribeGroupResponse], bool]


class DemoFailed(Exception):
    """A step did not reach its expected state in time."""


def say(text: str) -> None:
    """One narration paragraph of the demo, wrapped for an 80-column terminal (ids and paths kept whole)."""
    print("\n" + textwrap.fill(text, 80, initial_indent="==> ", subsequent_indent="    ", break_long_words=False,
                               break_on_hyphens=False), flush=True)


def show_group(admin: AdminClient, group: str) -> None:
    """Print the group as ``groupcoord groups describe`` does."""
    print_describe(describe_as_dict(admin.describe_group(group)))


def wait_for_group(admin: AdminClient, group: str, check: GroupCheck, what: str,
                   timeout: float = 60) -> pb.DescribeGroupResponse:
    """Poll until ``check`` holds; a timeout is a ``DemoFailed`` naming ``what`` did not happen."""
    try:
        return admin.wait_for(group, check, timeout)
    except TimeoutError as error:
        raise DemoFailed(f"{what}: {error}") from None


def stable(members: int, tasks: int) -> GroupCheck:
    """Check: the group is Stable with ``members`` members running ``tasks`` replicas between them."""
    def check(d: pb.DescribeGroupResponse) -> bool:
        return d.state == pb.STABLE and len(d.members) == members and sum(len(m.assigned) for m in d.members) == tasks

    return check


def subprocess_env() -> dict[str, str]:
    """This environment, with this source tree first on PYTHONPATH, for the ``groupcoord`` processes the demo starts."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env
