"""gRPC's fork handlers turned off by the front ends (the pytest plugin, the Locust users, the
command lines) before anything of theirs imports grpc; importing `pytest_triton` changes no
environment variable.

Why: grpcio's fork handlers (grpcio 1.81 and later, grpc/grpc#43055) restart gRPC's poller in
each child a process with a live channel forks, and Popen then closes that poller's
descriptor before exec: about one child in 60 aborted with "Epoll1Poller ... epoll_wait
error: Bad file descriptor" (a tritonserver that died "before it was ready"). Every child
pytest-triton starts execs at once, and none uses gRPC across a fork. grpc reads the variable
when it is imported, so it is set by the first module of each front end. A value set by the
person running it is left alone. tests/client/test_client.py pins it.
"""

import os

VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"


def without_grpc_fork_handlers() -> None:
    """Off for this process and its children, unless the environment already says."""
    os.environ.setdefault(VARIABLE, "false")
