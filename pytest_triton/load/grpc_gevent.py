"""gRPC under gevent.

Without `grpc.experimental.gevent.init_gevent()` a blocking gRPC call never yields to gevent's
hub: a Locust process sends one request at a time whatever the user count (no dynamic batching
can happen) and stops answering its SIGTERM handler while a call waits. It must run after
gevent's monkey patching and before the process's first gRPC channel; forked --processes
children inherit it.
"""

from __future__ import annotations

_initialized = False


def init() -> None:
    """Switch gRPC to gevent-cooperative I/O, once per process."""
    global _initialized
    if _initialized:
        return
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        raise RuntimeError(
            "gRPC's gevent mode needs gevent's monkey patching first: import locust (which "
            "patches the process) before pytest_triton.load.users")
    import grpc.experimental.gevent

    grpc.experimental.gevent.init_gevent()
    _initialized = True
