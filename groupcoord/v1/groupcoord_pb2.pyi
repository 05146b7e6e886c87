from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    INCONSISTENT_GROUP_PROTOCOL: _ClassVar[ErrorCode]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorCode]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    INVALID_ASSIGNMENT: _ClassVar[ErrorCode]
    FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    MEMBER_ID_REQUIRED: _ClassVar[ErrorCode]
    INVALID_GROUP_ID: _ClassVar[ErrorCode]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    DUPLICATE_TASK: _ClassVar[ErrorCode]
    UNKNOWN_TASK: _ClassVar[ErrorCode]
    NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    FENCED_MEMBER_EPOCH: _ClassVar[ErrorCode]
    UNRELEASED_INSTANCE_ID: _ClassVar[ErrorCode]
    UNSUPPORTED_ASSIGNOR: _ClassVar[ErrorCode]

class GroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATE_UNKNOWN: _ClassVar[GroupState]
    EMPTY: _ClassVar[GroupState]
    PREPARING_REBALANCE: _ClassVar[GroupState]
    AWAITING_SYNC: _ClassVar[GroupState]
    STABLE: _ClassVar[GroupState]
    DEAD: _ClassVar[GroupState]
    ASSIGNING: _ClassVar[GroupState]
    RECONCILING: _ClassVar[GroupState]

class ShardState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SHARD_STATE_UNKNOWN: _ClassVar[ShardState]
    SHARD_ACTIVE: _ClassVar[ShardState]
    SHARD_LOADING: _ClassVar[ShardState]
    SHARD_UNLOADING: _ClassVar[ShardState]
    SHARD_LEADERLESS: _ClassVar[ShardState]
NONE: ErrorCode
UNKNOWN_MEMBER_ID: ErrorCode
ILLEGAL_GENERATION: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
NOT_COORDINATOR: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
INCONSISTENT_GROUP_PROTOCOL: ErrorCode
INVALID_SESSION_TIMEOUT: ErrorCode
GROUP_MAX_SIZE_REACHED: ErrorCode
INVALID_ASSIGNMENT: ErrorCode
FENCED_INSTANCE_ID: ErrorCode
INVALID_REQUEST: ErrorCode
MEMBER_ID_REQUIRED: ErrorCode
INVALID_GROUP_ID: ErrorCode
GROUP_ID_NOT_FOUND: ErrorCode
DUPLICATE_TASK: ErrorCode
UNKNOWN_TASK: ErrorCode
NON_EMPTY_GROUP: ErrorCode
COORDINATOR_LOAD_IN_PROGRESS: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
FENCED_MEMBER_EPOCH: ErrorCode
UNRELEASED_INSTANCE_ID: ErrorCode
UNSUPPORTED_ASSIGNOR: ErrorCode
GROUP_STATE_UNKNOWN: GroupState
EMPTY: GroupState
PREPARING_REBALANCE: GroupState
AWAITING_SYNC: GroupState
STABLE: GroupState
DEAD: GroupState
ASSIGNING: GroupState
RECONCILING: GroupState
SHARD_STATE_UNKNOWN: ShardState
SHARD_ACTIVE: ShardState
SHARD_LOADING: ShardState
SHARD_UNLOADING: ShardState
SHARD_LEADERLESS: ShardState

class Error(_message.Message):
    __slots__ = ("code", "message", "coordinator_hint")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_HINT_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    coordinator_hint: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., coordinator_hint: _Optional[str] = ...) -> None: ...

