"""The pytest entry point (`pytest11: triton`): options and ini keys from the settings table,
default fixtures, parametrization, failure reports, and the gate report's pytest side.

Rule: a front end; imports any layer below, never `load` (locust patches the process with
gevent) nor `cli`. pytest finds the hooks and fixtures as this module's attributes.
"""

from pytest_triton.base.grpc_fork import without_grpc_fork_handlers

without_grpc_fork_handlers()  # before the hooks import grpc (base/grpc_fork.py says why)

from pytest_triton.plugin.hooks import (  # noqa: E402
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_report_header,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_sessionstart,
    pytest_unconfigure,
    triton_client,
    triton_config,
    triton_model,
    triton_repository,
    triton_server,
)

__all__ = [
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_runtest_makereport",
    "pytest_sessionstart",
    "pytest_unconfigure",
    "triton_client",
    "triton_config",
    "triton_model",
    "triton_repository",
    "triton_server",
]
