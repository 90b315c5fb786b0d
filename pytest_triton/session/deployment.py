"""A running server plus the repository it serves: loads variants on demand, hands out clients.

ServedModel is what a test holds: one variant on one server, with the native reference and
the parity checks at hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from pytest_triton.accuracy.check import IN_FLIGHT, measure_accuracy
from pytest_triton.accuracy.metrics import Metric
from pytest_triton.accuracy.outcome import AccuracyResult, asserting
from pytest_triton.base import setup_steps
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import (
    ConfigError,
    DeployedModelError,
    InferenceError,
    ModelLoadError,
    ParityNotApplicable,
)
from pytest_triton.base.formats import REDUCED_PRECISIONS
from pytest_triton.base.urls import parse_url
from pytest_triton.client.request_path import choose
from pytest_triton.client.stats import ModelStats, StatsWindow
from pytest_triton.client.triton_client import PROTOCOLS, Protocol, Transport, TritonClient
from pytest_triton.parity.compare import ParityReport, Tolerance, compare_outputs
from pytest_triton.parity.results import Check, ParityResult, transport_of
from pytest_triton.repository import pbtxt
from pytest_triton.repository.builder import Repository
from pytest_triton.repository.served_config import config_differences
from pytest_triton.repository.variants import Variant
from pytest_triton.server.launcher import RunningServer, load_failures

ResultListener = Callable[[ParityResult | AccuracyResult], None]


class Deployment:
    """One server session: the running server, its repository, and a client per protocol."""

    def __init__(
        self,
        server: RunningServer,
        repository: Repository,
        *,
        timeout_s: float = 120.0,
        output_shared_memory_size: int = 100 * 1024,
        replicas: Sequence[str] = (),
    ) -> None:
        self.server = server
        self.repository = repository
        self.replicas = tuple(replicas)  # HTTP URLs of the replicas behind the server's address
        self._replica_clients: list[TritonClient] = []
        self.timeout_s = timeout_s
        self.output_shared_memory_size = output_shared_memory_size
        self._clients: dict[tuple[str, str], TritonClient] = {}
        self._loaded: set[str] = set()
        self._lock = threading.RLock()
        self.listeners: list[ResultListener] = []  # told of every check's result

    def record(self, result: ParityResult | AccuracyResult) -> None:
        for listener in list(self.listeners):
            listener(result)

    def check_fields(
        self, client: TritonClient, check: Check, batch_size: int, reports: list[ParityReport]
    ) -> dict[str, Any]:
        """A ParityResult's fields that say how and where a check ran, the same for a
        variant's checks and a pipeline's: the client's protocol and transport, the check and
        its requests, this server and its numerics."""
        return {
            "protocol": client.protocol,
            "transport": transport_of(client),
            "check": check,
            "batch_size": batch_size,
            "requests": len(reports),
            "reports": tuple(reports),
            "server": self.server.endpoints.http,
            "numerics": self.repository.target.numerics,
        }

    def describe(self) -> dict[str, Any]:
        """The server as a report names it: launcher, endpoints, Triton's version (from the
        server metadata), backends and device."""
        server = self.server
        info: dict[str, Any] = {
            "launcher": server.launcher,
            "http": server.endpoints.http,
            "grpc": server.endpoints.grpc,
            "backends": sorted(server.backends),
            "device": "GPU" if server.gpu else "CPU",
            "image": getattr(getattr(server, "settings", None), "image", None),
            "model_control": server.model_control_mode,
            "request_paths": {p: asdict(choose(p, "none")) for p in PROTOCOLS},
        }
        try:
            metadata = self.client("http").server_metadata()
            info["tritonserver_version"] = metadata.get("version")
            info["extensions"] = list(metadata.get("extensions", []))
        except Exception as exc:  # a dead server must not hide the rest of the report
            info["tritonserver_version"] = None
            info["metadata_error"] = str(exc).splitlines()[0] if str(exc) else repr(exc)
        return info

    def client(self, protocol: Protocol, shared_memory: Transport = "none") -> TritonClient:
        """The deployment's client for a protocol and transport (made once; a transport the
        server cannot use raises ConfigError saying why)."""
        key = (protocol, shared_memory)
        with self._lock:
            if key not in self._clients:
                endpoints = self.server.endpoints
                self._clients[key] = TritonClient(
                    endpoints.url(protocol),
                    protocol,
                    timeout_s=self.timeout_s,
                    server=self.server,
                    shared_memory=shared_memory,
                    output_shared_memory_size=self.output_shared_memory_size,
                    security=self.server.security.for_protocol(protocol in endpoints.tls),
                )
            return self._clients[key]

    def replica_clients(self) -> list[TritonClient]:
        """A statistics client per replica (none without --triton-replicas)."""
        with self._lock:
            if self.replicas and not self._replica_clients:
                self._replica_clients = [
                    TritonClient(
                        parse_url(url)[1],
                        "http",
                        timeout_s=self.timeout_s,
                        security=self.server.security.for_protocol(parse_url(url)[0] == "https"),
                    )
                    for url in self.replicas
                ]
            return list(self._replica_clients)

    @property
    def serves_repository_directly(self) -> bool:
        """Local and container servers read our directory; external ones get uploads."""
        return self.server.repository_path is not None

    def load(self, variant: Variant) -> None:
        """Export (if needed) and load a variant once; a failure names the model and reason."""
        with self._lock:
            if self.server.deployed:  # one served name may be two specs (two versions)
                if variant.id not in self._loaded:
                    self._check_deployed(variant)
                    self._loaded.add(variant.id)
                return
            if variant.model_name in self._loaded:
                return
            self.server.check_alive()  # a dead server says so before a minute of export
            self.repository.ensure(variant)
            self.server.check_alive()
            client = self.client("http")
            started = time.perf_counter()
            try:
                if self.server.model_control_mode == "explicit":
                    if self.serves_repository_directly:
                        client.load_model(variant.model_name)
                    else:
                        config = pbtxt.to_json(self.repository.config(variant))
                        client.load_model(
                            variant.model_name, config=config, files=self.repository.files(variant)
                        )
                elif not client.is_model_ready(variant.model_name):
                    raise InferenceError(variant.model_name, "http", "model is not ready")
            except InferenceError as exc:
                self.server.check_alive()
                reason = exc.server_message
                for model, logged in load_failures(self.server.log_text()):
                    if model == variant.model_name:
                        reason = logged
                if not self.serves_repository_directly and "explicit" not in reason:
                    reason += (
                        " (an external server must run with --model-control-mode="
                        "explicit for pytest-triton to upload models)"
                    )
                raise ModelLoadError(variant.model_name, reason, self.server.log_tail()) from None
            self._loaded.add(variant.model_name)
            setup_steps.say(f"loaded {variant.id} in {time.perf_counter() - started:.1f}s")

    def load_front(
        self,
        name: str,
        config: Callable[[], ModelConfig],
        files: Callable[[], dict[str, bytes]],
    ) -> None:
        """Load, once, a model the repository holds beside its variants (a pipeline's
        ensemble or BLS model, whose steps are loaded first); a failure names the model."""
        with self._lock:
            if name in self._loaded:
                return
            client = self.client("http")
            try:
                if self.server.model_control_mode == "explicit":
                    if self.serves_repository_directly:
                        client.load_model(name)
                    else:
                        client.load_model(name, config=pbtxt.to_json(config()), files=files())
                elif not client.is_model_ready(name):
                    raise InferenceError(name, "http", "model is not ready")
            except InferenceError as exc:
                self.server.check_alive()
                reason = exc.server_message
                for model, logged in load_failures(self.server.log_text()):
                    if model == name:
                        reason = logged
                raise ModelLoadError(name, reason, self.server.log_tail()) from None
            self._loaded.add(name)

    def _check_deployed(self, variant: Variant) -> None:
        """A deployed model is READY at the spec's version and serves the spec's config."""
        client = self.client("http")
        name, version = variant.model_name, str(variant.spec.version)
        if not client.is_model_ready(name, version):
            ready = client.is_model_ready(name)
            raise DeployedModelError(
                name,
                [
                    f"version {version} is not ready (another version is)"
                    if ready
                    else f"it is not READY on {self.server.endpoints.http} (not loaded, still "
                    "loading, or failed: the server's log says which)"
                ],
            )
        problems = config_differences(
            variant, self.repository.config(variant), client.model_config(name)
        )
        if problems:
            raise DeployedModelError(name, problems)

    def serve_versions(self, variant: Variant, versions: Sequence[int]) -> None:
        """Serve exactly `versions` of a loaded variant's model (Repository.add_version put
        them beside it): a load with a config whose version_policy names them. Triton loads
        the versions it lacks before it unloads the others; requests without a version go
        to the highest version ready."""
        if self.server.deployed or self.server.model_control_mode != "explicit":
            raise ConfigError(
                f"{variant.model_name!r}: versions are changed by loads in explicit model "
                "control on a server pytest-triton loads models into"
            )
        config = pbtxt.to_json(self.repository.versions_config(variant, versions))
        files = None if self.serves_repository_directly else self.repository.files(variant)
        try:
            self.client("http").load_model(variant.model_name, config=config, files=files)
        except InferenceError as exc:
            self.server.check_alive()
            raise ModelLoadError(
                variant.model_name,
                f"serving versions {list(versions)}: {exc.server_message}",
                self.server.log_tail(),
            ) from None

    def unload(self, variant: Variant) -> None:
        """Unload a variant this deployment loaded (a deployed server's models stay)."""
        with self._lock:
            if not self.server.deployed:
                self.client("http").unload_model(variant.model_name)
            self._loaded.discard(variant.model_name)

    def owns(self, value: object) -> bool:
        """Whether a fixture value belongs to this deployment (for failure reports)."""
        return (
            value is self
            or getattr(value, "deployment", None) is self
            or any(value is c for c in self._clients.values())
        )

    def model(self, key: str | Variant) -> ServedModel:
        """The served variant by test id (mnist-onnx-hosted) or Triton model name
        (mnist_onnx), loaded on first use."""
        variant = key if isinstance(key, Variant) else self.repository.variant(key)
        self.load(variant)
        return ServedModel(variant, self)

    def close_clients(self) -> None:
        """Close every client handed out (their shared memory goes with them); later calls of
        client() make new ones."""
        with self._lock:
            for client in [*self._clients.values(), *self._replica_clients]:
                # closing a client of a dead server must not mask teardown
                with contextlib.suppress(Exception):
                    client.close()
            self._clients.clear()
            self._replica_clients.clear()

    def close(self) -> None:
        self.close_clients()
        self.server.stop()


@dataclass
class ServedModel:
    """One served variant; `name` is its Triton model name, `id` its test id."""

    variant: Variant
    deployment: Deployment
    # requests, executions and batch sizes per replica in the last batching proof (with
    # --triton-replicas); replica_table() prints them
    replica_spread: dict[str, ModelStats] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.variant.model_name

    @property
    def id(self) -> str:
        return self.variant.id

    def __repr__(self) -> str:
        return f"ServedModel({self.id} as {self.name!r})"

    def inputs(self, batch_size: int = 2, seed: int = 0) -> dict[str, Array]:
        """A batch as this variant takes it on the wire (fp16 variants take half floats)."""
        native = self.deployment.repository.native(self.variant)
        return native.cast_inputs(self.variant.spec.make_inputs(batch_size, seed))

    def native(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        return self.deployment.repository.native(self.variant)(inputs)

    def infer(self, client: TritonClient, inputs: Mapping[str, Array]) -> dict[str, Array]:
        served = client.infer(self.name, inputs, self.variant.spec.output_names)
        return self._unreshape(served)

    def infer_many(
        self, client: TritonClient, requests: Sequence[Mapping[str, Array]]
    ) -> list[dict[str, Array]]:
        """All requests in flight together (the dynamic batcher may combine them); answers in
        request order."""
        answers = client.infer_many(self.name, requests, self.variant.spec.output_names)
        return [self._unreshape(answer) for answer in answers]

    def _unreshape(self, served: dict[str, Array]) -> dict[str, Array]:
        """Per-row scalars travel as [batch, 1] (Triton's dims [1] + empty reshape); give them
        back the shape PyTorch returns."""
        if not self.variant.spec.batched:
            return served
        signature = self.deployment.repository.signature(self.variant.spec)
        for tensor in signature.outputs:
            array = served.get(tensor.name)
            if not tensor.dims and array is not None and array.ndim == 2 and array.shape[1] == 1:
                served[tensor.name] = array.reshape(array.shape[0])
        return served

    def stats(self, client: TritonClient, **kwargs: object) -> StatsWindow:
        replicas = self.deployment.replica_clients()
        return StatsWindow(client, self.name, replicas=replicas, **kwargs)  # type: ignore[arg-type]

    def _compare(
        self,
        client: TritonClient,
        native: Mapping[str, Array],
        served: Mapping[str, Array],
        rtol: float | None,
        atol: float | None,
        tolerances: Mapping[str, Tolerance] | None,
    ) -> ParityReport:
        numerics = self.deployment.repository.target.numerics
        context = (
            f"model {self.variant.spec.name!r}, backend {self.id!r}, protocol {client.protocol!r}"
        )
        transport = transport_of(client)
        if transport != "none":
            context += f", transport {transport!r}"
        if self.device == "gpu":
            context += f", {numerics} numerics"
        return compare_outputs(
            native,
            served,
            fmt=self.variant.format,
            context=context,
            rtol=rtol,
            atol=atol,
            tolerances=tolerances,
            device=self.device,
            numerics=numerics,
        )

    def _record(
        self,
        client: TritonClient,
        check: Check,
        batch_size: int,
        reports: list[ParityReport],
        batching: ModelStats | None = None,
    ) -> None:
        variant = self.variant
        self.deployment.record(
            ParityResult(
                variant=variant.id,
                model=variant.spec.name,
                triton_model=variant.model_name,
                format=variant.format,
                precision=variant.precision,
                backend=variant.backend,
                batching=batching,
                device=self.device,
                **self.deployment.check_fields(client, check, batch_size, reports),
            )
        )

    @property
    def device(self) -> str:
        """Where its instances run: "gpu" or "cpu" (the tolerance tables' device)."""
        return "gpu" if self.variant.gpu else "cpu"

    def _refuse_reduced_precision(self) -> None:
        if self.variant.precision in REDUCED_PRECISIONS:
            raise ParityNotApplicable(
                f"{self.id} is {self.variant.precision.upper()}: its answers differ from fp32 "
                "PyTorch's by design, so element-wise parity does not judge it; judge it by "
                "accuracy on a dataset (ServedModel.assert_accuracy, docs/accuracy.md)"
            )

    def assert_parity(
        self,
        client: TritonClient,
        inputs: Mapping[str, Array] | None = None,
        *,
        batch_size: int = 2,
        seed: int = 0,
        rtol: float | None = None,
        atol: float | None = None,
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> ParityReport:
        """One request; every output must match native PyTorch within tolerance. Returns the
        report (max abs/rel diff and the share of the allowance used, per output)."""
        self._refuse_reduced_precision()
        if inputs is None:
            inputs = self.inputs(batch_size, seed)
        report = self._compare(
            client, self.native(inputs), self.infer(client, inputs), rtol, atol, tolerances
        )
        rows = next(iter(inputs.values())).shape[0] if self.variant.spec.batched else 1
        self._record(client, "parity", int(rows), [report])
        if not report.ok:
            raise AssertionError(report.describe())
        return report

    def measure_accuracy(
        self,
        client: TritonClient,
        dataset: Iterable[Any],
        metric: Metric | str,
        *,
        min_ratio: float | None = 0.99,
        min_value: float | None = None,
        min_samples: int | None = None,
        in_flight: int = IN_FLIGHT,
        name: str = "",
    ) -> AccuracyResult:
        """As assert_accuracy, judged and recorded but not raised (triton-tune disqualifies
        a candidate under the rule rather than stopping)."""
        fp32 = self.deployment.repository.native(
            dataclasses.replace(self.variant, precision="fp32")
        )
        wire = (
            self.deployment.repository.native(self.variant)
            if self.variant.precision == "fp16"
            else None
        )
        result = measure_accuracy(
            client,
            self.name,
            dataset,
            metric,
            fp32,
            min_ratio=min_ratio,
            min_value=min_value,
            min_samples=min_samples,
            outputs=self.variant.spec.output_names,
            in_flight=in_flight,
            cast=wire.cast_inputs if wire is not None else None,
        )
        result = dataclasses.replace(
            result, variant=self.id, precision=self.variant.precision, dataset=name
        )
        self.deployment.record(result)
        return result

    assert_accuracy = asserting(
        measure_accuracy,
        "assert_accuracy",
        """The dataset's metric on this variant's answers against fp32 PyTorch's on the
        same data (pytest_triton.accuracy.check.assert_accuracy): how a reduced-precision
        variant (int8, fp16) is judged, and any variant when a dataset is given. `name`
        labels the dataset in the gate report. The result is recorded (the gate report's
        Accuracy section) before a failure raises.""",
    )

    def assert_batched_parity(
        self,
        client: TritonClient,
        requests: int = 8,
        *,
        seed: int = 0,
        rtol: float | None = None,
        atol: float | None = None,
        tolerances: Mapping[str, Tolerance] | None = None,
    ) -> ModelStats:
        """N single-row requests in flight together must each equal PyTorch on that row alone,
        in request order. Returns the statistics delta so callers can check batching."""
        self._refuse_reduced_precision()
        if not self.variant.spec.batched:
            raise ValueError(f"{self.id} has max_batch_size 0: nothing to batch")
        rows = self.inputs(requests, seed)
        singles = [{n: a[i : i + 1] for n, a in rows.items()} for i in range(requests)]
        replicas = self.deployment.replica_clients()
        with StatsWindow(client, self.name, expect_requests=requests, replicas=replicas) as window:
            served = self.infer_many(client, singles)
        self.replica_spread = dict(window.per_replica) if replicas else {}
        reports = [
            self._compare(client, self.native(single), answer, rtol, atol, tolerances)
            for single, answer in zip(singles, served, strict=False)
        ]
        self._record(client, "batched_parity", 1, reports, window.delta)
        for index, report in enumerate(reports):
            if not report.ok:
                raise AssertionError(
                    f"request {index} of {requests} sent together: {report.describe()}"
                )
        return window.delta
