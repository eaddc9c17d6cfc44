"""The HTTP stack's own cost per request, to choose the HTTP doors' framework: the same
2 KB JSON echo as a bare ASGI app, a Starlette route, a FastAPI route, and a FastAPI route
with a header dependency (as the doors' bearer-key dependency), each under uvicorn
(httptools) in its own process, driven by one closed-loop client (keep-alive connections)
for the same time. Server CPU per request is the figure; the client's CPU is printed
beside it.

    python -m bench.http_stack [--concurrency 64] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Annotated, Any

import psutil
import uvicorn
from fastapi import Depends, FastAPI, Header
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.scenarios.doors import HttpConnection, http_head
from bench.scenarios.measure import machine
from ferryman_server.kernel.net import free_port

BODY = json.dumps({"data": [0.5] * 256}).encode()
READY_TIMEOUT_S = 30.0
STACKS = ("asgi", "starlette", "fastapi", "fastapi-depends")


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The bare ASGI echo: no routing, no request object."""
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/json")


async def key(authorization: Annotated[str, Header()] = "") -> str:
    """A header dependency, as the doors' bearer-key dependency is."""
    return authorization


async def fast_echo(request: Request, caller: Annotated[str, Depends(key)]) -> Response:
    return await echo(request)


def app(stack: str) -> Any:
    """The echo app of one stack."""
    if stack == "asgi":
        return asgi
    if stack == "starlette":
        return Starlette(routes=[Route("/echo", echo, methods=["POST"])])
    api = FastAPI()
    api.post("/echo")(fast_echo if stack == "fastapi-depends" else echo)
    return api


def serve(stack: str, port: int) -> None:
    uvicorn.run(
        app(stack), host="127.0.0.1", port=port, log_level="warning", access_log=False, http="httptools"
    )


async def load(address: str, concurrency: int, seconds: float) -> int:
    request = http_head(address, "/echo", "k", len(BODY)) + BODY
    connections = [await HttpConnection.open(address) for _ in range(concurrency)]
    loop = asyncio.get_running_loop()
    until, answered = loop.time() + seconds, 0

    async def worker(connection: HttpConnection) -> None:
        nonlocal answered
        while loop.time() < until:
            ok = await connection.request(request, b"") == 200
            answered += ok  # after the await: `x += await f()` reads x before suspending

    await asyncio.gather(*(worker(c) for c in connections))
    return answered


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--serve", choices=STACKS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        serve(opts.serve, opts.port)
        return
    me = psutil.Process()
    rows = []
    for stack in STACKS:
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.http_stack", "--serve", stack, "--port", str(port)]
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not any(
                c.laddr and c.laddr.port == port and c.status == "LISTEN"
                for c in psutil.net_connections("tcp")
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{stack} did not start")
                time.sleep(0.1)
            asyncio.run(load(f"127.0.0.1:{port}", opts.concurrency, 1.0))  # warm up
            s0, c0 = psutil.Process(server.pid).cpu_times(), me.cpu_times()
            answered = asyncio.run(load(f"127.0.0.1:{port}", opts.concurrency, opts.seconds))
            s1, c1 = psutil.Process(server.pid).cpu_times(), me.cpu_times()
        finally:
            server.terminate()
            server.wait()
        server_ms = (s1.user + s1.system - s0.user - s0.system) * 1000 / answered
        client_ms = (c1.user + c1.system - c0.user - c0.system) * 1000 / answered
        rows.append(f"| {stack} | {answered / opts.seconds:,.0f} | {server_ms:.3f} | {client_ms:.3f} |")
        print(rows[-1], flush=True)
    print(f"\n{time.strftime('%Y-%m-%d')} · {machine()} · c={opts.concurrency}, {opts.seconds:g} s each\n")
    print("| stack | req/s | server CPU ms/req | client CPU ms/req |\n|---|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
