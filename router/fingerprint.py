"""What makes two requests the same request: the digest a request id is bound to.

A retry under the same id carries the same digest and is charged once; a different
request under a used id has another digest and is refused (quota CONFLICT)."""

from __future__ import annotations

import hashlib

from ferryman.v1 import inference_pb2

DIGEST_BYTES = 16


def fingerprint(request: inference_pb2.PredictRequest) -> str:
    """A digest of everything the request asks for (all but its id and deadline)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for part in (request.model, request.version, request.user, str(int(request.priority))):
        h.update(part.encode())
        h.update(b"\0")
    for key in sorted(request.parameters):
        h.update(f"{key}={request.parameters[key]}\0".encode())
    for named in request.inputs:
        # Deterministic serialisation of one input: name, dtype, shape and bytes, or texts.
        h.update(named.SerializeToString(deterministic=True))
    return h.hexdigest()
