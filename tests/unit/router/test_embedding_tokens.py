"""Token arrays in /v1/embeddings read back into text with cl100k_base, bounded."""

from __future__ import annotations

import bpe_openai
import grpc
import pytest

from ferryman_server.router.doors.openai.embeddings.protocol import EmbeddingRequest
from ferryman_server.router.doors.openai.embeddings.serving import texts
from ferryman_server.router.doors.openai.embeddings.tokens import MAX_TOKEN_IDS
from ferryman_server.router.failures import RequestFailed

CL100K = bpe_openai.get_encoding("cl100k_base")


def read(value: object) -> list[str]:
    return texts(EmbeddingRequest(model="m", input=value))


def test_one_array_and_many_arrays_read_back_as_their_texts() -> None:
    words = ["Ferries cross rivers.", "héllo 😀 wörld"]
    assert read(CL100K.encode(words[0])) == words[:1]
    assert read([CL100K.encode(w) for w in words]) == words
    assert read(words) == words and read(words[0]) == words[:1]


def test_a_cut_inside_a_character_reads_as_a_replacement_not_an_error() -> None:
    ids = CL100K.encode("😀")
    assert len(ids) > 1
    assert read([ids[:1], ids]) == ["\ufffd", "😀"]


@pytest.mark.parametrize(
    "value",
    [
        [-1],
        [[1, -1]],
        [[]],
        [CL100K.max_token_value + 1],
        [100256],
        [10**30],
        [[1]] * 4097,
        [],
        [1] * (MAX_TOKEN_IDS + 1),
        [[1] * (MAX_TOKEN_IDS // 2 + 1)] * 2,
    ],
)
def test_ids_outside_the_vocabulary_and_unbounded_counts_are_refused(value: object) -> None:
    with pytest.raises(RequestFailed) as failed:
        read(value)
    status = failed.value.status
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert status.message.startswith("input: ") and len(status.message) < 200
