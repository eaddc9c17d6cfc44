"""``ferryman generate``: one generation from the command line, streamed as it comes."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ferryman.sdk import Client, FerrymanError
from ferryman.sdk.client import endpoint
from ferryman_server.cli.output import fail, usd


def generate(
    model: str,
    prompt: Annotated[str, typer.Argument(help="The prompt (a user message with --chat).")],
    chat: Annotated[bool, typer.Option(help="Send the prompt as a chat message (chat template).")] = True,
    system: Annotated[str, typer.Option(help="A system message before it (with --chat).")] = "",
    max_tokens: Annotated[int, typer.Option(help="Tokens to generate at most.")] = 128,
    temperature: Annotated[float, typer.Option(help="0 is greedy.")] = 0.0,
    seed: Annotated[int | None, typer.Option(help="Fixes sampled tokens.")] = None,
    stop: Annotated[list[str] | None, typer.Option(help="A stop string (repeatable).")] = None,
    target: Annotated[str, typer.Option(help="Router address (env FERRYMAN_TARGET).")] = "",
    key: Annotated[str, typer.Option(help="API key (env FERRYMAN_API_KEY).")] = "",
    version: Annotated[str, typer.Option(help="Pin a version.")] = "",
    timeout: Annotated[float, typer.Option(help="Seconds.")] = 120.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON line at the end instead of text.")
    ] = False,
    tls_ca: Annotated[str, typer.Option(help="Speak TLS, verifying the router with this CA file.")] = "",
    tls: Annotated[bool, typer.Option(help="Speak TLS, verifying the router with the system's CAs.")] = False,
) -> None:
    """Generate text and print it as it comes; then the finish reason and usage."""
    try:
        address, api_key = endpoint(target, key)
    except ValueError as exc:
        fail(str(exc))
    options: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "stop": stop or (),
        "version": version or None,
        "timeout": timeout,
    }
    text: list[str] = []
    try:
        with Client(address, api_key, timeout=timeout, tls=tls_ca or tls) as client:
            if chat:
                turns = [{"role": "system", "content": system}] if system else []
                chunks = client.chat(model, [*turns, {"role": "user", "content": prompt}], **options)
            else:
                chunks = client.generate(model, prompt, **options)
            last = None
            for chunk in chunks:
                text.append(chunk.text)
                if not as_json:
                    typer.echo(chunk.text, nl=False)
                last = chunk
    except FerrymanError as exc:
        fail(str(exc))
    assert last is not None and last.usage is not None  # a stream ends with its usage
    if as_json:
        summary = {"model": last.model, "version": last.version, "text": "".join(text)}
        typer.echo(json.dumps({**summary, "finish_reason": last.finish_reason, "usage": last.usage.__dict__}))
    else:
        usage = last.usage
        tokens = f"{usage.input_tokens} prompt + {usage.output_tokens} completion tokens"
        typer.echo(f"\n[{last.finish_reason}; {tokens}, ${usd(usage.cost_usd)}]", err=True)
