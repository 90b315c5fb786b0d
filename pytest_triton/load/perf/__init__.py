"""`triton-perf`: a perf_analyzer-like sweep over concurrency and batch size, with Locust
users run in library mode; its points, reports and latency-bound search."""

from pytest_triton.base.moved import forwarder

__getattr__ = forwarder(__name__)  # the names of the module this package replaced (0.1.0)
