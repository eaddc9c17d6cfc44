"""Bounds on everything a tenant sends besides its inputs (which the version's schema
bounds): ids, names, maps. Pure; returns field violations like ``ferryman_server.router.validation``."""

from __future__ import annotations

from collections.abc import Mapping

from ferryman.v1 import inference_pb2

MAX_REQUEST_ID_CHARS = 128
MAX_NAME_CHARS = 64
"""Model and version names (as the registry stores them)."""
MAX_USER_CHARS = 128
MAX_PARAMETERS = 16
MAX_INPUTS = 16
"""Named inputs one request may carry (schemas name a few; each unknown one is echoed)."""
MAX_PARAMETER_KEY_CHARS = 64
MAX_PARAMETER_VALUE_CHARS = 256
ECHO_CHARS = 64
"""Longest piece of a caller's own text repeated in an error message."""

Violation = tuple[str, str]


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` as it may appear in an error: at most ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def check_names(
    request: inference_pb2.PredictRequest | inference_pb2.GenerateRequest,
) -> list[Violation]:
    """Violations of a request's id, model, version and user (the model is required)."""
    violations: list[Violation] = []
    for field, value, limit in (
        ("request_id", request.request_id, MAX_REQUEST_ID_CHARS),
        ("model", request.model, MAX_NAME_CHARS),
        ("version", request.version, MAX_NAME_CHARS),
        ("user", request.user, MAX_USER_CHARS),
    ):
        if len(value) > limit:
            violations.append((field, f"longer than {limit} characters"))
    if not request.model:
        violations.append(("model", "required"))
    return violations


def check_request(request: inference_pb2.PredictRequest) -> list[Violation]:
    """Violations of the request's id, names and parameters; empty when within bounds."""
    violations = check_names(request)
    if len(request.inputs) > MAX_INPUTS:
        violations.append(("inputs", f"more than {MAX_INPUTS} inputs"))
    else:
        violations += [
            (f"inputs[{i}].name", f"longer than {MAX_NAME_CHARS} characters")
            for i, named in enumerate(request.inputs)
            if len(named.name) > MAX_NAME_CHARS
        ]
    return violations + check_parameters(request.parameters)


def check_parameters(parameters: Mapping[str, str]) -> list[Violation]:
    """Violations of a request's (or a job's) parameters: how many, and each key and value."""
    if len(parameters) > MAX_PARAMETERS:
        return [("parameters", f"more than {MAX_PARAMETERS} entries")]
    violations: list[Violation] = []
    for key, value in parameters.items():
        if len(key) > MAX_PARAMETER_KEY_CHARS:
            violations.append((f"parameters.{clip(key)}", f"key longer than {MAX_PARAMETER_KEY_CHARS}"))
        elif len(value) > MAX_PARAMETER_VALUE_CHARS:
            violations.append((f"parameters.{key}", f"value longer than {MAX_PARAMETER_VALUE_CHARS}"))
    return violations