class TaskReplica(_message.Message):
    __slots__ = ("task_id", "replica")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    replica: int
    def __init__(self, task_id: _Optional[str] = ..., replica: _Optional[int] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "replicas", "pool", "weight", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    replicas: int
    pool: str
    weight: float
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, task_id: _Optional[str] = ..., replicas: _Optional[int] = ..., pool: _Optional[str] = ..., weight: _Optional[float] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MemberMetadata(_message.Message):
    __slots__ = ("rack", "pool", "capacity", "attributes", "owned", "owned_generation", "user_data")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RACK_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    OWNED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    rack: str
    pool: str
    capacity: float
    attributes: _containers.ScalarMap[str, str]
    owned: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    owned_generation: int
    user_data: bytes
    def __init__(self, rack: _Optional[str] = ..., pool: _Optional[str] = ..., capacity: _Optional[float] = ..., attributes: _Optional[_Mapping[str, str]] = ..., owned: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., owned_generation: _Optional[int] = ..., user_data: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "instance_id", "client_id", "session_timeout_ms", "rebalance_timeout_ms", "protocols", "metadata", "protocol_type", "rebalance_protocols")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    instance_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: _containers.RepeatedScalarFieldContainer[str]
    metadata: MemberMetadata
    protocol_type: str
    rebalance_protocols: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., protocols: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Union[MemberMetadata, _Mapping]] = ..., protocol_type: _Optional[str] = ..., rebalance_protocols: _Optional[_Iterable[str]] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("member_id", "instance_id", "client_id", "host", "metadata", "assigned")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    client_id: str
    host: str
    metadata: MemberMetadata
    assigned: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., host: _Optional[str] = ..., metadata: _Optional[_Union[MemberMetadata, _Mapping]] = ..., assigned: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error", "generation", "protocol", "leader_id", "member_id", "members", "tasks", "load_snapshot", "protocol_type", "skip_assignment", "rebalance_protocol")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LOAD_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    error: Error
    generation: int
    protocol: str
    leader_id: str
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    load_snapshot: LoadSnapshot
    protocol_type: str
    skip_assignment: bool
    rebalance_protocol: str
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., generation: _Optional[int] = ..., protocol: _Optional[str] = ..., leader_id: _Optional[str] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., load_snapshot: _Optional[_Union[LoadSnapshot, _Mapping]] = ..., protocol_type: _Optional[str] = ..., skip_assignment: _Optional[bool] = ..., rebalance_protocol: _Optional[str] = ...) -> None: ...

class MemberAssignment(_message.Message):
    __slots__ = ("member_id", "tasks", "user_data")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    user_data: bytes
    def __init__(self, member_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., user_data: _Optional[bytes] = ...) -> None: ...

class UnassignedReplica(_message.Message):
    __slots__ = ("task", "reason")
    TASK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task: TaskReplica
    reason: str
    def __init__(self, task: _Optional[_Union[TaskReplica, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class TaskSplit(_message.Message):
    __slots__ = ("parent_task_id", "children")
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    parent_task_id: str
    children: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, parent_task_id: _Optional[str] = ..., children: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "generation", "instance_id", "assignments", "unassigned", "splits", "assignor_error", "protocol_type", "protocol_name")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    UNASSIGNED_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_ERROR_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    generation: int
    instance_id: str
    assignments: _containers.RepeatedCompositeFieldContainer[MemberAssignment]
    unassigned: _containers.RepeatedCompositeFieldContainer[UnassignedReplica]
    splits: _containers.RepeatedCompositeFieldContainer[TaskSplit]
    assignor_error: str
    protocol_type: str
    protocol_name: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., instance_id: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[MemberAssignment, _Mapping]]] = ..., unassigned: _Optional[_Iterable[_Union[UnassignedReplica, _Mapping]]] = ..., splits: _Optional[_Iterable[_Union[TaskSplit, _Mapping]]] = ..., assignor_error: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error", "generation", "protocol", "tasks", "user_data", "rejoin")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    error: Error
    generation: int
    protocol: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    user_data: bytes
    rejoin: bool
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., generation: _Optional[int] = ..., protocol: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., user_data: _Optional[bytes] = ..., rejoin: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "generation", "instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    generation: int
    instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class MemberIdentity(_message.Message):
    __slots__ = ("member_id", "instance_id")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "instance_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    instance_id: str
    members: _containers.RepeatedCompositeFieldContainer[MemberIdentity]
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberIdentity, _Mapping]]] = ...) -> None: ...

class MemberLeaveResponse(_message.Message):
    __slots__ = ("member_id", "instance_id", "error")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    instance_id: str
    error: Error
    def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error", "members")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error: Error
    members: _containers.RepeatedCompositeFieldContainer[MemberLeaveResponse]
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., members: _Optional[_Iterable[_Union[MemberLeaveResponse, _Mapping]]] = ...) -> None: ...

