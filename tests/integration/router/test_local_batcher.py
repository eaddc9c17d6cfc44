"""A router with its batcher in the same process (``ferryman serve router --local-batcher``):
the same answers and the same deadline behaviour as over the Submit stream, on the real
nodes, registry and models of the end-to-end platform."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness import ServiceThread
from router_platform import E2E, SLOW_MS

import ferryman
from ferryman_server.batcher.settings import BatcherSettings
from ferryman_server.cli.cohost import serve_router_with_batcher
from ferryman_server.gpu_node.demo import echo, mlp
from ferryman_server.quota.settings import QuotaSettings
from ferryman_server.router.settings import RouterSettings

RNG = np.random.default_rng(3)


def test_a_router_with_an_in_process_batcher_serves_and_keeps_deadlines(e2e: E2E) -> None:
    router = RouterSettings(listen="127.0.0.1:0", batchers="")
    batcher = BatcherSettings()
    thread = ServiceThread(
        lambda stop, ready: serve_router_with_batcher(
            router, QuotaSettings(), batcher, e2e.common, stop, ready
        ),
        "cohosted",
    )
    address = thread.start()
    try:
        x = RNG.standard_normal((4, 512), dtype=np.float32)
        with ferryman.Client(address, e2e.keys["acme"], retries=0) as client:
            answer = client.predict("mlp", x, user="carol")
            expected = mlp.build_mlp()(torch.from_numpy(x)).detach().numpy()
            output = answer.outputs["output"]
            assert isinstance(output, np.ndarray)
            np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-5)
            assert answer.timing.batch_size >= 4
            row = np.ones((1, echo.WIDTH), np.float32)
            with pytest.raises(ferryman.DeadlineExceeded):
                client.predict("echo", row, version="slow", timeout=SLOW_MS / 3000)
            slow = client.predict("echo", row, version="slow", timeout=10)
            assert slow.version == "slow"
    finally:
        thread.stop()
