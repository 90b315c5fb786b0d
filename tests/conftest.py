"""One server for the plugin's own served tests: every zoo model, small configuration; and a
numpy-2 interpreter for the stub-environment tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_triton import DynamicBatching, factories
from pytest_triton.models import ZOO, zoo_spec

# The examples' serving settings, except: one instance each (a 2-core machine cannot host the
# examples' five MNIST or two text-recognition instances per format) and a 20 ms queue delay.
# The examples' delays (0-5 ms) tune GPU throughput; proving that batching happens needs a
# window longer than it takes this client to put eight requests in flight, or the test
# would depend on scheduling luck.
PROVABLE = DynamicBatching(max_queue_delay_microseconds=20_000)
zoo_repository = factories.repository(
    [zoo_spec(name, instance_count=1, dynamic_batching=PROVABLE) for name in ZOO]
)
zoo_server = factories.server(repository="zoo_repository")
zoo_client = factories.client(server="zoo_server")
zoo_model = factories.model(server="zoo_server")


@pytest.fixture(scope="session")
def numpy2_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a throwaway venv whose python3 has numpy >= 2."""
    from tests.helpers.interpreters import make_numpy2_venv

    return make_numpy2_venv(tmp_path_factory.mktemp("interpreters"))
