"""Stateful models on the real bundled tritonserver: per-sequence parity over HTTP and gRPC for
the direct and oldest strategies, 16 interleaved sequences each checked against its own
reference, a model that mixes sequences failing by sequence and step, and bad sequences."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton import ConfigError, InferenceError, factories
from pytest_triton.client.sequence_client import SequenceClient
from pytest_triton.models import streaming_gru
from pytest_triton.parity.results import ParityResult
from pytest_triton.repository import pbtxt
from pytest_triton.repository.sequence_config import implicit_state, sequence_batching
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.served_sequences import ServedSequenceModel
from tests.helpers.locust_runs import LOCUSTFILES, Finished, run_locust
from tests.helpers.raw_models import write_python_directory
from tests.helpers.sequence_models import IDLE_US, buffer_gru_spec

pytestmark = pytest.mark.triton

sequence_repository = factories.repository([], scope="module")
sequence_server = factories.server(
    repository="sequence_repository", scope="module", launcher="local", model_control="explicit"
)
# Every model here waits IDLE_US (10 s) before dropping an idle sequence; the idle timeout
# itself is tested below, on a probe model of its own.
gru_direct = factories.sequence_model(
    streaming_gru.sequence_spec(strategy="direct", max_sequence_idle_microseconds=IDLE_US),
    server="sequence_server",
    scope="module",
)
gru_oldest = factories.sequence_model(
    streaming_gru.sequence_spec(
        strategy="oldest", max_queue_delay_microseconds=2000, max_sequence_idle_microseconds=IDLE_US
    ),
    server="sequence_server",
    scope="module",
)
buffer_gru = factories.sequence_model(buffer_gru_spec(), server="sequence_server", scope="module")


@pytest.fixture(params=["direct", "oldest"])
def gru(request: pytest.FixtureRequest) -> ServedSequenceModel:
    model: ServedSequenceModel = request.getfixturevalue(f"gru_{request.param}")
    return model


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_sequence_answers_as_the_module_stepped(
    gru: ServedSequenceModel, protocol: str
) -> None:
    check = gru.assert_sequence_parity(protocol, count=1, length=12, variation=0.0)  # type: ignore[arg-type]
    assert check.checked == 12
    assert "sequence parity ok" in check.describe()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sixteen_interleaved_sequences_each_match_their_own_reference(
    gru: ServedSequenceModel, protocol: str
) -> None:
    plans = gru.plan(16, id_range=(1000, 1016), length=6, variation=0.5, seed=3)
    lengths = {p.length for p in plans}
    assert len(lengths) > 1, "lengths should vary as --sequence-length-variation does"
    recorded: list[ParityResult] = []
    gru.deployment.listeners.append(recorded.append)
    try:
        check = gru.run(protocol, plans)  # type: ignore[arg-type]
    finally:
        gru.deployment.listeners.remove(recorded.append)
    check.assert_ok()
    assert check.checked == sum(p.length for p in plans)
    (result,) = recorded  # the gate report's row
    assert (result.check, result.protocol, result.requests) == (
        "sequence_parity",
        protocol,
        check.checked,
    )
    assert (
        result.ok
        and result.variant == f"streaming_gru-{gru.spec.strategy}-torchscript-script-hosted"
    )
    # the sequences really differ: state leaking between them would show
    finals = {p.sequence_id: check.expected[p.sequence_id][-1].tobytes() for p in plans}
    assert len(set(finals.values())) == 16


def test_a_model_that_mixes_sequences_fails_naming_sequence_and_step(
    buffer_gru: ServedSequenceModel,
) -> None:
    check = buffer_gru.run("grpc", buffer_gru.plan(16, length=6, seed=1))
    assert not check.ok
    with pytest.raises(AssertionError) as failure:
        check.assert_ok()
    message = str(failure.value)
    assert "sequence parity FAILED: model 'buffer_gru_direct'" in message
    first = re.search(r"sequence (\d+): step (\d+) of (\d+) differs", message)
    assert first is not None, message
    sequence_id, step = int(first.group(1)), int(first.group(2))
    assert check.mismatches[sequence_id].step == step
    assert "max abs diff" in message or "max_abs" in message or "FAILED SCORES" in message


def test_the_same_module_alone_in_process_passes(buffer_gru: ServedSequenceModel) -> None:
    """The broken model's reference is itself consistent: only serving mixes sequences."""
    plan = buffer_gru.plan(1, length=5)[0]
    first = buffer_gru.reference.outputs(plan.inputs)
    again = buffer_gru.reference.outputs(plan.inputs)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_more_sequences_than_the_batcher_holds_is_refused(gru_direct: ServedSequenceModel) -> None:
    with pytest.raises(ConfigError, match=r"17 interleaved sequences .* serves 16 at once"):
        gru_direct.run("http", gru_direct.plan(17, length=2))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_sequences_are_clear_errors_and_the_server_still_serves(
    gru_direct: ServedSequenceModel, protocol: str
) -> None:
    x = {"FRAME": np.zeros((1, 16), np.float32)}
    with SequenceClient(gru_direct.url(protocol), protocol) as client:  # type: ignore[arg-type]
        with pytest.raises(InferenceError, match=r"sequence 77, step 0: .*START"):
            client.step(gru_direct.name, x, 77, start=False, end=False, step=0)
        with pytest.raises(InferenceError, match=r"sequence 0, step 0: .*(correlation|sequence)"):
            client.step(gru_direct.name, x, 0, start=True, end=False, step=0)
    gru_direct.assert_sequence_parity(protocol, count=2, length=3)  # type: ignore[arg-type]


