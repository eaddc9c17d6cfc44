"""Node.Generate over real gRPC on SmolLM2: a chat answer streamed as text deltas with its
usage, a stream the client leaves frees its slot for the next, a generation that cannot
start in time is refused without a slot, and bad requests are INVALID_ARGUMENT."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness import ServiceThread
from internal import internal_channel
from metrics_scrape import sample
from node_helpers import node_settings, spec

from ferryman.v1 import common_pb2, node_pb2, node_pb2_grpc
from ferryman_server.gpu_node.demo import smollm2
from ferryman_server.gpu_node.server import serve_node
from ferryman_server.kernel.config import CommonSettings
from ferryman_server.kernel.net import free_port
from ferryman_server.kernel.security import TOKEN_HEADER

# Left out of make test-fast: it loads the real SmolLM2 model.
pytestmark = pytest.mark.slow

CALL_S = 120.0
KINDS = ("prompt", "completion")
GAUGE_WAIT_S = 5.0
FRANCE = common_pb2.ChatMessage(role="user", content="What is the capital of France?")


METRICS = f"127.0.0.1:{free_port()}"
LABELS = {"model": "smollm2", "version": "1"}


@pytest.fixture(scope="module")
def lm_address(smollm2_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A node serving smollm2:1 with one generation slot (so a held slot is visible)."""
    settings = node_settings(
        torch_threads=1, generation_slots=1, generation_max_len=512, metrics_listen=METRICS
    )
    common = CommonSettings(data_dir=tmp_path_factory.mktemp("lm-node"))
    service = ServiceThread(lambda stop, ready: serve_node(settings, common, stop, ready), "lm-node")
    address = service.start()
    with internal_channel(address) as channel:
        stub = node_pb2_grpc.NodeStub(channel)
        version = spec("smollm2", "1", smollm2_artifact, "causal_lm", smollm2.SCHEMA, max_batch_size=1)
        loaded = stub.LoadModel(node_pb2.LoadModelRequest(spec=version), timeout=CALL_S)
        assert loaded.state == node_pb2.VERSION_STATE_SERVING, loaded.reason
    yield address
    service.stop()


@pytest.fixture(scope="module")
def lm_node(lm_address: str) -> Iterator[node_pb2_grpc.NodeStub]:
    """A stub that authenticates as a platform service (the channel adds the token)."""
    with internal_channel(lm_address) as channel:
        yield node_pb2_grpc.NodeStub(channel)


def request(**fields: object) -> node_pb2.NodeGenerateRequest:
    base: dict[str, object] = {"model": "smollm2", "version": "1", "request_id": "r", "tenant": "t"}
    return node_pb2.NodeGenerateRequest(**{**base, **fields})  # type: ignore[arg-type]


def test_a_chat_answer_streams_with_its_usage(lm_node: node_pb2_grpc.NodeStub) -> None:
    url = f"http://{METRICS}/metrics"
    before = {kind: sample(url, "ferryman_generation_tokens_total", **LABELS, kind=kind) for kind in KINDS}
    ttft_before = sample(url, "ferryman_generation_ttft_seconds_count", **LABELS)
    chat = request(messages=[FRANCE], max_tokens=16)
    events = list(lm_node.Generate(chat, timeout=CALL_S))
    text = "".join(e.text for e in events)
    assert "Paris" in text
    last = events[-1]
    assert last.finish_reason in (common_pb2.FINISH_REASON_STOP, common_pb2.FINISH_REASON_LENGTH)
    assert last.completion_tokens == sum(len(e.token_ids) for e in events) <= 16
    assert last.prompt_tokens > 10, "the chat template's tokens count as prompt"
    counted = {kind: sample(url, "ferryman_generation_tokens_total", **LABELS, kind=kind) for kind in KINDS}
    assert counted["prompt"] - before["prompt"] == last.prompt_tokens
    assert counted["completion"] - before["completion"] == last.completion_tokens
    assert sample(url, "ferryman_generation_ttft_seconds_count", **LABELS) == ttft_before + 1
    assert sample(url, "ferryman_generation_slots", **LABELS) == 1
    # The worker sets the gauges just after it hands out the step's tokens.
    deadline = time.monotonic() + GAUGE_WAIT_S
    while sample(url, "ferryman_generation_sequences", **LABELS, state="running") != 0:
        assert time.monotonic() < deadline, "the finished generation still counts as running"
        time.sleep(0.05)