class ResourceUsage(_message.Message):
    __slots__ = ("usage", "limit")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    usage: float
    limit: float
    def __init__(self, usage: _Optional[float] = ..., limit: _Optional[float] = ...) -> None: ...

class TaskLoadReport(_message.Message):
    __slots__ = ("task_id", "msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out", "topics", "producers", "consumers")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    MSG_THROUGHPUT_IN_FIELD_NUMBER: _ClassVar[int]
    MSG_THROUGHPUT_OUT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    msg_rate_in: float
    msg_rate_out: float
    msg_throughput_in: float
    msg_throughput_out: float
    topics: int
    producers: int
    consumers: int
    def __init__(self, task_id: _Optional[str] = ..., msg_rate_in: _Optional[float] = ..., msg_rate_out: _Optional[float] = ..., msg_throughput_in: _Optional[float] = ..., msg_throughput_out: _Optional[float] = ..., topics: _Optional[int] = ..., producers: _Optional[int] = ..., consumers: _Optional[int] = ...) -> None: ...

class LoadReport(_message.Message):
    __slots__ = ("ts_ms", "cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out", "tasks")
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    DIRECT_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_IN_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_OUT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    ts_ms: int
    cpu: ResourceUsage
    memory: ResourceUsage
    direct_memory: ResourceUsage
    bandwidth_in: ResourceUsage
    bandwidth_out: ResourceUsage
    tasks: _containers.RepeatedCompositeFieldContainer[TaskLoadReport]
    def __init__(self, ts_ms: _Optional[int] = ..., cpu: _Optional[_Union[ResourceUsage, _Mapping]] = ..., memory: _Optional[_Union[ResourceUsage, _Mapping]] = ..., direct_memory: _Optional[_Union[ResourceUsage, _Mapping]] = ..., bandwidth_in: _Optional[_Union[ResourceUsage, _Mapping]] = ..., bandwidth_out: _Optional[_Union[ResourceUsage, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskLoadReport, _Mapping]]] = ...) -> None: ...

class ReportLoadRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "generation", "report")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    generation: int
    report: LoadReport
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., generation: _Optional[int] = ..., report: _Optional[_Union[LoadReport, _Mapping]] = ...) -> None: ...

class ReportLoadResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class TaskLoadStats(_message.Message):
    __slots__ = ("task_id", "worker_id", "short_samples", "short_msg_rate_in", "short_msg_rate_out", "short_msg_throughput_in", "short_msg_throughput_out", "long_samples", "long_msg_rate_in", "long_msg_rate_out", "long_msg_throughput_in", "long_msg_throughput_out", "topics", "producers", "consumers", "split_candidate")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SHORT_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SHORT_MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    SHORT_MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    SHORT_MSG_THROUGHPUT_IN_FIELD_NUMBER: _ClassVar[int]
    SHORT_MSG_THROUGHPUT_OUT_FIELD_NUMBER: _ClassVar[int]
    LONG_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_THROUGHPUT_IN_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_THROUGHPUT_OUT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    short_samples: int
    short_msg_rate_in: float
    short_msg_rate_out: float
    short_msg_throughput_in: float
    short_msg_throughput_out: float
    long_samples: int
    long_msg_rate_in: float
    long_msg_rate_out: float
    long_msg_throughput_in: float
    long_msg_throughput_out: float
    topics: int
    producers: int
    consumers: int
    split_candidate: bool
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., short_samples: _Optional[int] = ..., short_msg_rate_in: _Optional[float] = ..., short_msg_rate_out: _Optional[float] = ..., short_msg_throughput_in: _Optional[float] = ..., short_msg_throughput_out: _Optional[float] = ..., long_samples: _Optional[int] = ..., long_msg_rate_in: _Optional[float] = ..., long_msg_rate_out: _Optional[float] = ..., long_msg_throughput_in: _Optional[float] = ..., long_msg_throughput_out: _Optional[float] = ..., topics: _Optional[int] = ..., producers: _Optional[int] = ..., consumers: _Optional[int] = ..., split_candidate: _Optional[bool] = ...) -> None: ...

