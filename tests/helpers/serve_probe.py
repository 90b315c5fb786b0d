"""`python -m tests.helpers.serve_probe ADDRESS`: the probe model on an embedded tritonserver
listening on ADDRESS, a server started outside the run under test (on a test host). Prints
`SERVING <http host:port> <grpc host:port> <model>` when ready; SIGTERM stops it and leaves
nothing behind."""

from __future__ import annotations

import signal
import sys
import threading

from pytest_triton.base.config_resolution import resolve
from pytest_triton.load.runner.embedded import EmbeddedModel, EmbeddedServer
from tests.helpers.probe_models import probe_spec


def main(address: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = resolve().with_overrides({"serve_address": address})
    model = EmbeddedModel(probe_spec, "torchscript-trace")
    server = EmbeddedServer([model], config=config)
    try:
        endpoints = server.start()
        print(f"SERVING {endpoints.http} {endpoints.grpc} {server.model_names()[0]}", flush=True)
        stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1])