STATE_PROBE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            state = pb_utils.get_input_tensor_by_name(r, "STATE_IN").as_numpy()
            x = pb_utils.get_input_tensor_by_name(r, "FRAME").as_numpy()
            new = state + x
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SCORES", new), pb_utils.Tensor("STATE_OUT", new)]))
        return out
"""


def _load_probe(server: Deployment, name: str, idle_us: int) -> str:
    """A numpy-only python model (it loads in a second, no torch) with Triton's implicit state
    (`state` block, initial state zeros) and the given sequence idle timeout."""
    spec = streaming_gru.sequence_spec(
        initial_state=torch.zeros(1), max_sequence_idle_microseconds=idle_us
    )
    directory = write_python_directory(
        server.repository.root,
        name,
        STATE_PROBE,
        [("FRAME", mc.TYPE_FP32, [1])],
        [("SCORES", mc.TYPE_FP32, [1])],
    )
    config = pbtxt.read_config(directory / "config.pbtxt")
    config.sequence_batching.CopyFrom(sequence_batching(spec))
    config.sequence_batching.state.append(implicit_state(spec))
    pbtxt.write_config(directory, config)
    server.client("http").load_model(name)
    return name


@pytest.fixture(scope="module")
def state_probe(sequence_server: Deployment) -> str:
    """The probe with the suite's 10 s idle timeout: its three steps never race the batcher."""
    return _load_probe(sequence_server, "state_probe", IDLE_US)


@pytest.fixture(scope="module")
def idle_probe(sequence_server: Deployment) -> str:
    """The probe with a 0.3 s idle timeout, for the one test that waits past it."""
    return _load_probe(sequence_server, "idle_probe", 300_000)


def _probe(url: str, model: str, sequence_id: int, steps: int) -> list[float]:
    answers = []
    with SequenceClient(url, "http") as client:
        for step in range(steps):
            out = client.step(
                model,
                {"FRAME": np.ones((1, 1), np.float32)},
                sequence_id,
                start=step == 0,
                end=step == steps - 1,
                step=step,
            )
            answers.append(float(out["SCORES"].ravel()[0]))
    return answers


def test_the_bundled_python_backend_does_not_carry_implicit_state(
    sequence_server: Deployment, state_probe: str
) -> None:
    """Why the hosted model keeps state itself: with a `state` block the python backend of
    Triton 2.51 hands the model the initial state on every request, whatever it returned
    (a backend that carries it would answer 1, 2, 3 here)."""
    assert _probe(sequence_server.server.endpoints.http, state_probe, 9, 3) == [1.0, 1.0, 1.0]


def test_a_sequence_idle_past_the_batcher_timeout_is_a_clear_error(
    sequence_server: Deployment, idle_probe: str
) -> None:
    url = sequence_server.server.endpoints.http
    x = {"FRAME": np.ones((1, 1), np.float32)}
    with SequenceClient(url, "http") as client:
        client.step(idle_probe, x, 5, start=True, end=False, step=0)
        time.sleep(1.0)  # the probe's max_sequence_idle_microseconds is 0.3 s
        with pytest.raises(InferenceError, match=r"sequence 5, step 1: .*START"):
            client.step(idle_probe, x, 5, start=False, end=True, step=1)
    # The server still serves the sequence id: a one-step sequence (start and end together)
    # leaves no gap for the 0.3 s timeout to fall in, however loaded the machine.
    assert _probe(url, idle_probe, 5, 1) == [1.0]


def _locust(locustfile: Path, host: str, tmp_path: Path) -> Finished:
    return run_locust(
        locustfile,
        "--headless",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "3s",
        "--host",
        host,
        "--triton-check-every",
        "1",
        tmp_path=tmp_path,
        timeout=120,
    )


@pytest.mark.load
def test_locust_sequence_users_pass_with_every_answer_checked(
    gru_direct: ServedSequenceModel, tmp_path: Path
) -> None:
    """The zoo's locustfile against this module's server (its embedded server is the same
    model; see docs/sequences.md): 8 users, each owning its sequences."""
    run = _locust(LOCUSTFILES / "streaming_gru.py", f"grpc://{gru_direct.url('grpc')}", tmp_path)
    assert run.code == 0, run.tail()
    assert "RESULT: PASS" in run.stdout, run.tail()
    assert run.report is not None
    measured = run.report["measured"]
    assert measured["requests"] > 20 and measured["failures"] == 0, measured
    checked = re.search(r"(\d+) answers of stateful sequences checked", run.output)
    assert checked is not None, run.tail()
    assert int(checked.group(1)) >= measured["requests"], (checked.group(0), measured)
    assert "0 sequences answered wrongly" in run.output
    (server,) = run.report["server"]
    assert server["model"] == "streaming_gru_direct"
    assert "Batch size histogram" in run.stdout
