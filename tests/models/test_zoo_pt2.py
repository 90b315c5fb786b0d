"""PyTorch 2's deployment formats served by the real bundled server: every zoo model (small)
as a torch.export program and as an AOTInductor package, python-hosted, checked against
eager PyTorch over HTTP and gRPC (with and without system shared memory), single requests
and dynamically batched ones.

torch-export runs in the default suite (an export takes 1-3 s a model). AOTInductor compiles
C++: on this project's 2-core machine, each compile in a fresh work directory (as the
exporter runs it), DLRM small took 44 s and BERT small 36 s on a quiet machine; the seven zoo
models took 21 minutes at a load average of 8 (2-4 minutes a ResNe(X)t, text_recognition 4),
so its zoo parity is `-m slow` (a second run restores the packages from the export cache);
tests/repository/test_pt2_exports.py compiles and serves a tiny module in the default run.
torch.export captures every zoo model, and both formats pass at fp32's default tolerances
(parity/compare.py).
"""

from __future__ import annotations

import pytest

from pytest_triton import ModelSpec, TritonClient, factories
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.session.deployment import Deployment, ServedModel
from tests.conftest import PROVABLE

pytestmark = pytest.mark.triton


def _specs(fmt: str) -> list[ModelSpec]:
    return [
        zoo_spec(name, instance_count=1, dynamic_batching=PROVABLE, formats=[fmt]) for name in ZOO
    ]


export_repository = factories.repository(_specs("torch-export"), formats=["torch-export"])
export_server = factories.server(repository="export_repository")
export_client = factories.client(
    server="export_server", protocols=["http", "grpc"], shared_memory=["none", "system"]
)
export_model = factories.model(server="export_server")

aoti_repository = factories.repository(_specs("aoti"), formats=["aoti"])
aoti_server = factories.server(repository="aoti_repository")
aoti_client = factories.client(
    server="aoti_server", protocols=["http", "grpc"], shared_memory=["none", "system"]
)
aoti_model = factories.model(server="aoti_server")


def test_every_zoo_model_is_served_as_torch_export(export_server: Deployment) -> None:
    """No zoo model is left out or planned away: each has its torch-export variant."""
    served = {variant.id for variant in export_server.repository.variants}
    assert served == {f"{name}-torch-export-hosted" for name in ZOO}
    assert not export_server.repository.unavailable


def test_torch_export_parity(export_model: ServedModel, export_client: TritonClient) -> None:
    assert export_model.variant.id.endswith("-torch-export-hosted")
    export_model.assert_parity(export_client, batch_size=3)
    export_model.assert_batched_parity(export_client, requests=6, seed=3)


@pytest.mark.slow
def test_aoti_parity(aoti_model: ServedModel, aoti_client: TritonClient) -> None:
    assert aoti_model.variant.id.endswith("-aoti-hosted")
    aoti_model.assert_parity(aoti_client, batch_size=3)
    aoti_model.assert_batched_parity(aoti_client, requests=6, seed=3)
