import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QuotaDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUOTA_DECISION_UNSPECIFIED: _ClassVar[QuotaDecision]
    QUOTA_DECISION_ADMIT: _ClassVar[QuotaDecision]
    QUOTA_DECISION_ADMIT_DEGRADED: _ClassVar[QuotaDecision]
    QUOTA_DECISION_REJECT: _ClassVar[QuotaDecision]
    QUOTA_DECISION_CONFLICT: _ClassVar[QuotaDecision]
QUOTA_DECISION_UNSPECIFIED: QuotaDecision
QUOTA_DECISION_ADMIT: QuotaDecision
QUOTA_DECISION_ADMIT_DEGRADED: QuotaDecision
QUOTA_DECISION_REJECT: QuotaDecision
QUOTA_DECISION_CONFLICT: QuotaDecision

class ReserveRequest(_message.Message):
    __slots__ = ("request_id", "tenant", "model", "estimated_tokens", "estimated_cost_usd", "fingerprint", "min_tokens", "cost_per_token_usd", "replayable")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_PER_TOKEN_USD_FIELD_NUMBER: _ClassVar[int]
    REPLAYABLE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    model: str
    estimated_tokens: int
    estimated_cost_usd: float
    fingerprint: str
    min_tokens: int
    cost_per_token_usd: float
    replayable: bool
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., estimated_tokens: _Optional[int] = ..., estimated_cost_usd: _Optional[float] = ..., fingerprint: _Optional[str] = ..., min_tokens: _Optional[int] = ..., cost_per_token_usd: _Optional[float] = ..., replayable: bool = ...) -> None: ...

class ReserveManyRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ReserveRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[ReserveRequest, _Mapping]]] = ...) -> None: ...

class ReserveManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReserveResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReserveResult, _Mapping]]] = ...) -> None: ...

class ReserveResult(_message.Message):
    __slots__ = ("verdict", "error")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    verdict: ReserveResponse
    error: _status_pb2.Status
    def __init__(self, verdict: _Optional[_Union[ReserveResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class QuotaViolation(_message.Message):
    __slots__ = ("limit", "current", "maximum")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    limit: str
    current: float
    maximum: float
    def __init__(self, limit: _Optional[str] = ..., current: _Optional[float] = ..., maximum: _Optional[float] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("decision", "violations", "retry_after", "held", "granted_tokens", "repeat", "running", "answer")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    GRANTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    decision: QuotaDecision
    violations: _containers.RepeatedCompositeFieldContainer[QuotaViolation]
    retry_after: _duration_pb2.Duration
    held: bool
    granted_tokens: int
    repeat: bool
    running: bool
    answer: bytes
    def __init__(self, decision: _Optional[_Union[QuotaDecision, str]] = ..., violations: _Optional[_Iterable[_Union[QuotaViolation, _Mapping]]] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., held: bool = ..., granted_tokens: _Optional[int] = ..., repeat: bool = ..., running: bool = ..., answer: _Optional[bytes] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("request_id", "actual_tokens", "actual_cost_usd", "answer")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    actual_tokens: int
    actual_cost_usd: float
    answer: bytes
    def __init__(self, request_id: _Optional[str] = ..., actual_tokens: _Optional[int] = ..., actual_cost_usd: _Optional[float] = ..., answer: _Optional[bytes] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ChargeRequest(_message.Message):
    __slots__ = ("charge_id", "tenant", "model", "total_cost_usd")
    CHARGE_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    charge_id: str
    tenant: str
    model: str
    total_cost_usd: float
    def __init__(self, charge_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., total_cost_usd: _Optional[float] = ...) -> None: ...

class ChargeResponse(_message.Message):
    __slots__ = ("charged_usd", "over_limit")
    CHARGED_USD_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    charged_usd: float
    over_limit: bool
    def __init__(self, charged_usd: _Optional[float] = ..., over_limit: bool = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("request_ids",)
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("renewed",)
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    renewed: int
    def __init__(self, renewed: _Optional[int] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    def __init__(self, applied: bool = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class LimitUsage(_message.Message):
    __slots__ = ("limit", "current", "maximum", "mode")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    limit: str
    current: float
    maximum: float
    mode: str
    def __init__(self, limit: _Optional[str] = ..., current: _Optional[float] = ..., maximum: _Optional[float] = ..., mode: _Optional[str] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("tenant", "limits", "expired_reservations")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    limits: _containers.RepeatedCompositeFieldContainer[LimitUsage]
    expired_reservations: int
    def __init__(self, tenant: _Optional[str] = ..., limits: _Optional[_Iterable[_Union[LimitUsage, _Mapping]]] = ..., expired_reservations: _Optional[int] = ...) -> None: ...