def test_a_stream_the_client_leaves_frees_its_slot(lm_node: node_pb2_grpc.NodeStub) -> None:
    url = f"http://{METRICS}/metrics"
    before = {kind: sample(url, "ferryman_generation_tokens_total", **LABELS, kind=kind) for kind in KINDS}
    cancelled = sample(url, "ferryman_generation_finished_total", **LABELS, reason="cancelled")
    hog = lm_node.Generate(
        request(request_id="hog", prompt="Once upon a time", max_tokens=400),
        timeout=CALL_S,
    )
    assert next(hog).token_ids and next(hog).token_ids  # running: it holds the only slot
    hog.cancel()
    # The node has one slot: this finishes only because leaving the stream freed it.
    events = list(
        lm_node.Generate(
            request(request_id="next", prompt="The sky is", max_tokens=3),
            timeout=30,
        )
    )
    assert events[-1].finish_reason == common_pb2.FINISH_REASON_LENGTH and events[-1].completion_tokens == 3
    # The one it left is counted as cancelled, with what it had generated and its prompt
    # (the next one's tokens counted beside them).
    assert sample(url, "ferryman_generation_finished_total", **LABELS, reason="cancelled") == cancelled + 1
    grew = {
        kind: sample(url, "ferryman_generation_tokens_total", **LABELS, kind=kind) - before[kind]
        for kind in KINDS
    }
    assert grew["completion"] >= 2 + 3 and grew["prompt"] > events[-1].prompt_tokens


def test_a_generation_that_cannot_start_in_time_takes_no_slot(lm_node: node_pb2_grpc.NodeStub) -> None:
    hog = lm_node.Generate(
        request(request_id="busy", prompt="Once upon a time", max_tokens=400),
        timeout=CALL_S,
    )
    next(hog)
    hurried = request(request_id="hurried", prompt="Hello", max_tokens=5)
    hurried.start_within.FromMilliseconds(200)
    events = list(lm_node.Generate(hurried, timeout=30))
    hog.cancel()
    assert [(e.finish_reason, e.completion_tokens) for e in events] == [
        (common_pb2.FINISH_REASON_DEADLINE, 0)
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prompt": "hi", "messages": [FRANCE], "max_tokens": 4}, "either a prompt or chat messages"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "word " * 600, "max_tokens": 4}, "exceed the context"),
    ],
)
def test_bad_requests_are_invalid_argument(
    lm_node: node_pb2_grpc.NodeStub, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        list(lm_node.Generate(request(**fields), timeout=CALL_S))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (refused.value.details() or "")


def test_infer_batch_on_a_generative_version_says_to_generate(lm_node: node_pb2_grpc.NodeStub) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        lm_node.InferBatch(
            node_pb2.InferBatchRequest(
                model="smollm2", version="1", items=[node_pb2.BatchItem(request_id="x")]
            ),
            timeout=CALL_S,
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Generate" in (refused.value.details() or "")


def test_generate_demands_the_service_token(lm_address: str) -> None:
    """Only the platform's services may generate on a node: no token, no tokens."""
    with grpc.insecure_channel(lm_address) as channel:
        anonymous = node_pb2_grpc.NodeStub(channel)
        asked = request(prompt="hi", max_tokens=2)
        for metadata in ((), ((TOKEN_HEADER, "guessed"),)):
            with pytest.raises(grpc.RpcError) as refused:
                list(anonymous.Generate(asked, metadata=metadata, timeout=CALL_S))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_node_info_counts_the_reserved_kv_cache_in_the_versions_memory(
    lm_node: node_pb2_grpc.NodeStub,
) -> None:
    """The cache is mapped only as sequences write it, but it is the version's to fill: one
    slot x 512 positions x 30 layers x 3 KV heads x 64 x 2 (keys, values) x 2 bytes."""
    [version] = lm_node.NodeInfo(node_pb2.NodeInfoRequest(), timeout=CALL_S).versions
    cache = 1 * 512 * 30 * 3 * 64 * 2 * 2
    # The float16 weights (~270 MB packed and embedded) plus the cache.
    assert version.memory_bytes > cache + 200 * 2**20, version.memory_bytes
