import datetime

from ferryman.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VersionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERSION_STATE_UNSPECIFIED: _ClassVar[VersionState]
    VERSION_STATE_LOADING: _ClassVar[VersionState]
    VERSION_STATE_SERVING: _ClassVar[VersionState]
    VERSION_STATE_FAILED: _ClassVar[VersionState]
    VERSION_STATE_UNLOADING: _ClassVar[VersionState]
VERSION_STATE_UNSPECIFIED: VersionState
VERSION_STATE_LOADING: VersionState
VERSION_STATE_SERVING: VersionState
VERSION_STATE_FAILED: VersionState
VERSION_STATE_UNLOADING: VersionState

class NodeGenerateRequest(_message.Message):
    __slots__ = ("model", "version", "request_id", "tenant", "prompt", "messages", "max_tokens", "sampling", "start_within", "priority", "token_budget", "stop", "weight")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    START_WITHIN_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    request_id: str
    tenant: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    max_tokens: int
    sampling: _common_pb2.SamplingParams
    start_within: _duration_pb2.Duration
    priority: int
    token_budget: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    weight: float
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., start_within: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., priority: _Optional[int] = ..., token_budget: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., weight: _Optional[float] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("text", "token_ids", "finish_reason", "prompt_tokens", "completion_tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: _common_pb2.FinishReason
    prompt_tokens: int
    completion_tokens: int
    def __init__(self, text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ("request_id", "inputs", "traceparent")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    inputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    traceparent: str
    def __init__(self, request_id: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class InferBatchRequest(_message.Message):
    __slots__ = ("model", "version", "items", "parameters", "batch_id", "traceparent")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    items: _containers.RepeatedCompositeFieldContainer[BatchItem]
    parameters: _containers.ScalarMap[str, str]
    batch_id: str
    traceparent: str
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., items: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ..., parameters: _Optional[_Mapping[str, str]] = ..., batch_id: _Optional[str] = ..., traceparent: _Optional[str] = ...) -> None: ...

class ItemOutcome(_message.Message):
    __slots__ = ("request_id", "status", "outputs", "usage")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: _status_pb2.Status
    outputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    usage: _common_pb2.Usage
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class InferBatchResponse(_message.Message):
    __slots__ = ("items", "compute", "batch_size", "node")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ItemOutcome]
    compute: _duration_pb2.Duration
    batch_size: int
    node: str
    def __init__(self, items: _Optional[_Iterable[_Union[ItemOutcome, _Mapping]]] = ..., compute: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., batch_size: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class ModelVersionSpec(_message.Message):
    __slots__ = ("model", "version", "artifact_uri", "sha256", "format", "handler", "schema", "max_batch_size")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_URI_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    artifact_uri: str
    sha256: str
    format: str
    handler: str
    schema: _common_pb2.IOSchema
    max_batch_size: int
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., artifact_uri: _Optional[str] = ..., sha256: _Optional[str] = ..., format: _Optional[str] = ..., handler: _Optional[str] = ..., schema: _Optional[_Union[_common_pb2.IOSchema, _Mapping]] = ..., max_batch_size: _Optional[int] = ...) -> None: ...

class LoadModelRequest(_message.Message):
    __slots__ = ("spec", "memory_bytes", "evict")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVICT_FIELD_NUMBER: _ClassVar[int]
    spec: ModelVersionSpec
    memory_bytes: int
    evict: bool
    def __init__(self, spec: _Optional[_Union[ModelVersionSpec, _Mapping]] = ..., memory_bytes: _Optional[int] = ..., evict: bool = ...) -> None: ...

class LoadModelResponse(_message.Message):
    __slots__ = ("state", "reason", "no_room", "evicted", "memory_bytes")
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NO_ROOM_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    state: VersionState
    reason: str
    no_room: bool
    evicted: _containers.RepeatedScalarFieldContainer[str]
    memory_bytes: int
    def __init__(self, state: _Optional[_Union[VersionState, str]] = ..., reason: _Optional[str] = ..., no_room: bool = ..., evicted: _Optional[_Iterable[str]] = ..., memory_bytes: _Optional[int] = ...) -> None: ...

class UnloadModelRequest(_message.Message):
    __slots__ = ("model", "version")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class UnloadModelResponse(_message.Message):
    __slots__ = ("unloaded",)
    UNLOADED_FIELD_NUMBER: _ClassVar[int]
    unloaded: bool
    def __init__(self, unloaded: bool = ...) -> None: ...

class NodeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LatencyPoint(_message.Message):
    __slots__ = ("batch_size", "latency")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    latency: _duration_pb2.Duration
    def __init__(self, batch_size: _Optional[int] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LoadedVersion(_message.Message):
    __slots__ = ("model", "version", "state", "reason", "max_batch_size", "profile", "in_flight", "memory_bytes", "pinned", "idle_for", "evictable")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    IDLE_FOR_FIELD_NUMBER: _ClassVar[int]
    EVICTABLE_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    state: VersionState
    reason: str
    max_batch_size: int
    profile: _containers.RepeatedCompositeFieldContainer[LatencyPoint]
    in_flight: int
    memory_bytes: int
    pinned: bool
    idle_for: _duration_pb2.Duration
    evictable: bool
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., state: _Optional[_Union[VersionState, str]] = ..., reason: _Optional[str] = ..., max_batch_size: _Optional[int] = ..., profile: _Optional[_Iterable[_Union[LatencyPoint, _Mapping]]] = ..., in_flight: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., pinned: bool = ..., idle_for: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., evictable: bool = ...) -> None: ...

class NodeInfoResponse(_message.Message):
    __slots__ = ("name", "device", "memory_total", "memory_used", "versions", "lifecycle", "capacity", "memory_budget")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    device: str
    memory_total: int
    memory_used: int
    versions: _containers.RepeatedCompositeFieldContainer[LoadedVersion]
    lifecycle: str
    capacity: int
    memory_budget: int
    def __init__(self, name: _Optional[str] = ..., device: _Optional[str] = ..., memory_total: _Optional[int] = ..., memory_used: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[LoadedVersion, _Mapping]]] = ..., lifecycle: _Optional[str] = ..., capacity: _Optional[int] = ..., memory_budget: _Optional[int] = ...) -> None: ...
