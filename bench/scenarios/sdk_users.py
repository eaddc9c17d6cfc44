"""Users of the SDK in open loop: Poisson arrivals, each one ``AsyncClient.predict`` with the
SDK's defaults (its retries and its adaptive throttling on) and a deadline. Run as a process of
its own by ``overload_native --sdk-processes N`` (several of them share the rate); prints one
JSON line of what its users saw.

    python -m bench.scenarios.sdk_users --target HOST:PORT --key KEY --rate 300 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import numpy as np

import ferryman

FEATURES = 512
DRAIN_S = 2.0
"""After the last arrival, how long answers still in flight may take (past any deadline)."""


async def users(
    target: str, key: str, rate: float, seconds: float, deadline_s: float, throttle: bool
) -> dict[str, int]:
    """Outcomes of the users' requests: ``good`` (answered within the deadline), ``late``
    (answered after it), and each error code's count (the throttle's local refusals as
    ``CLIENT_THROTTLED``)."""
    outcomes: dict[str, int] = {}
    x = np.random.default_rng().standard_normal((1, FEATURES), dtype=np.float32)

    def count(outcome: str) -> None:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    async def one(client: ferryman.AsyncClient) -> None:
        started = time.perf_counter()
        try:
            await client.predict("mlp", {"input": x}, timeout=deadline_s)
            count("good" if time.perf_counter() - started <= deadline_s else "late")
        except ferryman.FerrymanError as exc:
            count(exc.reason if exc.reason == "CLIENT_THROTTLED" else exc.code.name)

    rng = random.Random()
    tasks: set[asyncio.Task[None]] = set()
    async with ferryman.AsyncClient(target, key, throttle=throttle) as client:
        await client.get_model("mlp")  # the schema once, before the clock starts
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            task = asyncio.create_task(one(client))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(min(rng.expovariate(rate), end - now))
        if tasks:
            await asyncio.wait(set(tasks), timeout=deadline_s + DRAIN_S)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--rate", type=float, required=True, help="arrivals per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--deadline-ms", type=int, default=50)
    parser.add_argument("--no-throttle", dest="throttle", action="store_false")
    opts = parser.parse_args()
    outcomes = asyncio.run(
        users(opts.target, opts.key, opts.rate, opts.seconds, opts.deadline_ms / 1000, opts.throttle)
    )
    print(json.dumps(outcomes), flush=True)


if __name__ == "__main__":
    main()
