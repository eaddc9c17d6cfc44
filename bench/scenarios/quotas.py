"""What quota enforcement costs on ``mlp``: no limits vs limits in memory vs limits in Redis.

The tenant gets rpm, tpm and concurrency limits far above the load (every request is checked,
none refused); the Redis case runs a private redis-server on a free port, stopped by PID.
Closed loop at concurrency 16 and 64; JSON out.

    python -m bench.scenarios.quotas [--levels 16,64] [--out docs/bench]
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from bench.loadgen import make_inputs_factory
from bench.scenarios.measure import Point, closed_sweep, scenario_options, table, write_json
from bench.scenarios.platform import PlatformSpec, ferryman
from ferryman_server.kernel.net import free_port
from ferryman_server.registry.specs import QuotaLimits

GENEROUS = QuotaLimits(rpm=10_000_000, tpm=10_000_000_000, max_concurrency=100_000)
REDIS_READY_S = 10.0
POLL_S = 0.05


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server on a free port that keeps nothing on disk; yields its URL."""
    port = free_port()
    binary = shutil.which("redis-server") or "redis-server"
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + REDIS_READY_S
        while True:
            try:
                redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise TimeoutError("redis-server did not start") from None
                time.sleep(POLL_S)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    opts, levels = scenario_options(__doc__, "16,64")
    points: list[Point] = []
    inputs = make_inputs_factory()
    with ferryman(PlatformSpec()) as platform:
        points += closed_sweep("quotas off", platform, "mlp", levels, inputs, opts)
    with ferryman(PlatformSpec(quota=GENEROUS)) as platform:
        points += closed_sweep("quotas in memory", platform, "mlp", levels, inputs, opts)
    with private_redis() as url, ferryman(PlatformSpec(quota=GENEROUS, redis_url=url)) as platform:
        points += closed_sweep("quotas on Redis", platform, "mlp", levels, inputs, opts)
    print()
    print(table(points))
    write_json(opts.out / "quotas.json", "quotas", points)


if __name__ == "__main__":
    main()
