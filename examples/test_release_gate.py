"""Fails the release when a served variant stops answering like PyTorch."""

from pytest_triton import ServedModel, TritonClient


def test_served_model_matches_pytorch(
    triton_model: ServedModel, triton_client: TritonClient
) -> None:
    triton_model.assert_parity(triton_client, batch_size=4)


def test_concurrent_requests_are_answered_in_order(
    triton_model: ServedModel, triton_client: TritonClient
) -> None:
    stats = triton_model.assert_batched_parity(triton_client, requests=8)
    print(f"{triton_model.id} over {triton_client.protocol}: {stats.describe()}")
