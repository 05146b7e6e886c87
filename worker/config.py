"""Worker client settings: keyword-only, frozen, checked at construction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from groupcoord.addresses import parse_addresses
from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.channels import ClientSecurity

__all__ = ["GROUP_PROTOCOLS", "GroupProtocol", "WorkerConfig", "parse_addresses"]

GroupProtocol = Literal["classic", "consumer"]
"""The group protocols a worker speaks: the classic JoinGroup/SyncGroup/Heartbeat, or the consumer
protocol's one GroupHeartbeat (KIP-848's shape, docs/protocols.md)."""
GROUP_PROTOCOLS: tuple[str, ...] = get_args(GroupProtocol)


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker joins its group: every setting of ``WorkerClient`` and ``AsyncWorkerClient``, by keyword."""

    group_id: str
    """The group to join (required)."""
    coordinators: tuple[str, ...]
    """Bootstrap list (HOST:PORT): any coordinators of the cluster. The client asks them FindCoordinator
    for its group's coordinator (the next one when an address does not answer) and goes there; a
    coordinator without FindCoordinator (an older version) is used as given, in turn."""
    client_id: str = "worker"
    """Prefix of the member id and name in logs."""
    instance_id: str = ""
    """Static membership (KIP-345): a name for this process that survives its restarts, unique in
    the group. Restarted within the session timeout, it gets its tasks back without a rebalance;
    on close it does not leave the group (its session timeout decides) unless asked to."""
    protocol: GroupProtocol = "classic"
    """The group protocol: "classic" (JoinGroup, SyncGroup, Heartbeat; a leader worker assigns) or
    "consumer" (one GroupHeartbeat; the coordinator assigns and moves tasks member by member, with no
    group-wide barrier). Every member of a group speaks the same one."""
    server_assignor: str = ""
    """Consumer protocol only: the assignor this member asks for, by name ("": none); the group runs the one
    most of its members name (none named: the coordinator's default, sticky). It runs on the coordinator, or,
    spelled ``client:<name>`` ("client:sticky", or a user's own ``register``-ed assignor), on one member elected
    leader, with this worker's ``assignor_lookup`` (docs/protocol2.md). The classic protocol uses ``assignors``."""
    protocol_type: str = ""
    """The kind of group (e.g. the service's name): every member of a group must give the same one."""
    rebalance_protocol: str = RebalanceProtocol.EAGER.value
    """A ``RebalanceProtocol`` value. "eager": every task stops before each rebalance. "cooperative" (KIP-429): only the tasks that
    move stop, over two generations; used when every member of the group offers it."""
    assignors: tuple[str, ...] = ("round-robin",)
    """Assignor names this worker supports, most preferred first."""
    session_timeout_ms: int = 10_000
    """The coordinator removes this member when no heartbeat arrives for this long; within the
    coordinator's group_min/max_session_timeout_ms (ms)."""
    rebalance_timeout_ms: int = 60_000
    """How long the coordinator waits for this member to re-join (and sync) in a rebalance before
    removing it (ms)."""
    heartbeat_interval_ms: int = 3_000
    """Time between heartbeats (and load reports) in Stable; less than the session timeout (ms). The
    consumer protocol heartbeats at the interval each answer of the coordinator sets (this is used only
    until the first answer)."""
    retry_backoff_ms: int = 100
    """First retry backoff after a failed join, sync or call; doubles with jitter (ms)."""
    retry_backoff_max_ms: int = 10_000
    """Largest retry backoff (ms); after a failure to reach the coordinator, at most the heartbeat interval
    (a coordinator back from a restart restarts the members' sessions: be heard from within it)."""
    request_timeout_ms: int = 30_000
    """Deadline of one call; JoinGroup and SyncGroup get the rebalance timeout on top (ms)."""
    rack: str = ""
    """Failure domain, for rack-aware assignors (kafka-replica-shift)."""
    pool: str = ""
    """Resource pool: this member runs only tasks of its pool ("" is the default pool)."""
    capacity: float = 1.0
    """Relative capacity (balanced, without a load snapshot, spreads task weight over member capacity)."""
    attributes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Free-form metadata the leader's assignor sees for this member."""
    tls_ca: str = ""
    """PEM file of the CA that signed the coordinator's certificate: turns TLS on."""
    tls_cert: str = ""
    """PEM client certificate (with ``tls_key``) for mTLS: its subject is this worker's principal."""
    tls_key: str = ""
    """PEM private key of ``tls_cert``."""
    token_file: str = ""
    """File holding a bearer token (one line), for coordinators that authenticate by token."""
    session_stream: bool = True
    """Carry joins, syncs, heartbeats, leaves and load reports on the process's one Session stream per
    coordinator when the coordinator offers it (unary calls where it answers UNIMPLEMENTED); False: unary
    calls only."""

    @property
    def security(self) -> ClientSecurity:
        return ClientSecurity(tls_ca=self.tls_ca, tls_cert=self.tls_cert, tls_key=self.tls_key,
                              token_file=self.token_file)

    def __post_init__(self) -> None:
        object.__setattr__(self, "coordinators", parse_addresses(self.coordinators))
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if not self.assignors:
            raise ValueError("assignors must name at least one assignor")
        if self.session_timeout_ms <= 0 or self.heartbeat_interval_ms <= 0:
            raise ValueError("session_timeout_ms and heartbeat_interval_ms must be > 0")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be less than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.rebalance_timeout_ms < 0 or self.retry_backoff_ms < 0 or self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ValueError("rebalance_timeout_ms, retry_backoff_ms must be >= 0 and retry_backoff_max_ms >= retry_backoff_ms")
        if self.instance_id and (len(self.instance_id) > 255 or not self.instance_id.isprintable()):
            raise ValueError("instance_id must be printable, at most 255 characters")
        if self.rebalance_protocol not in tuple(RebalanceProtocol):
            names = " or ".join(repr(p.value) for p in RebalanceProtocol)
            raise ValueError(f"rebalance_protocol must be {names}, not {self.rebalance_protocol!r}")
        if self.protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(map(repr, GROUP_PROTOCOLS))}, not {self.protocol!r}")
        if self.server_assignor == "client:":
            raise ValueError("server_assignor 'client:' names no assignor: spell it client:<name>, e.g. client:sticky")
        if not self.capacity > 0:
            raise ValueError("capacity must be > 0")
        self.security  # noqa: B018 - checks the TLS options go together
