"""What the OIP gRPC and REST doors share: a request's parameters and inputs to a
``PredictRequest``, an answer's usage as response parameters, and the catalogue
(metadata, Triton's config and statistics) as OIP messages. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

import grpc

from ferryman.errors import Reason
from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.kernel.schema import TensorSpec
from ferryman_server.registry.snapshot import VersionRecord
from ferryman_server.router.bounds import MAX_INPUTS, MAX_PARAMETERS, clip
from ferryman_server.router.doors.oip.tensors import BYTES, TensorProblem
from ferryman_server.router.failures import RequestFailed, fail
from ferryman_server.router.statistics import Duration, VersionStats

SERVER_NAME = "ferryman"
EXTENSIONS = ("binary_tensor_data", "statistics", "model_configuration")
"""OIP extensions the doors implement (ServerMetadata lists them)."""
PLATFORM = "ferryman"
TIMEOUT_PARAMETER = "timeout"
"""Request parameter (microseconds, as Triton's clients send it): the request's deadline."""
USER_PARAMETER = "user"
"""Request parameter: the end user, for routes sticky on "user"."""
MAX_TIMEOUT_US = 86_400 * 1_000_000
"""A day: longer than any deadline a router keeps, and far from timedelta's overflow."""
MAX_INT_BITS = 64
"""The widest integer parameter (OIP's own are int64)."""
RESERVED_PARAMETERS = frozenset({TIMEOUT_PARAMETER, USER_PARAMETER, "binary_data_output", "priority"})
"""Request parameters that steer the request; the rest are model parameters."""

Scalar = bool | int | float | str


def problem_failure(problem: TensorProblem) -> RequestFailed:
    return fail(
        grpc.StatusCode.INVALID_ARGUMENT,
        str(problem),
        Reason.INVALID_INPUT,
        violations=[(problem.field, problem.description)],
    )


def predict_request(
    model: str,
    version: str,
    request_id: str,
    parameters: Mapping[str, Scalar],
    inputs: Sequence[common_pb2.NamedTensor],
) -> inference_pb2.PredictRequest:
    """The neutral request of an OIP inference request (an empty id stays empty: the router
    names it, and only an id the client chose binds a repeat to its answer)."""
    request = inference_pb2.PredictRequest(request_id=request_id, model=model, version=version, inputs=inputs)
    for key, value in parameters.items():
        if key == TIMEOUT_PARAMETER:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_US:
                raise problem_failure(
                    TensorProblem(
                        "parameters.timeout", f"microseconds, an integer from 0 to {MAX_TIMEOUT_US}"
                    )
                )
            request.timeout.FromTimedelta(timedelta(microseconds=value))
        elif key == USER_PARAMETER:
            request.user = str(value)
        elif key not in RESERVED_PARAMETERS:
            if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                # Python will not even print an integer past 4,300 digits: refuse it first.
                raise problem_failure(
                    TensorProblem(f"parameters.{clip(key)}", f"an integer of {MAX_INT_BITS} bits at most")
                )
            request.parameters[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return request


def check_outputs(info: inference_pb2.ModelInfo, wanted: Sequence[str]) -> None:
    """Refuse, before anything runs or is charged, outputs no version of the model has."""
    if len(wanted) > MAX_INPUTS:
        raise problem_failure(TensorProblem("outputs", f"more than {MAX_INPUTS} outputs"))
    known = {spec.name for version in info.versions for spec in version.schema.outputs}
    missing = [name for name in wanted if name not in known]
    if missing:
        raise problem_failure(
            TensorProblem("outputs", f"not an output of this model: {clip(', '.join(missing))}")
        )


def grpc_parameters(request: oip.ModelInferRequest) -> dict[str, Scalar]:
    """The request's parameters as plain values, counted before any is read (the router's
    bound on model parameters comes later, and steering ones do not count there)."""
    if len(request.parameters) > MAX_PARAMETERS + len(RESERVED_PARAMETERS):
        raise problem_failure(TensorProblem("parameters", f"more than {MAX_PARAMETERS} entries"))
    parameters: dict[str, Scalar] = {}
    for key, parameter in request.parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is not None:
            parameters[key] = getattr(parameter, choice)
    return parameters


def usage_parameters(response: inference_pb2.PredictResponse) -> dict[str, Scalar]:
    """Ferryman's answer details, as OIP response parameters."""
    return {
        "ferryman.items": response.usage.items,
        "ferryman.input_tokens": response.usage.input_tokens,
        "ferryman.output_tokens": response.usage.output_tokens,
        "ferryman.cost_usd": response.usage.cost_usd,
        "ferryman.fallback": response.fallback,
        "ferryman.coalesced": response.coalesced,
        "ferryman.cached": response.cached,
        "ferryman.batch_size": response.timing.batch_size,
    }


def infer_parameter(value: Scalar) -> oip.InferParameter:
    if isinstance(value, bool):
        return oip.InferParameter(bool_param=value)
    if isinstance(value, int):
        return oip.InferParameter(int64_param=value)
    if isinstance(value, float):
        return oip.InferParameter(double_param=value)
    return oip.InferParameter(string_param=value)


def datatype_of(spec: TensorSpec) -> str:
    return BYTES if spec.text else spec.dtype


def item_shape(spec: TensorSpec) -> list[int]:
    """The OIP shape of a declared tensor: -1 items, then the per-item dimensions (text: one
    string per item)."""
    return [-1] if spec.text else [-1, *spec.shape]


def metadata(info: inference_pb2.ModelInfo, record: VersionRecord) -> oip.ModelMetadataResponse:
    def tensors(specs: Sequence[TensorSpec]) -> list[oip.ModelMetadataResponse.TensorMetadata]:
        return [
            oip.ModelMetadataResponse.TensorMetadata(
                name=s.name, datatype=datatype_of(s), shape=item_shape(s)
            )
            for s in specs
        ]

    return oip.ModelMetadataResponse(
        name=info.name,
        versions=[v.version for v in info.versions],
        platform=PLATFORM,
        inputs=tensors(record.schema.inputs),
        outputs=tensors(record.schema.outputs),
    )


def config_datatype(spec: TensorSpec) -> str:
    """The name of Triton's element type (``TYPE_FP32``; text is ``TYPE_STRING``)."""
    return "TYPE_STRING" if spec.text else f"TYPE_{spec.dtype}"


def config(record: VersionRecord) -> oip.ModelConfig:
    """Triton's model configuration of a version: batching limits and per-item dims."""
    schema = record.schema

    def dims(spec: TensorSpec) -> list[int]:
        return [1] if spec.text else list(spec.shape)

    return oip.ModelConfig(
        name=record.model,
        platform=PLATFORM,
        backend=PLATFORM,
        max_batch_size=min(schema.max_items, record.max_batch_size),
        input=[
            oip.ModelInput(name=s.name, data_type=config_datatype(s), dims=dims(s)) for s in schema.inputs
        ],
        output=[
            oip.ModelOutput(name=s.name, data_type=config_datatype(s), dims=dims(s)) for s in schema.outputs
        ],
        dynamic_batching=oip.ModelDynamicBatching(preferred_batch_size=[record.max_batch_size]),
    )


def duration(value: Duration) -> oip.StatisticDuration:
    return oip.StatisticDuration(count=value.count, ns=value.ns)


def statistics(
    model: str, by_version: Mapping[str, VersionStats], version: str = ""
) -> oip.ModelStatisticsResponse:
    """Triton's ModelStatistics from the tenant's own requests (one entry per version)."""
    entries = []
    for name, stats in sorted(by_version.items()):
        if version and name != version:
            continue
        entries.append(
            oip.ModelStatistics(
                name=model,
                version=name,
                last_inference=stats.last_inference_ms,
                inference_count=stats.items,
                execution_count=stats.compute.count,
                inference_stats=oip.InferStatistics(
                    success=duration(stats.success),
                    fail=duration(stats.fail),
                    queue=duration(stats.queue),
                    compute_infer=duration(stats.compute),
                    cache_hit=duration(stats.cache_hit),
                ),
                batch_stats=[
                    oip.InferBatchStatistics(batch_size=size, compute_infer=duration(d))
                    for size, d in sorted(stats.batch_sizes.items())
                ],
            )
        )
    return oip.ModelStatisticsResponse(model_stats=entries)
