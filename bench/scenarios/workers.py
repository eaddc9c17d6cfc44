"""Router workers: the cheapest model (``echo``) with 64 requests in flight over 8 connections
(h2load, C), one router process against two on the one port (SO_REUSEPORT: the kernel spreads
the connections). The batcher runs apart in both (a worker cannot host it), so the only
difference is the number of router event loops. Answers are counted from the routers' own
metrics (every worker's), CPU from every process of the platform and of h2load.

    python -m bench.scenarios.workers [--seconds 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.scenarios.measure import machine
from bench.scenarios.overload_native import delta, drive, grpc_body, h2load_args
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman.tensors import encode
from ferryman.v1 import common_pb2, inference_pb2
from ferryman_server.gpu_node.demo import echo
from ferryman_server.kernel.net import free_ports
from ferryman_server.kernel.scrape import scrape

CONNECTIONS = 8
TIMEOUT_MS = 5000


def served_per_s(workers: int, seconds: float, body: Path) -> float:
    """Answers per second (code OK, all workers) with ``workers`` router processes."""
    metrics = free_ports(workers)  # worker i serves its metrics on the port + i
    env = {"FERRYMAN_ROUTER_METRICS_LISTEN": f"127.0.0.1:{metrics}"}
    urls = [f"http://127.0.0.1:{metrics + i}/metrics" for i in range(workers)]
    spec = PlatformSpec(
        models=("echo",), max_batch={"echo": 64}, workers=workers, separate_batcher=True, env=env
    )
    with ferryman(spec) as platform:
        args = h2load_args(platform.address, platform.key, body, seconds, TIMEOUT_MS, 0.0, CONNECTIONS)
        asyncio.run(drive(args, None, seconds, TIMEOUT_MS / 1000))  # warm-up
        before, started = scrape(urls), time.monotonic()
        asyncio.run(drive(args, None, seconds, TIMEOUT_MS / 1000))
        elapsed = time.monotonic() - started
        after = scrape(urls)
    ok = delta(before, after, "ferryman_requests_total", code="OK")
    return ok / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    opts = parser.parse_args()
    x = np.ones((1, echo.WIDTH), np.float32)
    request = inference_pb2.PredictRequest(
        model="echo", inputs=[common_pb2.NamedTensor(name="input", tensor=encode(x))]
    )
    with tempfile.TemporaryDirectory() as tmp:
        body = Path(tmp) / "request.bin"
        body.write_bytes(grpc_body(request))
        one = served_per_s(1, opts.seconds, body)
        print(f"1 worker: {one:,.0f} answers/s", flush=True)
        many = served_per_s(opts.workers, opts.seconds, body)
        print(f"{opts.workers} workers: {many:,.0f} answers/s ({many / one:.2f}x)", flush=True)
    record = {
        "scenario": "workers",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "answers_per_s": {"1": round(one), str(opts.workers): round(many)},
        "ratio": round(many / one, 2),
    }
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "workers.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
