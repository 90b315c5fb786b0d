"""Full-size zoo models (the examples' sizes) served and checked against PyTorch (-m slow).

Minutes on a CPU and several GB of memory, so not part of the default run.
"""

from __future__ import annotations

import pytest

from pytest_triton import TritonClient, factories
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.session.deployment import ServedModel

pytestmark = [pytest.mark.slow, pytest.mark.triton]

full_repository = factories.repository(
    [zoo_spec(name, "full", instance_count=1, example_batch=2) for name in ZOO],
    formats=["torchscript-trace", "onnx"],
)
full_server = factories.server(repository="full_repository", protocol="grpc", startup_timeout=600)
full_client = factories.client(server="full_server")
full_model = factories.model(server="full_server")


def test_full_size_parity(full_model: ServedModel, full_client: TritonClient) -> None:
    full_model.assert_parity(full_client, batch_size=2)
