"""A stateful model served in a Deployment, and sequences sent to it with every answer checked.

`serve_sequence_model` writes the model into the deployment's repository (or uploads it to a
server that does not read our directory) and loads it. `ServedSequenceModel.run` sends
sequences interleaved: in each round every sequence still running sends its next request, all
at once from a pool of threads, so that K sequences are in flight together and the batcher
sees them side by side; every answer is checked against its own sequence's reference.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pytest_triton.base.errors import ConfigError, InferenceError, ModelLoadError
from pytest_triton.client.sequence_client import SequenceClient
from pytest_triton.client.wire.request import Protocol
from pytest_triton.parity.compare import Tolerance
from pytest_triton.parity.results import NO_TRANSPORT, ParityResult
from pytest_triton.parity.sequence_parity import SequenceCheck
from pytest_triton.repository import pbtxt
from pytest_triton.repository.sequence import (
    SequencePlan,
    SequenceReference,
    SequenceSpec,
    plan_sequences,
)
from pytest_triton.repository.sequence_config import model_files, write_sequence_model
from pytest_triton.session.deployment import Deployment


@dataclass
class ServedSequenceModel:
    """A stateful model loaded on a deployment's server."""

    spec: SequenceSpec
    deployment: Deployment
    reference: SequenceReference = field(init=False)

    def __post_init__(self) -> None:
        self.reference = SequenceReference(self.spec)

    @property
    def name(self) -> str:
        return self.spec.model_name

    def url(self, protocol: Protocol) -> str:
        return self.deployment.server.endpoints.url(protocol)

    def plan(self, count: int, **kwargs: object) -> list[SequencePlan]:
        """Sequences to send (see repository.sequence.plan_sequences for the keywords)."""
        return plan_sequences(self.spec, count, **kwargs)  # type: ignore[arg-type]

    def run(
        self,
        protocol: Protocol,
        plans: Sequence[SequencePlan],
        *,
        tolerance: Tolerance | None = None,
    ) -> SequenceCheck:
        """Send every planned sequence, interleaved, checking each answer; the check says
        which sequences (and first steps) went wrong. A rejected request raises. Sequences
        advance in rounds, so all of them must fit in the batcher at once: a sequence left in
        its backlog would wait for one that waits for the next round."""
        capacity = self.spec.sequences_in_flight
        if len(plans) > capacity:
            raise ConfigError(
                f"{len(plans)} interleaved sequences do not fit model {self.name!r}: its "
                f"{self.spec.strategy} sequence batcher serves {capacity} at once (direct: "
                "max_batch_size x instance_count slots; oldest: max_candidate_sequences); "
                "send fewer sequences or raise those settings in the SequenceSpec"
            )
        check = SequenceCheck(
            self.name,
            self.spec.output_name,
            self.reference.expected(plans),
            tolerance,
            context=f", protocol {protocol!r}, strategy {self.spec.strategy!r}",
        )
        local = threading.local()
        clients: list[SequenceClient] = []
        lock = threading.Lock()

        def send(plan: SequencePlan, step: int) -> None:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = SequenceClient(
                    self.url(protocol), protocol, timeout_s=self.deployment.timeout_s
                )
                with lock:
                    clients.append(client)
            served = client.step(
                self.name,
                {self.spec.input_name: plan.inputs[step]},
                plan.sequence_id,
                start=step == 0,
                end=step == plan.length - 1,
                step=step,
            )
            check.check(plan.sequence_id, step, served)

        try:
            with ThreadPoolExecutor(max(1, len(plans)), "pytest-triton-sequence") as pool:
                for step in range(max((p.length for p in plans), default=0)):
                    live = [p for p in plans if p.length > step]
                    for future in [pool.submit(send, p, step) for p in live]:
                        future.result()
        finally:
            for client in clients:
                client.close()
            self._record(protocol, check)
        return check

    def _record(self, protocol: Protocol, check: SequenceCheck) -> None:
        """The check as a ParityResult for the deployment's listeners (the gate report's
        parity table: one row per model, strategy and protocol)."""
        reports = check.reports()
        if not reports:
            return
        spec = self.spec
        self.deployment.record(
            ParityResult(
                variant=f"{spec.name}-{spec.strategy}-{spec.fmt}-hosted",
                model=spec.name,
                triton_model=self.name,
                format=spec.fmt,
                precision="fp32",
                backend="python",
                protocol=protocol,
                transport=NO_TRANSPORT,
                check="sequence_parity",
                batch_size=1,
                requests=check.checked,
                reports=reports,
                server=self.deployment.server.endpoints.http,
            )
        )

    def assert_sequence_parity(
        self, protocol: Protocol, count: int = 1, length: int = 8, **kwargs: object
    ) -> SequenceCheck:
        """`count` sequences of about `length` requests, interleaved; raises AssertionError
        naming each sequence and the first step whose answer differs."""
        check = self.run(protocol, self.plan(count, length=length, **kwargs))
        check.assert_ok()
        return check


def serve_sequence_model(deployment: Deployment, spec: SequenceSpec) -> ServedSequenceModel:
    """Write (or upload) the stateful model and load it; a failure names the model and the
    server's reason, with its log."""
    server = deployment.server
    server.check_alive()
    directory = write_sequence_model(spec, deployment.repository.root)
    client = deployment.client("http")
    try:
        if deployment.serves_repository_directly:
            client.load_model(spec.model_name)
        else:
            config = pbtxt.to_json(pbtxt.read_config(directory / "config.pbtxt"))
            client.load_model(spec.model_name, config=config, files=model_files(directory))
    except InferenceError as exc:
        server.check_alive()
        raise ModelLoadError(spec.model_name, exc.server_message, server.log_tail()) from None
    return ServedSequenceModel(spec, deployment)
