"""--triton-deployed: gate the models a running server already serves, as a staging service
runs them (model control none, poll or explicit): nothing uploaded or unloaded, each model
READY at its version and its served config the spec's, then the same parity and batching
proofs.

The servers are started here, outside the pytest run under test, from repositories this
module writes with the builder; in model control none three models, two of them deployed
wrongly on purpose; in poll and explicit mode the one good model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.config import ModelControl
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.base.urls import Endpoints
from pytest_triton.repository import pbtxt
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.served_config import config_differences
from pytest_triton.repository.signature import resolve_signature
from pytest_triton.repository.variants import plan_variants
from pytest_triton.server import LocalLauncher, ServerArgs

pytestmark = pytest.mark.triton

SPECS = """
import torch
from pytest_triton import DynamicBatching, ModelSpec

class Scored(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.lin.weight.copy_(torch.arange(12.0).reshape(3, 4) / 10)
            self.lin.bias.fill_(0.5)

    def forward(self, x):
        y = self.lin(x)
        return y, torch.argmax(y, dim=1)

def spec(name, **overrides):
    fields = dict(name=name, module=Scored, example_inputs=(torch.randn(4, 4),),
                  inputs=["x"], outputs=["y", "label"], max_batch_size=8,
                  dynamic_batching=DynamicBatching(max_queue_delay_microseconds=20000),
                  formats=["torchscript-trace"])
    fields.update(overrides)
    return ModelSpec(**fields)
"""
SERVED = ("scored", "scored_fp64", "scored_no_label")


def specs_module() -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(SPECS, namespace)
    return namespace


@pytest.fixture(scope="module")
def deployed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """A tritonserver in model control none serving three copies of one model, two of them
    with a served config that differs from the spec: a float64 output, a missing output."""
    root = tmp_path_factory.mktemp("deployed-repo")
    spec = specs_module()["spec"]
    repo = Repository(root, [spec(n, triton_name=n) for n in SERVED])  # type: ignore[operator]
    repo.plan(ServerTarget())
    repo.ensure_all()
    fp64 = pbtxt.read_config(root / "scored_fp64" / "config.pbtxt")
    fp64.output[0].data_type = mc.TYPE_FP64
    pbtxt.write_config(root / "scored_fp64", fp64)
    no_label = pbtxt.read_config(root / "scored_no_label" / "config.pbtxt")
    del no_label.output[1]
    pbtxt.write_config(root / "scored_no_label", no_label)
    args = ServerArgs(root, model_control_mode="none", startup_timeout_s=120)
    with LocalLauncher().start(args) as server:
        yield server.endpoints


def served_index(endpoints: Endpoints) -> list[tuple[str, str | None]]:
    client = httpclient.InferenceServerClient(endpoints.http)
    try:
        index = client.get_model_repository_index()
    finally:
        client.close()
    return sorted((m["name"], m.get("state")) for m in index)


def run(pytester: pytest.Pytester, endpoints: Endpoints, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--triton-url",
        endpoints.http,
        "--triton-deployed",
        *args,
        timeout=300,
    )


GATE_TESTS = """
from pytest_triton import assert_dynamic_batching

def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=4)

def test_batching(triton_model, triton_client):
    assert_dynamic_batching(triton_model.assert_batched_parity(triton_client, requests=8))