class WorkerLoadStats(_message.Message):
    __slots__ = ("worker_id", "cpu_usage", "cpu_limit", "memory_usage", "memory_limit", "direct_memory_usage", "direct_memory_limit", "bandwidth_in_usage", "bandwidth_in_limit", "bandwidth_out_usage", "bandwidth_out_limit", "num_tasks", "long_msg_rate_in", "long_msg_rate_out", "long_msg_throughput_in", "long_msg_throughput_out", "ts_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_USAGE_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USAGE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DIRECT_MEMORY_USAGE_FIELD_NUMBER: _ClassVar[int]
    DIRECT_MEMORY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_IN_USAGE_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_IN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_OUT_USAGE_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_OUT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_RATE_IN_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_RATE_OUT_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_THROUGHPUT_IN_FIELD_NUMBER: _ClassVar[int]
    LONG_MSG_THROUGHPUT_OUT_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    cpu_usage: float
    cpu_limit: float
    memory_usage: float
    memory_limit: float
    direct_memory_usage: float
    direct_memory_limit: float
    bandwidth_in_usage: float
    bandwidth_in_limit: float
    bandwidth_out_usage: float
    bandwidth_out_limit: float
    num_tasks: int
    long_msg_rate_in: float
    long_msg_rate_out: float
    long_msg_throughput_in: float
    long_msg_throughput_out: float
    ts_ms: int
    def __init__(self, worker_id: _Optional[str] = ..., cpu_usage: _Optional[float] = ..., cpu_limit: _Optional[float] = ..., memory_usage: _Optional[float] = ..., memory_limit: _Optional[float] = ..., direct_memory_usage: _Optional[float] = ..., direct_memory_limit: _Optional[float] = ..., bandwidth_in_usage: _Optional[float] = ..., bandwidth_in_limit: _Optional[float] = ..., bandwidth_out_usage: _Optional[float] = ..., bandwidth_out_limit: _Optional[float] = ..., num_tasks: _Optional[int] = ..., long_msg_rate_in: _Optional[float] = ..., long_msg_rate_out: _Optional[float] = ..., long_msg_throughput_in: _Optional[float] = ..., long_msg_throughput_out: _Optional[float] = ..., ts_ms: _Optional[int] = ...) -> None: ...

class LoadSnapshot(_message.Message):
    __slots__ = ("group_id", "snapshot_id", "created_ms", "tasks", "workers")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    snapshot_id: str
    created_ms: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskLoadStats]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerLoadStats]
    def __init__(self, group_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., created_ms: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskLoadStats, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerLoadStats, _Mapping]]] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CoordinatorLocation(_message.Message):
    __slots__ = ("group_id", "address", "shard", "epoch", "error")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    address: str
    shard: int
    epoch: int
    error: Error
    def __init__(self, group_id: _Optional[str] = ..., address: _Optional[str] = ..., shard: _Optional[int] = ..., epoch: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error", "coordinators")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    error: Error
    coordinators: _containers.RepeatedCompositeFieldContainer[CoordinatorLocation]
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., coordinators: _Optional[_Iterable[_Union[CoordinatorLocation, _Mapping]]] = ...) -> None: ...

class TaskReplicaList(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ...) -> None: ...

class GroupHeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "metadata", "owned", "assignor", "rebalance_timeout_ms", "session_timeout_ms", "client_id", "target")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    metadata: MemberMetadata
    owned: TaskReplicaList
    assignor: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    client_id: str
    target: TargetAnswer
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., metadata: _Optional[_Union[MemberMetadata, _Mapping]] = ..., owned: _Optional[_Union[TaskReplicaList, _Mapping]] = ..., assignor: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ..., client_id: _Optional[str] = ..., target: _Optional[_Union[TargetAnswer, _Mapping]] = ...) -> None: ...

class TargetRequest(_message.Message):
    __slots__ = ("group_epoch", "assignor", "members", "tasks", "load_snapshot")
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LOAD_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    group_epoch: int
    assignor: str
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    load_snapshot: LoadSnapshot
    def __init__(self, group_epoch: _Optional[int] = ..., assignor: _Optional[str] = ..., members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., load_snapshot: _Optional[_Union[LoadSnapshot, _Mapping]] = ...) -> None: ...

