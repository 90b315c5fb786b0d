"""A release gate as a user writes one: the example models (small configurations), exported
and served by the embedded local Triton on CPU, checked against PyTorch."""

import pytest

from pytest_triton import factories
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.models.pipelines import mnist_pipeline

# One instance per model: the examples' counts (5 MNIST, 2 text-recognition) are for their
# hardware, and every instance of a python-hosted model is a process of its own.
# ... and MNIST with its pre- and post-processing as a pipeline (ensemble and BLS models).
triton_repository = factories.repository(
    [zoo_spec(name, instance_count=1) for name in ZOO], pipelines=[mnist_pipeline()]
)
digits = factories.pipeline("mnist_pipeline")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tune gate", "the triton-tune gate (examples/test_tune_gate.py)")
    group.addoption(
        "--tune-gate",
        action="store_true",
        help="also run the tuning gate: a triton-tune search on this session's server (minutes)",
    )
    group.addoption("--tune-budget", default="600", help="its time budget in seconds")
    group.addoption(
        "--tune-within",
        default="10",
        help="the share (percent) the committed config may fall short of the best",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tune: the tuning gate; runs only with --tune-gate")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tuning gate is opt-in: it takes minutes, the rest of the gate seconds."""
    if config.getoption("tune_gate"):
        return
    skip = pytest.mark.skip(reason="the tuning gate takes minutes: run it with --tune-gate")
    for item in items:
        if item.get_closest_marker("tune"):
            item.add_marker(skip)