"""
"""The gate a user runs against a deployed model: parity, then the batching proof."""


def test_deployed_models_are_gated_as_served(
    pytester: pytest.Pytester, deployed_server: Endpoints
) -> None:
    pytester.makeconftest(
        SPECS
        + "\nfrom pytest_triton import factories\n"
        + "triton_repository = factories.repository([spec('scored'), spec('scored_fp64'),\n"
        + "    spec('scored_no_label'), spec('scored_v2', triton_name='scored', version=2)])\n"
    )
    pytester.makepyfile(test_gate=GATE_TESTS)
    result = run(pytester, deployed_server, "-v", "--triton-protocol", "http")
    out = result.stdout.str()
    result.assert_outcomes(passed=2, errors=6)  # the model fixture refuses each
    assert "test_parity[scored-torchscript-trace-deployed-http] PASSED" in out
    assert "test_batching[scored-torchscript-trace-deployed-http] PASSED" in out
    assert "output 'y' is TYPE_FP64 on the server, the spec exports TYPE_FP32" in out
    assert "output 'label' is missing on the server (it serves: y)" in out
    assert "deployed model 'scored' does not match its spec" in out
    assert "version 2 is not ready (another version is)" in out
    # nothing was uploaded or unloaded: the server still serves exactly its own models, READY
    assert served_index(deployed_server) == [(n, "READY") for n in SERVED]


@pytest.fixture(scope="module", params=["poll", "explicit"])
def mode_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endpoints]:
    """The good model alone, on a server in poll mode (loaded at start, as Kubernetes
    examples run it) or in explicit mode (loaded by its operator with --load-model)."""
    mode: ModelControl = request.param
    root = tmp_path_factory.mktemp(f"deployed-{mode}")
    spec = specs_module()["spec"]
    repo = Repository(root, [spec("scored", triton_name="scored")])  # type: ignore[operator]
    repo.plan(ServerTarget())
    repo.ensure_all()
    loaded = ("scored",) if mode == "explicit" else ()
    args = ServerArgs(root, model_control_mode=mode, load_models=loaded, startup_timeout_s=120)
    with LocalLauncher().start(args) as server:
        yield server.endpoints


def test_deployed_mode_gates_poll_and_explicit_servers(
    pytester: pytest.Pytester, mode_server: Endpoints
) -> None:
    pytester.makeconftest(
        SPECS
        + "\nfrom pytest_triton import factories\n"
        + "triton_repository = factories.repository([spec('scored')])\n"
    )
    pytester.makepyfile(test_gate=GATE_TESTS)
    result = run(pytester, mode_server, "-v", "--triton-protocol", "http")
    result.assert_outcomes(passed=2)
    # explicit mode would let the gate load or unload: it did neither
    assert served_index(mode_server) == [("scored", "READY")]


def test_deployed_needs_the_servers_address(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-deployed")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*--triton-deployed gates the models a running server*--triton-url*"]
    )


def test_a_spec_of_several_formats_is_refused_in_deployed_mode(
    pytester: pytest.Pytester, deployed_server: Endpoints
) -> None:
    pytester.makeconftest(
        SPECS
        + "\nfrom pytest_triton import factories\n"
        + "triton_repository = factories.repository([spec('scored', formats=None)])\n"
    )
    pytester.makepyfile(test_x="def test_x(triton_model): pass")
    result = run(pytester, deployed_server)
    assert result.ret != 0
    assert "a deployed server serves one format under the name 'scored'" in (
        result.stdout.str() + result.stderr.str()
    )


def test_config_differences_name_dims_batch_size_batching_and_backend() -> None:
    spec = specs_module()["spec"]
    onnx_server = ServerTarget(backends=frozenset({"onnxruntime"}), deployed=True)
    (variant,) = plan_variants([spec("s", formats=["onnx"])], (), onnx_server).variants  # type: ignore[operator]
    expected = pbtxt.model_config(variant, resolve_signature(variant.spec))
    served = json_format.MessageToDict(expected, preserving_proto_field_name=True)
    assert config_differences(variant, expected, served) == []
    served["max_batch_size"] = 4
    served["input"][0]["dims"] = ["5"]
    served["dynamic_batching"] = {"max_queue_delay_microseconds": "100"}
    served["platform"] = "pytorch_libtorch"
    assert config_differences(variant, expected, served) == [
        "max_batch_size is 4 on the server, the spec says 8",
        "input 'x' has dims [5] on the server, the spec exports [4]",
        "dynamic batching waits 100 us on the server, the spec says 20000 us "
        "(max_queue_delay_microseconds)",
        "the server runs it on pytorch_libtorch, the spec's format 'onnx' needs onnxruntime_onnx",
    ]
    del served["dynamic_batching"]
    assert "dynamic batching is off on the server, the spec asks for it" in config_differences(
        variant, expected, served
    )
