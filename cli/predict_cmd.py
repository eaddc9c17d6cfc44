"""``ferryman predict``: one request from the command line, through the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ferryman.sdk import Client, FerrymanError
from ferryman.sdk.client import endpoint
from ferryman_server.cli.output import fail


def _load(value: str) -> Any:
    text = Path(value[1:]).read_text() if value.startswith("@") else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--input is not JSON: {exc}")


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


def predict(
    model: str,
    input: Annotated[
        str, typer.Option("--input", help='JSON (or @file): a value, or {"name": value}. Strings are text.')
    ],
    target: Annotated[str, typer.Option(help="Router address (env FERRYMAN_TARGET).")] = "",
    key: Annotated[str, typer.Option(help="API key (env FERRYMAN_API_KEY).")] = "",
    version: Annotated[str, typer.Option(help="Pin a version.")] = "",
    user: Annotated[str, typer.Option(help="End-user id for sticky routes.")] = "",
    timeout: Annotated[float, typer.Option(help="Seconds.")] = 30.0,
    tls_ca: Annotated[str, typer.Option(help="Speak TLS, verifying the router with this CA file.")] = "",
    tls: Annotated[bool, typer.Option(help="Speak TLS, verifying the router with the system's CAs.")] = False,
) -> None:
    """Send one prediction and print its outputs, version and usage as JSON."""
    try:
        address, api_key = endpoint(target, key)
    except ValueError as exc:
        fail(str(exc))
    try:
        with Client(address, api_key, timeout=timeout, tls=tls_ca or tls) as client:
            result = client.predict(model, _load(input), version=version or None, user=user or None)
    except FerrymanError as exc:
        fail(str(exc))
    typer.echo(
        json.dumps(
            {
                "model": result.model,
                "version": result.version,
                "fallback": result.fallback,
                "outputs": {name: _plain(value) for name, value in result.outputs.items()},
                "usage": result.usage.__dict__,
                "timing_ms": result.timing.__dict__,
            }
        )
    )
