"""The release gate of a stateful model: the zoo's streaming GRU behind Triton's sequence
batcher (direct and oldest strategies), 16 interleaved sequences over HTTP and gRPC, every
answer equal to the module stepped from its initial state on that sequence's own inputs."""

import pytest

from pytest_triton import ServedSequenceModel, factories
from pytest_triton.models import streaming_gru

gru_direct = factories.sequence_model(streaming_gru.sequence_spec(strategy="direct"))
gru_oldest = factories.sequence_model(streaming_gru.sequence_spec(strategy="oldest"))


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_streaming_gru_sequences(
    request: pytest.FixtureRequest, strategy: str, protocol: str
) -> None:
    model: ServedSequenceModel = request.getfixturevalue(f"gru_{strategy}")
    model.assert_sequence_parity(protocol, count=16, length=10)  # type: ignore[arg-type]
