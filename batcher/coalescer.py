"""Coalescing keys: identical requests share one execution.

Two items are identical when they name the same version, the same parameters and
the same input bytes; they may share only within one tenant unless the version is
marked shareable. The key is a sha256 over exactly those, so it is also the
response cache's key and the dead letter's input hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ferryman.v1 import common_pb2

SHARED_SCOPE = "*"


def input_digest(inputs: Sequence[common_pb2.NamedTensor]) -> str:
    """sha256 of the inputs: names, dtypes, shapes and raw bytes (or strings), by name."""
    digest = hashlib.sha256()
    for value in sorted(inputs, key=lambda v: v.name):
        digest.update(value.name.encode() + b"\0")
        if value.WhichOneof("value") == "tensor":
            tensor = value.tensor
            digest.update(f"t{tensor.dtype}:{','.join(map(str, tensor.shape))}\0".encode())
            digest.update(len(tensor.data).to_bytes(8, "little"))
            digest.update(tensor.data)
        else:
            digest.update(b"s")
            for text in value.text.values:
                encoded = text.encode()
                digest.update(len(encoded).to_bytes(8, "little"))
                digest.update(encoded)
    return digest.hexdigest()


def coalescing_key(
    *,
    model: str,
    version: str,
    parameters: Mapping[str, str],
    input_hash: str,
    tenant: str,
    shareable: bool,
) -> str:
    """The key identical in-flight items share; tenant-scoped unless ``shareable``."""
    scope = SHARED_SCOPE if shareable else tenant
    params = "\0".join(f"{k}={parameters[k]}" for k in sorted(parameters))
    material = "\x1f".join([model, version, params, input_hash, scope])
    return hashlib.sha256(material.encode()).hexdigest()
