"""Fails the release when the MNIST pipeline (pre-processing, model, post-processing) stops
answering like its steps composed in PyTorch, or a composing model stops batching."""

import pytest

from pytest_triton import TritonClient
from pytest_triton.session.served_pipeline import ServedPipeline


@pytest.mark.parametrize("digits", ["ensemble", "bls", "bls-async"], indirect=True)
def test_pipeline_matches_pytorch(digits: ServedPipeline, triton_client: TritonClient) -> None:
    digits.assert_parity(triton_client, batch_size=4)


@pytest.mark.parametrize("digits", ["ensemble", "bls-async"], indirect=True)
def test_every_step_batches(digits: ServedPipeline, triton_client: TritonClient) -> None:
    for step, stats in digits.assert_step_batching(triton_client, requests=8).items():
        print(f"{digits.id} {step} over {triton_client.protocol}: {stats.describe()}")
