"""What each front door costs per request on ``mlp`` at one concurrency, in one run:
ferryman.v1 gRPC, OIP gRPC, OIP REST with JSON tensors, OIP REST with binary tensors.

One platform (bench/scenarios/platform.py, its router serving HTTP too), the same unique
inputs through every door, closed loop. Bodies are built before the clock starts, so the
load generator's work per request is one send and one parse; its own CPU is reported
beside the router's so a reader sees how much of the two cores it took.

    python -m bench.scenarios.doors [--concurrency 64] [--seconds 8] [--warmup 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import numpy as np
import psutil

from bench.scenarios.measure import cpu_seconds, machine, tree_pids
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.oip.v2 import grpc_predict_v2_pb2 as oip
from ferryman.oip.v2 import grpc_predict_v2_pb2_grpc as oip_grpc
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2, inference_pb2_grpc

POOL = 2048
"""Distinct inputs, cycled: more than can be in flight at once, so nothing coalesces."""
IN_FEATURES = 512
TIMEOUT_S = 10.0
Call = Callable[[int], Awaitable[bool]]


@dataclass
class Result:
    door: str
    answered: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    router_cpu_s: float
    platform_cpu_s: float
    client_cpu_s: float

    def row(self, base: Result | None) -> str:
        rps = self.answered / self.seconds
        per = 1000 / self.answered if self.answered else float("nan")
        p50, p99 = np.percentile(self.latencies_ms, [50, 99]) if self.latencies_ms else (float("nan"),) * 2
        vs = (
            f"{self.router_cpu_s / self.answered / (base.router_cpu_s / base.answered):.2f}"
            if base
            else "1.00"
        )
        return (
            f"| {self.door} | {rps:,.0f} | {p50:.1f} | {p99:.1f} | {self.router_cpu_s * per:.3f} | {vs} "
            f"| {self.platform_cpu_s * per:.3f} | {self.client_cpu_s * per:.3f} | {self.errors} |"
        )


class HttpConnection:
    """One keep-alive HTTP/1.1 connection (the load generator's, kept minimal)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def open(cls, address: str) -> HttpConnection:
        host, port = address.split(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    async def request(self, head: bytes, body: bytes) -> int:
        self._writer.write(head + body)
        status = int((await self._reader.readline()).split()[1])
        length = 0
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await self._reader.readexactly(length)
        return status


def rows() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((POOL, 1, IN_FEATURES), dtype=np.float32)


def http_head(address: str, path: str, key: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


async def native_calls(address: str, key: str, concurrency: int) -> list[Call]:
    channel = grpc.aio.insecure_channel(address)
    stub = inference_pb2_grpc.InferenceStub(channel)
    metadata = (("authorization", f"Bearer {key}"),)
    requests = [
        inference_pb2.PredictRequest(
            model="mlp", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(r))]
        )
        for r in rows()
    ]

    async def call(i: int) -> bool:
        await stub.Predict(requests[i % POOL], metadata=metadata, timeout=TIMEOUT_S)
        return True

    return [call] * concurrency


async def oip_grpc_calls(address: str, key: str, concurrency: int) -> list[Call]:
    stub = oip_grpc.GRPCInferenceServiceStub(grpc.aio.insecure_channel(address))
    metadata = (("authorization", f"Bearer {key}"),)
    requests = []
    for r in rows():
        request = oip.ModelInferRequest(model_name="mlp", raw_input_contents=[r.tobytes()])
        request.inputs.add(name="input", datatype="FP32", shape=[1, IN_FEATURES])
        requests.append(request)

    async def call(i: int) -> bool:
        await stub.ModelInfer(requests[i % POOL], metadata=metadata, timeout=TIMEOUT_S)
        return True

    return [call] * concurrency


async def rest_calls(http: str, key: str, concurrency: int, binary: bool) -> list[Call]:
    bodies = []
    for r in rows():
        tensor: dict[str, object] = {"name": "input", "datatype": "FP32", "shape": [1, IN_FEATURES]}
        if binary:
            tensor["parameters"] = {"binary_data_size": r.nbytes}
            document = json.dumps({"inputs": [tensor], "parameters": {"binary_data_output": True}}).encode()
            extra = f"Inference-Header-Content-Length: {len(document)}\r\n"
            body = document + r.tobytes()
        else:
            tensor["data"] = r.reshape(-1).tolist()
            body, extra = json.dumps({"inputs": [tensor]}).encode(), ""
        bodies.append(http_head(http, "/v2/models/mlp/infer", key, len(body), extra) + body)
    calls: list[Call] = []
    for _ in range(concurrency):
        connection = await HttpConnection.open(http)

        async def call(i: int, connection: HttpConnection = connection) -> bool:
            return await connection.request(bodies[i % POOL], b"") == 200

        calls.append(call)
    return calls


async def drive(calls: list[Call], warmup_s: float, seconds: float, on_start: Callable[[], None]) -> Result:
    latencies: list[float] = []
    counts = {"answered": 0, "errors": 0}
    loop = asyncio.get_running_loop()
    measuring_from = loop.time() + warmup_s
    until = measuring_from + seconds
    started = [False]
    sequence = iter(range(1 << 62))

    async def worker(call: Call) -> None:
        while (now := loop.time()) < until:
            if now >= measuring_from and not started[0]:
                started[0] = True
                on_start()
            t0 = time.perf_counter()
            try:
                ok = await call(next(sequence))
            except grpc.RpcError:
                ok = False
            if loop.time() >= measuring_from and started[0]:
                if ok:
                    counts["answered"] += 1
                    latencies.append((time.perf_counter() - t0) * 1000)
                else:
                    counts["errors"] += 1

    await asyncio.gather(*(worker(c) for c in calls))
    return Result("", counts["answered"], counts["errors"], seconds, latencies, 0.0, 0.0, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    opts = parser.parse_args()
    me = psutil.Process()
    results: list[Result] = []
    with ferryman(PlatformSpec()) as platform:
        makers: list[tuple[str, Callable[[], Awaitable[list[Call]]]]] = [
            ("ferryman.v1 gRPC", lambda: native_calls(platform.address, platform.key, opts.concurrency)),
            ("OIP gRPC", lambda: oip_grpc_calls(platform.address, platform.key, opts.concurrency)),
            ("OIP REST JSON", lambda: rest_calls(platform.http, platform.key, opts.concurrency, False)),
            ("OIP REST binary", lambda: rest_calls(platform.http, platform.key, opts.concurrency, True)),
        ]
        everything = tree_pids(platform.pids)
        for door, make in makers:
            marks: dict[str, float] = {}

            def start(marks: dict[str, float] = marks) -> None:
                marks["router"] = cpu_seconds([platform.router_pid])
                marks["platform"] = cpu_seconds(everything)
                times = me.cpu_times()
                marks["client"] = times.user + times.system

            async def run(make: Callable[[], Awaitable[list[Call]]] = make) -> Result:
                return await drive(await make(), opts.warmup, opts.seconds, start)

            result = asyncio.run(run())
            times = me.cpu_times()
            result.door = door
            result.router_cpu_s = cpu_seconds([platform.router_pid]) - marks["router"]
            result.platform_cpu_s = cpu_seconds(everything) - marks["platform"]
            result.client_cpu_s = times.user + times.system - marks["client"]
            results.append(result)
            print(result.row(results[0] if len(results) > 1 else None), flush=True)
    print(
        f"\n{time.strftime('%Y-%m-%d')} · {machine()} · c={opts.concurrency}, {opts.seconds:g} s per door\n"
    )
    print(
        "| door | req/s | p50 ms | p99 ms | router CPU ms/req | router CPU vs native "
        "| platform CPU ms/req | load generator CPU ms/req | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for result in results:
        print(result.row(results[0] if result is not results[0] else None))


if __name__ == "__main__":
    main()
