"""A release gate as a user writes one: the example models (small configurations), exported
and served by the embedded local Triton on CPU, checked against PyTorch."""

from pytest_triton import factories
from pytest_triton.models import ZOO, zoo_spec

# One instance per model: the examples' counts (5 MNIST, 2 text-recognition) are for their
# hardware, and every instance of a python-hosted model is a process of its own.
triton_repository = factories.repository([zoo_spec(name, instance_count=1) for name in ZOO])
