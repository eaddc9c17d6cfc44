import datetime

from ferryman.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FeedbackRequest(_message.Message):
    __slots__ = ("request_id", "metric", "value")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    metric: str
    value: float
    def __init__(self, request_id: _Optional[str] = ..., metric: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class FeedbackResponse(_message.Message):
    __slots__ = ("model", "version", "window_s")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    model: str
    version: str
    window_s: float
    def __init__(self, model: _Optional[str] = ..., version: _Optional[str] = ..., window_s: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "model", "version", "prompt", "messages", "max_tokens", "sampling", "stop", "user", "priority", "timeout", "generated_request_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    GENERATED_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    version: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    max_tokens: int
    sampling: _common_pb2.SamplingParams
    stop: _containers.RepeatedScalarFieldContainer[str]
    user: str
    priority: _common_pb2.Priority
    timeout: _duration_pb2.Duration
    generated_request_id: bool
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., stop: _Optional[_Iterable[str]] = ..., user: _Optional[str] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., generated_request_id: bool = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "text", "token_ids", "model", "version", "fallback", "finish_reason", "usage", "timing")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    model: str
    version: str
    fallback: bool
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timing: _common_pb2.Timing
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., fallback: bool = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("request_id", "model", "version", "inputs", "parameters", "user", "priority", "timeout", "spill_to_job", "generated_request_id")
    class ParametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SPILL_TO_JOB_FIELD_NUMBER: _ClassVar[int]
    GENERATED_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    version: str
    inputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    parameters: _containers.ScalarMap[str, str]
    user: str
    priority: _common_pb2.Priority
    timeout: _duration_pb2.Duration
    spill_to_job: bool
    generated_request_id: bool
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., parameters: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., priority: _Optional[_Union[_common_pb2.Priority, str]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., spill_to_job: bool = ..., generated_request_id: bool = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("request_id", "model", "version", "fallback", "outputs", "usage", "timing", "coalesced", "cached")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    COALESCED_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    version: str
    fallback: bool
    outputs: _containers.RepeatedCompositeFieldContainer[_common_pb2.NamedTensor]
    usage: _common_pb2.Usage
    timing: _common_pb2.Timing
    coalesced: bool
    cached: bool
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., version: _Optional[str] = ..., fallback: bool = ..., outputs: _Optional[_Iterable[_Union[_common_pb2.NamedTensor, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., coalesced: bool = ..., cached: bool = ...) -> None: ...

class PredictStreamResponse(_message.Message):
    __slots__ = ("request_id", "response", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    response: PredictResponse
    error: _status_pb2.Status
    def __init__(self, request_id: _Optional[str] = ..., response: _Optional[_Union[PredictResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class VersionInfo(_message.Message):
    __slots__ = ("version", "status", "weight", "schema")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    version: str
    status: str
    weight: int
    schema: _common_pb2.IOSchema
    def __init__(self, version: _Optional[str] = ..., status: _Optional[str] = ..., weight: _Optional[int] = ..., schema: _Optional[_Union[_common_pb2.IOSchema, _Mapping]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "description", "versions", "fallback")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    versions: _containers.RepeatedCompositeFieldContainer[VersionInfo]
    fallback: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[VersionInfo, _Mapping]]] = ..., fallback: _Optional[str] = ...) -> None: ...