class TargetAnswer(_message.Message):
    __slots__ = ("group_epoch", "assignments", "error", "splits")
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    group_epoch: int
    assignments: _containers.RepeatedCompositeFieldContainer[MemberAssignment]
    error: str
    splits: _containers.RepeatedCompositeFieldContainer[TaskSplit]
    def __init__(self, group_epoch: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[MemberAssignment, _Mapping]]] = ..., error: _Optional[str] = ..., splits: _Optional[_Iterable[_Union[TaskSplit, _Mapping]]] = ...) -> None: ...

class GroupHeartbeatResponse(_message.Message):
    __slots__ = ("error", "member_id", "member_epoch", "heartbeat_interval_ms", "assignment", "compute_target")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TARGET_FIELD_NUMBER: _ClassVar[int]
    error: Error
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: TaskReplicaList
    compute_target: TargetRequest
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., assignment: _Optional[_Union[TaskReplicaList, _Mapping]] = ..., compute_target: _Optional[_Union[TargetRequest, _Mapping]] = ...) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ("tag", "join_group", "sync_group", "heartbeat", "leave_group", "report_load", "group_heartbeat", "batch")
    TAG_FIELD_NUMBER: _ClassVar[int]
    JOIN_GROUP_FIELD_NUMBER: _ClassVar[int]
    SYNC_GROUP_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEAVE_GROUP_FIELD_NUMBER: _ClassVar[int]
    REPORT_LOAD_FIELD_NUMBER: _ClassVar[int]
    GROUP_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    tag: int
    join_group: JoinGroupRequest
    sync_group: SyncGroupRequest
    heartbeat: HeartbeatRequest
    leave_group: LeaveGroupRequest
    report_load: ReportLoadRequest
    group_heartbeat: GroupHeartbeatRequest
    batch: _containers.RepeatedCompositeFieldContainer[SessionRequest]
    def __init__(self, tag: _Optional[int] = ..., join_group: _Optional[_Union[JoinGroupRequest, _Mapping]] = ..., sync_group: _Optional[_Union[SyncGroupRequest, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatRequest, _Mapping]] = ..., leave_group: _Optional[_Union[LeaveGroupRequest, _Mapping]] = ..., report_load: _Optional[_Union[ReportLoadRequest, _Mapping]] = ..., group_heartbeat: _Optional[_Union[GroupHeartbeatRequest, _Mapping]] = ..., batch: _Optional[_Iterable[_Union[SessionRequest, _Mapping]]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("tag", "join_group", "sync_group", "heartbeat", "leave_group", "report_load", "group_heartbeat", "news", "batch")
    TAG_FIELD_NUMBER: _ClassVar[int]
    JOIN_GROUP_FIELD_NUMBER: _ClassVar[int]
    SYNC_GROUP_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LEAVE_GROUP_FIELD_NUMBER: _ClassVar[int]
    REPORT_LOAD_FIELD_NUMBER: _ClassVar[int]
    GROUP_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    NEWS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    tag: int
    join_group: JoinGroupResponse
    sync_group: SyncGroupResponse
    heartbeat: HeartbeatResponse
    leave_group: LeaveGroupResponse
    report_load: ReportLoadResponse
    group_heartbeat: GroupHeartbeatResponse
    news: SessionNews
    batch: _containers.RepeatedCompositeFieldContainer[SessionResponse]
    def __init__(self, tag: _Optional[int] = ..., join_group: _Optional[_Union[JoinGroupResponse, _Mapping]] = ..., sync_group: _Optional[_Union[SyncGroupResponse, _Mapping]] = ..., heartbeat: _Optional[_Union[HeartbeatResponse, _Mapping]] = ..., leave_group: _Optional[_Union[LeaveGroupResponse, _Mapping]] = ..., report_load: _Optional[_Union[ReportLoadResponse, _Mapping]] = ..., group_heartbeat: _Optional[_Union[GroupHeartbeatResponse, _Mapping]] = ..., news: _Optional[_Union[SessionNews, _Mapping]] = ..., batch: _Optional[_Iterable[_Union[SessionResponse, _Mapping]]] = ...) -> None: ...

class SessionNews(_message.Message):
    __slots__ = ("group_id", "member_id", "rebalance_started", "assignment_changed", "tasks_to_give_up", "coordinator_moved")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_STARTED_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_CHANGED_FIELD_NUMBER: _ClassVar[int]
    TASKS_TO_GIVE_UP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_MOVED_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    rebalance_started: RebalanceStarted
    assignment_changed: AssignmentChanged
    tasks_to_give_up: TasksToGiveUp
    coordinator_moved: CoordinatorMoved
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., rebalance_started: _Optional[_Union[RebalanceStarted, _Mapping]] = ..., assignment_changed: _Optional[_Union[AssignmentChanged, _Mapping]] = ..., tasks_to_give_up: _Optional[_Union[TasksToGiveUp, _Mapping]] = ..., coordinator_moved: _Optional[_Union[CoordinatorMoved, _Mapping]] = ...) -> None: ...

class RebalanceStarted(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    def __init__(self, generation: _Optional[int] = ...) -> None: ...

class AssignmentChanged(_message.Message):
    __slots__ = ("member_epoch",)
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    member_epoch: int
    def __init__(self, member_epoch: _Optional[int] = ...) -> None: ...

class TasksToGiveUp(_message.Message):
    __slots__ = ("member_epoch", "tasks")
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    member_epoch: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    def __init__(self, member_epoch: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ...) -> None: ...

class CoordinatorMoved(_message.Message):
    __slots__ = ("coordinator_hint",)
    COORDINATOR_HINT_FIELD_NUMBER: _ClassVar[int]
    coordinator_hint: str
    def __init__(self, coordinator_hint: _Optional[str] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupListing(_message.Message):
    __slots__ = ("group_id", "state", "generation", "num_members", "protocol", "group_type", "group_epoch", "target_epoch")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    NUM_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: GroupState
    generation: int
    num_members: int
    protocol: str
    group_type: str
    group_epoch: int
    target_epoch: int
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., generation: _Optional[int] = ..., num_members: _Optional[int] = ..., protocol: _Optional[str] = ..., group_type: _Optional[str] = ..., group_epoch: _Optional[int] = ..., target_epoch: _Optional[int] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error", "groups")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error: Error
    groups: _containers.RepeatedCompositeFieldContainer[GroupListing]
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., groups: _Optional[_Iterable[_Union[GroupListing, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group_id", "include_load_snapshot")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LOAD_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    include_load_snapshot: bool
    def __init__(self, group_id: _Optional[str] = ..., include_load_snapshot: _Optional[bool] = ...) -> None: ...

class DescribedMember(_message.Message):
    __slots__ = ("member", "assigned", "last_seen_ms_ago", "consumer")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    member: GroupMember
    assigned: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    last_seen_ms_ago: int
    consumer: ConsumerMemberState
    def __init__(self, member: _Optional[_Union[GroupMember, _Mapping]] = ..., assigned: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., last_seen_ms_ago: _Optional[int] = ..., consumer: _Optional[_Union[ConsumerMemberState, _Mapping]] = ...) -> None: ...

class ConsumerMemberState(_message.Message):
    __slots__ = ("member_epoch", "state", "target", "revoking", "waiting", "away", "split_waits")
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REVOKING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    AWAY_FIELD_NUMBER: _ClassVar[int]
    SPLIT_WAITS_FIELD_NUMBER: _ClassVar[int]
    member_epoch: int
    state: str
    target: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    revoking: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    waiting: _containers.RepeatedCompositeFieldContainer[TaskReplica]
    away: bool
    split_waits: _containers.RepeatedCompositeFieldContainer[SplitWait]
    def __init__(self, member_epoch: _Optional[int] = ..., state: _Optional[str] = ..., target: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., revoking: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[TaskReplica, _Mapping]]] = ..., away: _Optional[bool] = ..., split_waits: _Optional[_Iterable[_Union[SplitWait, _Mapping]]] = ...) -> None: ...

class SplitWait(_message.Message):
    __slots__ = ("child", "parent", "held_by")
    CHILD_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    child: TaskReplica
    parent: TaskReplica
    held_by: str
    def __init__(self, child: _Optional[_Union[TaskReplica, _Mapping]] = ..., parent: _Optional[_Union[TaskReplica, _Mapping]] = ..., held_by: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("error", "group_id", "state", "generation", "protocol", "leader_id", "members", "tasks", "unassigned", "last_error", "load_snapshot", "group_type", "group_epoch", "target_epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    UNASSIGNED_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LOAD_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    GROUP_TYPE_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: Error
    group_id: str
    state: GroupState
    generation: int
    protocol: str
    leader_id: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedMember]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    unassigned: _containers.RepeatedCompositeFieldContainer[UnassignedReplica]
    last_error: str
    load_snapshot: LoadSnapshot
    group_type: str
    group_epoch: int
    target_epoch: int
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., group_id: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., generation: _Optional[int] = ..., protocol: _Optional[str] = ..., leader_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedMember, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., unassigned: _Optional[_Iterable[_Union[UnassignedReplica, _Mapping]]] = ..., last_error: _Optional[str] = ..., load_snapshot: _Optional[_Union[LoadSnapshot, _Mapping]] = ..., group_type: _Optional[str] = ..., group_epoch: _Optional[int] = ..., target_epoch: _Optional[int] = ...) -> None: ...

class PutTasksRequest(_message.Message):
    __slots__ = ("group_id", "tasks")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, group_id: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class PutTasksResponse(_message.Message):
    __slots__ = ("error", "num_tasks")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    error: Error
    num_tasks: int
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., num_tasks: _Optional[int] = ...) -> None: ...

class DeleteTasksRequest(_message.Message):
    __slots__ = ("group_id", "task_ids")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_id: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTasksResponse(_message.Message):
    __slots__ = ("error", "num_tasks")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    error: Error
    num_tasks: int
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., num_tasks: _Optional[int] = ...) -> None: ...

class PublishLoadSnapshotRequest(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: LoadSnapshot
    def __init__(self, snapshot: _Optional[_Union[LoadSnapshot, _Mapping]] = ...) -> None: ...

class PublishLoadSnapshotResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: Error
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterCoordinator(_message.Message):
    __slots__ = ("address", "shards_led", "self")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_LED_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    address: str
    shards_led: int
    self: bool
    def __init__(self_, address: _Optional[str] = ..., shards_led: _Optional[int] = ..., self: _Optional[bool] = ...) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ("shard", "leader", "epoch", "state", "groups", "members")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    leader: str
    epoch: int
    state: ShardState
    groups: int
    members: int
    def __init__(self, shard: _Optional[int] = ..., leader: _Optional[str] = ..., epoch: _Optional[int] = ..., state: _Optional[_Union[ShardState, str]] = ..., groups: _Optional[int] = ..., members: _Optional[int] = ...) -> None: ...

class ShardMove(_message.Message):
    __slots__ = ("shard", "from_address", "to_address")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    FROM_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TO_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    from_address: str
    to_address: str
    def __init__(self, shard: _Optional[int] = ..., from_address: _Optional[str] = ..., to_address: _Optional[str] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error", "shards", "mode", "coordinators", "shard_infos", "moves")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    SHARD_INFOS_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    error: Error
    shards: int
    mode: str
    coordinators: _containers.RepeatedCompositeFieldContainer[ClusterCoordinator]
    shard_infos: _containers.RepeatedCompositeFieldContainer[ShardInfo]
    moves: _containers.RepeatedCompositeFieldContainer[ShardMove]
    def __init__(self, error: _Optional[_Union[Error, _Mapping]] = ..., shards: _Optional[int] = ..., mode: _Optional[str] = ..., coordinators: _Optional[_Iterable[_Union[ClusterCoordinator, _Mapping]]] = ..., shard_infos: _Optional[_Iterable[_Union[ShardInfo, _Mapping]]] = ..., moves: _Optional[_Iterable[_Union[ShardMove, _Mapping]]] = ...) -> None: ...
