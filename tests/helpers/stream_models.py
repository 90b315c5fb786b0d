"""A stream model that goes wrong on purpose, built on the served stream model
(stream_model.py): its model.py followed by a subclass that, when a request's `fault`
parameter asks, breaks one step. The checks are proved against the real decoupled model with
one fault, and one test model (one python stub) serves every fault."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_triton.repository.stream import MODEL_SOURCE, StreamSpec, write_stream_model

CORRUPT_AT = 5
ERROR_AT = 3
FINAL_DELAY_S = 3.0
SLOW_TOKEN_S = 0.1

FAULTY = f"""

class TritonPythonModel(TritonPythonModel):
    # corrupt: one token wrong on the wire at position {CORRUPT_AT} (generation goes on from
    #   the right one); error: an error response at position {ERROR_AT}; no_final: every
    #   token, then silence (the final flag only after {FINAL_DELAY_S} s, so that the server
    #   still completes the request before it stops); slow: {SLOW_TOKEN_S} s per token.
    def _generate(self, request, sender):
        self.fault = json.loads(request.parameters() or "{{}}").get("fault", "")
        super()._generate(request, sender)

    def token(self, position, token):
        if self.fault == "corrupt" and position == {CORRUPT_AT}:
            return (token + 1) % self.vocab
        if self.fault == "error" and position == {ERROR_AT}:
            raise RuntimeError("injected failure at token {ERROR_AT}")
        if self.fault == "slow":
            import time
            time.sleep({SLOW_TOKEN_S})
        return token

    def finish(self, sender):
        if self.fault != "no_final":
            return super().finish(sender)
        import threading
        threading.Timer({FINAL_DELAY_S}, super().finish, (sender,)).start()
"""


def write_faulty(root: Path, spec: StreamSpec) -> str:
    """root/<spec name>_faulty, the spec's generator with faults on request; its name."""
    name = f"{spec.name}_faulty"
    write_stream_model(
        root, dataclasses.replace(spec, name=name, instances=1), MODEL_SOURCE.read_text() + FAULTY
    )
    return name
