"""Node logic without sockets: item checks, grouping, splitting, profiles, state machine."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from ferryman.tensors import decode, encode
from ferryman.v1 import common_pb2, node_pb2
from ferryman_server.gpu_node.batch import build_inputs, plan, split_outputs
from ferryman_server.gpu_node.executor import predict_splitting
from ferryman_server.gpu_node.handler import BatchInput, RuntimeOutput
from ferryman_server.gpu_node.loader import warmup_sizes
from ferryman_server.gpu_node.slots import LatencyProfile, ModelSlot, SlotState, SlotTransitionError
from ferryman_server.kernel.schema import IOSchema

SCHEMA = IOSchema.model_validate(
    {
        "inputs": [{"name": "x", "dtype": "FP32", "shape": [-1, 2]}, {"name": "t", "text": True}],
        "outputs": [{"name": "y", "dtype": "FP32", "shape": [2]}],
        "max_items": 4,
    }
)


def item(rid: str, x: np.ndarray, texts: list[str]) -> node_pb2.BatchItem:
    return node_pb2.BatchItem(
        request_id=rid,
        inputs=[
            common_pb2.NamedTensor(name="x", tensor=encode(x)),
            common_pb2.NamedTensor(name="t", text=common_pb2.TextList(values=texts)),
        ],
    )


def test_plan_groups_by_free_dimension_and_rejects_bad_items() -> None:
    items = [
        item("a", np.zeros((1, 3, 2), np.float32), ["a"]),
        item("b", np.ones((2, 5, 2), np.float32), ["b", "b"]),
        item("c", np.ones((1, 3, 2), np.float32), ["c"]),
        item("rows-disagree", np.ones((2, 3, 2), np.float32), ["only one"]),
        item("too-many", np.ones((5, 3, 2), np.float32), ["z"] * 5),
    ]
    groups, errors = plan(items, SCHEMA)
    assert sorted(errors) == [3, 4]
    assert "disagree" in errors[3].message and "limit of 4" in errors[4].message
    assert [g.indices for g in groups] == [[0, 2], [1]]
    inputs = build_inputs(groups[0], SCHEMA)
    x = inputs["x"]
    assert isinstance(x, torch.Tensor) and x.shape == (2, 3, 2)
    assert inputs["t"] == ["a", "c"]
    assert torch.equal(x[1], torch.ones(3, 2))


def test_split_outputs_gives_each_item_its_rows() -> None:
    out = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    per_item = split_outputs({"y": out}, [1, 3, 2], SCHEMA)
    assert [decode(p[0].tensor).shape for p in per_item] == [(1, 2), (3, 2), (2, 2)]
    np.testing.assert_array_equal(decode(per_item[2][0].tensor), out[4:].numpy())
    with pytest.raises(RuntimeError, match="expected 7 rows"):
        split_outputs({"y": out}, [7], SCHEMA)
    with pytest.raises(RuntimeError, match="did not return output"):
        split_outputs({"z": out}, [6], SCHEMA)


class HalvingRuntime:
    """Raises out-of-memory above a row limit; records the sizes it ran."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ran: list[int] = []

    def predict(self, inputs: Mapping[str, BatchInput], parameters: Mapping[str, str]) -> RuntimeOutput:
        x = inputs["x"]
        assert isinstance(x, torch.Tensor)
        if x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError("too big")
        self.ran.append(int(x.shape[0]))
        return RuntimeOutput(outputs={"y": x + 1}, input_tokens=[1] * x.shape[0])


def test_out_of_memory_splits_recursively_and_keeps_order() -> None:
    runtime = HalvingRuntime(limit=3)
    x = torch.arange(10, dtype=torch.float32).reshape(10, 1)
    result = predict_splitting(runtime, {"x": x}, 10, {})
    assert torch.equal(result.outputs["y"], x + 1)
    assert sum(runtime.ran) == 10 and max(runtime.ran) <= 3
    assert list(result.input_tokens) == [1] * 10
    with pytest.raises(torch.cuda.OutOfMemoryError):
        predict_splitting(HalvingRuntime(limit=0), {"x": x[:1]}, 1, {})


def test_warmup_sizes() -> None:
    assert warmup_sizes(1) == [1]
    assert warmup_sizes(8) == [1, 2, 4, 8]
    assert warmup_sizes(12) == [1, 2, 4, 8, 12]


def test_latency_profile_moving_average() -> None:
    profile = LatencyProfile(smoothing=0.5)
    profile.record(8, 0.010)
    profile.record(8, 0.020)
    assert profile.seconds[8] == pytest.approx(0.015)
    assert [p.batch_size for p in profile.to_proto()] == [8]


def test_slot_state_machine() -> None:
    slot = ModelSlot(spec=node_pb2.ModelVersionSpec(model="m", version="1"), profile=LatencyProfile(0.2))
    assert slot.key == "m:1" and slot.state == SlotState.LOADING and slot.idle.is_set()
    slot.move(SlotState.SERVING)
    slot.begin()
    assert not slot.idle.is_set()
    slot.end()
    assert slot.idle.is_set()
    with pytest.raises(SlotTransitionError):
        slot.move(SlotState.LOADING)
    slot.move(SlotState.UNLOADING)
    assert slot.to_proto().state == node_pb2.VERSION_STATE_UNLOADING


def test_a_version_is_evictable_only_when_serving_idle_settled_and_unpinned() -> None:
    slot = ModelSlot(spec=node_pb2.ModelVersionSpec(model="m", version="1"), profile=LatencyProfile(0.2))
    start = slot.last_used
    assert slot.held(start + 60).busy, "still loading"
    slot.move(SlotState.SERVING)
    assert slot.held(start + 60, settle_s=30).evictable
    assert not slot.held(start + 10, settle_s=30).evictable, "not idle long enough: no thrash"
    slot.begin()
    assert not slot.held(start + 60).evictable, "running a batch"
    assert slot.held(start + 60).idle_s == 0.0
    slot.end()
    slot.pinned = True
    assert not slot.held(slot.last_used + 60).evictable, "a placement pins it"
    assert slot.to_proto().pinned and not slot.to_proto().evictable
