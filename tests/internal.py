"""Channels to internal services (Node, Batcher, Quota) that carry the service token.

conftest.py gives the test session one token in ``FERRYMAN_SERVICE_TOKEN``; every
service the tests start (threads and subprocesses) reads it from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from ferryman_server.kernel.security import TOKEN_HEADER


def service_metadata() -> tuple[tuple[str, str], ...]:
    return ((TOKEN_HEADER, os.environ["FERRYMAN_SERVICE_TOKEN"]),)


class _Details(grpc.ClientCallDetails):
    def __init__(self, details: grpc.ClientCallDetails, metadata: tuple[tuple[str, Any], ...]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


if TYPE_CHECKING:  # generic only in the type stubs
    _UU: TypeAlias = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _US: TypeAlias = grpc.UnaryStreamClientInterceptor[Any, Any]
    _SU: TypeAlias = grpc.StreamUnaryClientInterceptor[Any, Any]
    _SS: TypeAlias = grpc.StreamStreamClientInterceptor[Any, Any]
else:
    _UU, _US = grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor
    _SU, _SS = grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor


class _WithToken(_UU, _US, _SU, _SS):
    def _details(self, details: grpc.ClientCallDetails) -> _Details:
        return _Details(details, (*(details.metadata or ()), *service_metadata()))

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, requests: Iterator[Any]
    ) -> Any:
        return continuation(self._details(details), requests)


def internal_channel(address: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A blocking channel to an internal service that authenticates as a service."""
    return grpc.intercept_channel(grpc.insecure_channel(address, options=options), _WithToken())
