"""Servers for the round-trip micro-benchmarks: small zoo models, every CPU format.

Dynamic batching is off here: a lone request would otherwise wait out the queue delay, and the
benchmark would time the batcher's timer instead of the round trip. Not in the default test
run (pyproject's testpaths is tests/): run `pytest benchmarks` explicitly.
"""

from __future__ import annotations

from pytest_triton import factories
from pytest_triton.models import zoo_spec

BENCH_MODELS = ("mnist", "dlrm")

bench_repository = factories.repository(
    [zoo_spec(name, instance_count=1, dynamic_batching=None) for name in BENCH_MODELS]
)
bench_server = factories.server(repository="bench_repository")
bench_client = factories.client(server="bench_server")
bench_model = factories.model(server="bench_server")
