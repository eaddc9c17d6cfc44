"""What bounds one generation (pure): its token limit and why reaching it ends it, and
where stop strings cut its streamed text."""

from __future__ import annotations

import pytest

from ferryman_server.gpu_node.generation.limits import OverBudget, StopText, completion_limit
from ferryman_server.gpu_node.generation.scheduler import FinishReason

CONTEXT = 100


def test_max_tokens_is_cut_to_the_context_then_to_the_budget() -> None:
    assert completion_limit(10, 20, 0, CONTEXT) == (20, FinishReason.LENGTH)
    assert completion_limit(90, 50, 0, CONTEXT) == (11, FinishReason.LENGTH), "context: 90 + 11 - 1"
    assert completion_limit(10, 50, 40, CONTEXT) == (30, FinishReason.QUOTA), "prompt counts in the budget"
    assert completion_limit(10, 20, 40, CONTEXT) == (20, FinishReason.LENGTH), "the budget leaves room"


def test_a_prompt_over_its_budget_or_the_context_is_refused() -> None:
    with pytest.raises(OverBudget):
        completion_limit(40, 5, 40, CONTEXT)
    with pytest.raises(ValueError, match="exceed the context"):
        completion_limit(CONTEXT + 1, 5, 0, CONTEXT)


def test_stop_strings_cut_the_text_and_hold_back_a_possible_start() -> None:
    stops = StopText(["</end>", "STOP"])
    assert stops.add("Hello <") == ("Hello ", False), "'<' may start '</end>'"
    assert stops.add("b>") == ("<b>", False), "it did not"
    assert stops.add(" and </e") == (" and ", False)
    assert stops.add("nd> more") == ("", True), "nothing after the stop string"
    plain = StopText([])
    assert plain.add("anything") == ("anything", False)
    tail = StopText(["STOP"])
    assert tail.add("ST") == ("", False)
    assert tail.flush() == "ST", "held text comes out when the generation ends otherwise"
