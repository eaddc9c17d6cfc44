import datetime

from ferryman.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SubmitItem]
    def __init__(self, items: _Optional[_Iterable[_Union[SubmitItem, _Mapping]]] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ...) -> None: ...

class SubmitItem(_message.Message):
    __slots__ = ("request_id", "tenant", "model", "version", "parameters", "priority", "time_budget", "inputs", "cancel", "traceparent", "deadline", "shadow", "weight")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIME_BUDGET_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    model: str
    version: str
    parameters: _containers.ScalarMap[str, str]
    priority: _common_pb2.Priority
    time_budget: _duration_pb2.Duration
    inputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    cancel: bool
    traceparent: str
    deadline: _timestamp_pb2.Timestamp
    shadow: bool
    weight: float
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., parameters: _Optional[_Mapping[str, str]] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., time_budget: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., cancel: bool = ..., traceparent: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., shadow: bool = ..., weight: _Optional[float] = ...) -> None: ...

class GenerateItem(_message.Message):
    __slots__ = ("request_id", "tenant", "weight", "model", "version", "prompt", "messages", "max_tokens", "sampling", "priority", "token_budget", "stop")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    weight: float
    model: str
    version: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    max_tokens: int
    sampling: _common_pb2.SamplingParams
    priority: _common_pb2.Priority
    token_budget: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., weight: _Optional[float] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., token_budget: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerationEvent(_message.Message):
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

class ItemResult(_message.Message):
    __slots__ = ("request_id", "status", "outputs", "usage", "timing", "coalesced", "cached", "node")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    COALESCED_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: _status_pb2.Status
    outputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    usage: _common_pb2.Usage
    timing: _common_pb2.Timing
    coalesced: bool
    cached: bool
    node: str
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., coalesced: bool = ..., cached: bool = ..., node: _Optional[str] = ...) -> None: ...

class QueueStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("model", "version", "depth", "capacity", "drain_rate", "window", "target_batch_size")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DRAIN_RATE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    TARGET_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    depth: int
    capacity: int
    drain_rate: float
    window: _duration_pb2.Duration
    target_batch_size: int
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., depth: _Optional[int] = ..., capacity: _Optional[int] = ..., drain_rate: _Optional[float] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., target_batch_size: _Optional[int] = ...) -> None: ...

class QueueStatsResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ...) -> None: ...
