"""The one table of settings, and one resolved, typed configuration per server or run.

Each field of `TritonConfig` is a setting, declared once with its parser, help and the front
ends it applies to: the pytest plugin (`--triton-x` and the `triton_x` ini key), Locust
(`--triton-x`, env `TRITON_X`), `triton-perf` and `triton-deploy`. Every front end reads the
same rows, so a setting parses, defaults and fails with the same text everywhere.

The table only declares: the parsers of its values are in `setting_parsers`, where values come
from (command lines, variables, ini keys) in `setting_sources`, and the resolution of a chain
of sources into one TritonConfig in `config_resolution`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pytest_triton.base.errors import ConfigError
from pytest_triton.base.formats import FORMATS, GPU_FORMATS
from pytest_triton.base.setting_parsers import (
    Duration,
    parse_bool,
    parse_count,
    parse_format,
    parse_formats,
    parse_gpus,
    parse_headers,
    parse_id_range,
    parse_int,
    parse_limit,
    parse_list,
    parse_numbers,
    parse_optional,
    parse_positive_int,
    parse_positive_number,
    parse_precisions,
    parse_protocols,
    parse_ratio,
    parse_shared_memory,
    parse_shell_words,
)

# Durations: a bare number is in the setting's unit, as it always was; `5s`, `500ms` say theirs.
SECONDS = Duration("s")
MS = Duration("ms")
MS_OR_ZERO = Duration("ms", zero=True)

# Choice settings: each declared once here; their choices are read from these types.
LauncherName = Literal["auto", "local", "container", "external"]
ModelControl = Literal["explicit", "none", "poll"]
Numerics = Literal["strict", "production"]
Distribution = Literal["constant", "poisson"]
MeasurementMode = Literal["time_windows", "count_windows"]
GrpcConnections = Literal["shared", "per-user"]
ShapeName = Literal["none", "ramp", "steps", "spike", "replay"]

Front = Literal["pytest", "locust", "perf", "tune", "deploy"]
PYTEST: frozenset[Front] = frozenset({"pytest"})
PERF: frozenset[Front] = frozenset({"perf", "tune"})
"""The standalone load tools, triton-perf and triton-tune: they measure alike."""
LOAD: frozenset[Front] = frozenset({"locust", "perf", "tune"})
SERVER: frozenset[Front] = frozenset({"pytest", "locust", "perf", "tune", "deploy"})
TUNE: frozenset[Front] = frozenset({"tune"})
"""Settings only triton-tune takes of the standalone tools: the launcher choice (container),
since it deploys every candidate on a server it starts; triton-perf's and Locust's own server
is always a local one (on the CPU, or on the GPU with --triton-gpu)."""
ENV_FRONTS: frozenset[Front] = LOAD
"""The front ends that read their settings from TRITON_* variables too; pytest reads its
command line and ini file, triton-deploy its command line."""


# -- the declaration of one setting ------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    """One row of the table: a field of TritonConfig and how each front end spells it."""

    name: str
    default: Any
    help: str
    fronts: frozenset[Front]
    parse: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None
    flag: bool = False  # a switch (--triton-gpu) rather than --triton-x VALUE
    metavar: str | None = None
    option: str | None = None  # the flag, when not the one `cli` derives from the name
    aliases: tuple[str, ...] = ()  # further flags of the standalone CLIs (triton-perf)
    shown_default: str | None = None  # what --help says the default is, when derived
    unit: str = ""  # targets: the limit's unit; durations: their parser's
    bound: Literal["max", "min"] | None = None  # targets: which way the limit must hold
    internal: bool = False  # set by the tool itself (master -> workers), not by people

    @property
    def cli(self) -> str:
        """--triton-<name>; a load test's targets (perf_*) are --perf-<name>."""
        bare = self.name.replace("_", "-")
        return self.option or ("--" if bare.startswith("perf-") else "--triton-") + bare

    @property
    def ini(self) -> str:
        return "triton_" + self.name

    @property
    def env(self) -> str:
        """The environment variable Locust reads it from (TRITON_PERF_LATENCY_P99, ...)."""
        bare = self.cli.removeprefix("--").replace("-", "_").upper()
        return bare if bare.startswith("TRITON_") else "TRITON_" + bare

    @property
    def dest(self) -> str:
        return self.cli.removeprefix("--").replace("-", "_")

    @property
    def duration(self) -> Duration | None:
        """The parser of a duration setting (its unit, and the units it takes)."""
        return self.parse if isinstance(self.parse, Duration) else None

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default == ():
            return "none"
        if isinstance(self.default, tuple):
            return ",".join(self.default)
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if self.duration is not None:
            return f"{self.default:g} {self.unit}"
        return str(self.default)

    @property
    def meaning(self) -> str:
        """The help with its unit: a duration's says a unit may be given instead."""
        if self.duration is not None:
            return f"{self.help} (in {self.unit}, or with a unit: {self.duration.examples})"
        return f"{self.help} ({self.unit})" if self.unit else self.help

    def describe(self) -> str:
        """The --help text (argparse formats help with %, so a literal one is doubled)."""
        return f"{self.meaning} (default: {self.default_text})".replace("%", "%%")

    def convert(self, raw: Any, origin: str) -> Any:
        """Parse a string from a command line, ini file, env var or web form; other values
        (factory arguments, defaults) are taken as they are."""
        if not isinstance(raw, str):
            return raw
        try:
            value = self.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{origin}: {raw!r} is not one of {', '.join(self.choices)}")
        return value


def _setting(default: Any, help: str, fronts: frozenset[Front], **info: Any) -> Any:
    return field(default=default, metadata={"setting": (help, fronts, info)})


@dataclass(frozen=True)
class ServerSettings:
    """Where and how the server runs, and which running server is gated."""

    launcher: LauncherName = _setting(
        "auto",
        "where tritonserver runs: local child process, container (testcontainers), or "
        "external (--triton-url); auto = external with a URL, else with --triton-gpu a GPU "
        "container when Docker's nvidia runtime answers, else a local server on the visible "
        "GPU; else local",
        PYTEST | TUNE,
        choices=get_args(LauncherName),
    )
    url: str | None = _setting(
        None,
        "URL of a running server (http://HOST:PORT or grpc://HOST:PORT); implies the "
        "external launcher",
        PYTEST | PERF,
        parse=parse_optional,
        metavar="URL",
        aliases=("-u", "--url"),
    )
    grpc_url: str | None = _setting(
        None,
        "gRPC URL of the server when HTTP is given (default: HTTP port + 1)",
        PYTEST | LOAD,
        parse=parse_optional,
        metavar="URL",
    )
    executable: str | None = _setting(
        None,
        "tritonserver binary for a local server (default: PATH, then the one bundled in "
        "nvidia-pytriton)",
        SERVER,
        parse=parse_optional,
        metavar="PATH",
    )
    serve_address: str = _setting(
        "127.0.0.1",
        "address a local tritonserver listens on; give an address of this machine that "
        "other hosts reach when Locust workers there load an embedded server (their load "
        "then needs --triton-allow-remote)",
        SERVER,
        metavar="ADDRESS",
    )
    startup_timeout: float = _setting(
        120.0,
        "how long to wait for the server to become ready",
        SERVER,
        parse=SECONDS,
        metavar="SECONDS",
    )
    server_args: tuple[str, ...] = _setting(
        (),
        'extra tritonserver arguments, shell-quoted (e.g. "--log-info=true '
        '--pinned-memory-pool-byte-size=0")',
        PYTEST | LOAD,
        parse=parse_shell_words,
        metavar="ARGS",
    )
    model_control: ModelControl = _setting(
        "explicit",
        "tritonserver --model-control-mode; explicit loads each model when a test "
        "first needs it, so one broken model fails only its tests",
        PYTEST,
        choices=get_args(ModelControl),
    )
    log_verbose: int = _setting(
        0, "tritonserver --log-verbose level", PYTEST | LOAD, parse=parse_int, metavar="N"
    )
    gpu: bool = _setting(
        False,
        "serve on NVIDIA GPUs (KIND_GPU instances, PyTorch reference on CUDA) with any "
        "launcher (Locust and triton-perf: the server they start themselves); stops at once "
        "naming what the chosen launcher lacks (a GPU, the Docker SDK, the engine, its nvidia "
        "runtime, CUDA in torch)",
        PYTEST | LOAD,
        parse=parse_bool,
        flag=True,
    )
    gpus: str = _setting(
        "all",
        "GPUs for --triton-gpu: all or a comma list of ordinals (0,1): a container's "
        "device request, a local server's CUDA_VISIBLE_DEVICES",
        PYTEST | LOAD,
        parse=parse_gpus,
        metavar="all|0,1",
    )
    numerics: Numerics = _setting(
        "strict",
        "fp32 numerics on a GPU: strict = TF32 off in the server "
        "(NVIDIA_TF32_OVERRIDE=0) and the reference, torch.testing's tolerances; production = "
        "TF32 as the backends ship it, with the measured tolerances the docs' parity page lists",
        PYTEST | LOAD,
        choices=get_args(Numerics),
    )
    image: str | None = _setting(
        None,
        "container image (default: the NGC image with --triton-gpu, else the offline "
        "CPU image built by images/build-cpu-image)",
        PYTEST | TUNE,
        parse=parse_optional,
        metavar="IMAGE",
    )
    replicas: tuple[str, ...] = _setting(
        (),
        "HTTP URLs of each server replica behind --triton-url's load balancer "
        "(comma-separated): statistics and batching proofs sum over them, with a table of "
        "how the load spread",
        PYTEST | LOAD,
        parse=parse_list,
        metavar="URL,...",
    )
    deployed: bool = _setting(
        False,
        "gate the models a running server already serves (--triton-url; model control none, "
        "poll or explicit): nothing is uploaded or unloaded, each model must be READY at its "
        "spec's version and its served config must match the spec",
        PYTEST,
        parse=parse_bool,
        flag=True,
    )
    backends: tuple[str, ...] | None = _setting(
        None,
        "backends the external server has (comma-separated; default python), deciding "
        "native or python-hosted variants",
        PYTEST,
        parse=parse_list,
        metavar="LIST",
    )


@dataclass(frozen=True)
class ClientSettings:
    """How clients reach the server: protocols, transports, timeouts, TLS and headers."""

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols asked for; both when none was named."""
        return self.protocol or ("http", "grpc")

    protocol: tuple[str, ...] | None = _setting(
        None,
        "protocols: http, grpc or both (pytest parametrizes the client fixture over "
        "them; Locust users take them in turn; triton-perf takes one)",
        PYTEST | LOAD,
        parse=parse_protocols,
        metavar="http|grpc|both",
        shown_default="both for pytest, the host's scheme or http for load",
        aliases=("-i", "--protocol"),
    )
    shared_memory: tuple[str, ...] = _setting(
        ("none",),
        "where tensors travel, as perf_analyzer's --shared-memory: none (in the "
        "request), system (POSIX shared memory the server maps) or cuda (CUDA IPC memory on "
        "GPU 0); for a server on this machine only. pytest parametrizes the client fixture "
        "over a comma list (ids http-shm, grpc-cuda-shm); Locust and triton-perf take one",
        PYTEST | LOAD,
        parse=parse_shared_memory,
        metavar="none|system|cuda",
        aliases=("--shared-memory",),
    )
    output_shared_memory_size: int = _setting(
        100 * 1024,
        "bytes of shared memory for each output whose size the model's metadata "
        "does not fix (variable dimensions, BYTES), as perf_analyzer's "
        "--output-shared-memory-size",
        PYTEST | LOAD,
        parse=parse_positive_int,
        metavar="BYTES",
        aliases=("--output-shared-memory-size",),
    )
    request_timeout: float = _setting(
        120.0,
        "client network timeout",
        PYTEST | LOAD,
        parse=SECONDS,
        metavar="SECONDS",
    )
    tls_ca: str | None = _setting(
        None,
        "CA bundle (PEM) that signed the server's certificate, for https:// and grpcs:// URLs "
        "(default: the system's)",
        PYTEST | LOAD,
        parse=parse_optional,
        metavar="PATH",
    )
    tls_cert: str | None = _setting(
        None,
        "client certificate (PEM) for mutual TLS, with --triton-tls-key",
        PYTEST | LOAD,
        parse=parse_optional,
        metavar="PATH",
    )
    tls_key: str | None = _setting(
        None,
        "the client certificate's private key (PEM) for mutual TLS",
        PYTEST | LOAD,
        parse=parse_optional,
        metavar="PATH",
    )
    tls_server_name: str | None = _setting(
        None,
        "the name the server's certificate must carry, where it differs from the URL's host",
        PYTEST | LOAD,
        parse=parse_optional,
        metavar="NAME",
    )
    headers: tuple[str, ...] = _setting(
        (),
        "request headers on every call ('Name: value', ';'-separated); ${VARIABLE}s are read "
        "from the environment when a client is made and never printed, e.g. "
        "'Authorization: Bearer ${TRITON_TOKEN}'",
        PYTEST | LOAD,
        parse=parse_headers,
        metavar="HEADERS",
    )


@dataclass(frozen=True)
class ServingSettings:
    """What is served: the specs, their export formats and precisions, warm-up, repository."""

    specs: str | None = _setting(
        None,
        "MODULE:CALLABLE returning the ModelSpecs of the default triton_repository fixture",
        PYTEST,
        parse=parse_optional,
        metavar="MODULE:CALLABLE",
    )
    formats: tuple[str, ...] = _setting(
        FORMATS,
        "export formats to serve, comma-separated; triton-perf serves each in turn on its "
        "own server and sweeps the same points in every one, one report with a row per "
        "format and point (as perf_analyzer users compare backends)",
        PYTEST | frozenset({"perf"}),
        parse=parse_formats,
        metavar="LIST",
        shown_default="torchscript-script,torchscript-trace,onnx (triton-perf: the one "
        "format of --triton-format)",
        aliases=("--formats",),
    )
    precisions: tuple[str, ...] | None = _setting(
        None,
        "precisions to serve, comma-separated (fp32, fp16, int8), for every spec and each "
        "format that has them (int8: ONNX, judged by accuracy); triton-tune: the precisions "
        "it searches (a dimension of the space; other than fp32 needs --min-accuracy-ratio)",
        PYTEST | TUNE,
        parse=parse_precisions,
        metavar="LIST",
        shown_default="each spec's: fp32, fp16 when ModelSpec.fp16, int8 when ModelSpec.int8; "
        "triton-tune: fp32",
        aliases=("--precisions",),
    )
    format: str | None = _setting(
        None,
        "export format the embedded server of a load test serves",
        LOAD,
        parse=parse_format,
        shown_default="the user class's, else onnx; on a GPU the first of onnx, "
        "torchscript-trace, torchscript-script its server can serve there",
        metavar="FORMAT",
        aliases=("--format",),
    )
    warmup: int | None = _setting(
        None,
        "Triton model_warmup runs per sample before a model serves (0 = off; a "
        "ModelSpec's warmup wins)",
        PYTEST,
        parse=parse_count,
        metavar="N",
        shown_default="5 on a GPU server, else 0",
    )
    repository_dir: str | None = _setting(
        None,
        "build the model repository here and keep it (default: a temporary directory "
        "removed at the end)",
        PYTEST,
        parse=parse_optional,
        metavar="DIR",
    )


@dataclass(frozen=True)
class LoadSettings:
    """How load is sent: the model and batch, request bounds, open-loop rate, hosts."""

    model: str | None = _setting(
        None,
        "Triton model name to send load to (default: the locustfile's model)",
        frozenset({"locust"}),
        parse=parse_optional,
        metavar="NAME",
    )
    batch_size: int | None = _setting(
        None,
        "samples per request (default: the user class's batch_size)",
        frozenset({"locust"}),
        parse=parse_positive_int,
        metavar="N",
    )
    max_requests: int | None = _setting(
        None,
        "stop after about N requests (distributed: within one stats report interval)",
        frozenset({"locust"}),
        parse=parse_positive_int,
        metavar="N",
    )
    allow_remote: bool = _setting(
        False,
        "allow load on a non-loopback host (refused by default)",
        LOAD,
        parse=parse_bool,
        flag=True,
        aliases=("--allow-remote",),
    )
    report_json: str | None = _setting(
        None,
        "also write the verdict and server report to this JSON file",
        frozenset({"locust"}),
        parse=parse_optional,
        metavar="PATH",
    )
    endpoints: str | None = _setting(
        None,
        "the embedded server's endpoints, from the master to its workers",
        frozenset({"locust"}),
        parse=parse_optional,
        internal=True,
    )
    grpc_connections: GrpcConnections = _setting(
        "shared",
        "gRPC users of one process: shared sends their requests as streams of one HTTP/2 "
        "connection per server, as a gRPC client's channel does (perf_analyzer's concurrency "
        "contexts share one); per-user gives each user a connection of its own",
        LOAD,
        choices=get_args(GrpcConnections),
        aliases=("--grpc-connections",),
    )
    request_rate: float | None = _setting(
        None,
        "open loop: send this many requests per second in total, whatever the server "
        "does, each latency counted from its scheduled send time (perf_analyzer's request-rate "
        "mode); default: closed loop, each user sends when its last request returned",
        LOAD,
        parse=parse_positive_number,
        metavar="R",
        aliases=("--request-rate",),
    )
    request_distribution: Distribution = _setting(
        "constant",
        "open loop: gaps between sends, constant or poisson (exponential gaps of the same mean)",
        LOAD,
        choices=get_args(Distribution),
        aliases=("--request-distribution",),
    )
    check_every: int | None = _setting(
        None,
        "answers checked under load against the PyTorch reference of each user's inputs: "
        "every answer's outputs for shape and dtype, and every N-th answer of each user for "
        "its values with the parity tolerances; a wrong answer is a failed request "
        "('wrong answer: ...'). 0 = no checks",
        LOAD,
        parse=parse_count,
        metavar="N",
        shown_default="100 on the server a locustfile starts itself (and on the server "
        "triton-perf starts itself for a sequence or stream model); with --host, --url or a "
        "single model in triton-perf 0, since the locustfile's weights need not be the served "
        "model's",
        aliases=("--check-every",),
    )
    update_to: str | None = _setting(
        None,
        "a model update under load: MODULE:CALLABLE returning the next version's ModelSpec "
        "(the served model's name and signature, another version); the embedded server loads "
        "it beside the served version at --triton-update-at, then retires the old one. Every "
        "answer is checked: the old or new version's before, only the new one's after",
        frozenset({"locust"}),
        parse=parse_optional,
        metavar="MODULE:CALLABLE",
    )
    update_at: float = _setting(
        5.0,
        "time after the test starts at which --triton-update-to begins the update",
        frozenset({"locust"}),
        parse=SECONDS,
        metavar="SECONDS",
    )
    update_then: float | None = _setting(
        None,
        "end the run this long after the update finished (the old version retired, "
        "or the update failed), however long the new version took to load; -t stays the "
        "run's upper bound",
        frozenset({"locust"}),
        parse=SECONDS,
        metavar="SECONDS",
        shown_default="none: the run lasts -t",
    )
    sequence_length: int | None = _setting(
        None,
        "stateful (sequence) models: the base number of requests of each sequence, the "
        "first flagged START and the last END (perf_analyzer's --sequence-length)",
        frozenset({"locust", "perf"}),
        parse=parse_positive_int,
        metavar="N",
        shown_default="20 in triton-perf (perf_analyzer's); a SequenceUser's own "
        "`sequence_length` in Locust",
        aliases=("--sequence-length",),
    )
    sequence_length_variation: float | None = _setting(
        None,
        "stateful models: each sequence's length varies within +-this percentage of "
        "--triton-sequence-length (perf_analyzer's --sequence-length-variation)",
        frozenset({"locust", "perf"}),
        parse=parse_limit,
        metavar="PCT",
        shown_default="20 in triton-perf; a SequenceUser's own in Locust",
        aliases=("--sequence-length-variation",),
    )
    sequence_id_range: tuple[int, int] | None = _setting(
        None,
        "stateful models: sequence ids (CORRID) from START up to END, excluded; an id is "
        "never reused while its sequence is in flight (perf_analyzer's --sequence-id-range)",
        frozenset({"locust", "perf"}),
        parse=parse_id_range,
        metavar="START[:END]",
        shown_default="1:2147483648 (a SequenceUser's own `sequence_id_range` in Locust)",
        aliases=("--sequence-id-range",),
    )
    max_in_flight: int = _setting(
        64,
        "open loop: requests one user keeps outstanding at most; a send due beyond it "
        "leaves late (and counts from its scheduled time)",
        LOAD,
        parse=parse_positive_int,
        metavar="N",
    )
    shape: ShapeName = _setting(
        "none",
        "traffic shape of a Locust run, in stages of --triton-shape-step-s each judged on "
        "its own: steps (the --triton-shape-steps loads in turn), ramp (rising linearly "
        "through them), spike (the first, the largest, the first again), replay (the "
        "arrivals of --triton-replay, open loop); loads are users, or req/s with "
        "--triton-request-rate; none = Locust's -u for the whole run",
        frozenset({"locust"}),
        choices=get_args(ShapeName),
    )
    shape_steps: tuple[float, ...] = _setting(
        (1.0, 2.0, 4.0, 8.0),
        "the loads of a shape's stages: users (closed loop) or total req/s (open loop)",
        frozenset({"locust"}),
        parse=parse_numbers,
        metavar="N,N,...",
        shown_default="1,2,4,8",
    )
    shape_step_s: float = _setting(
        10.0,
        "length of each stage of a shape (replay: the trace is judged in stages this long)",
        frozenset({"locust"}),
        parse=SECONDS,
        metavar="SECONDS",
    )
    replay: str | None = _setting(
        None,
        "CSV trace to replay open loop (with --triton-shape replay): one row per request, "
        "its arrival time in seconds from the start and its batch size",
        frozenset({"locust"}),
        parse=parse_optional,
        metavar="PATH",
    )
    soak: bool = _setting(
        False,
        "soak: during the run the master scrapes the server's Prometheus metrics and, "
        "where the server runs on this machine, its RSS (tritonserver and its python stubs) "
        "every second, and reports memory and p99 over time (plots beside the JSON report); "
        "on by itself when a memory or drift target is set",
        frozenset({"locust"}),
        parse=parse_bool,
        flag=True,
    )
    metrics_url: str | None = _setting(
        None,
        "the server's Prometheus metrics URL for --triton-soak (default: the embedded "
        "server's; with --host, Triton's port convention: the HTTP port + 2, /metrics, over "
        "TLS when the host is https://); scraped with the TLS files and --triton-headers",
        frozenset({"locust"}),
        parse=parse_optional,
        metavar="URL",
    )


@dataclass(frozen=True)
class MeasurementSettings:
    """How a load test is measured: warm-up, windows and their stability (perf_analyzer's names)."""

    load_warmup: float = _setting(
        1000.0,
        "load sent before the first measurement window, not measured (a Locust run's warm-up "
        "lasts longer, in whole seconds, until the request rate settles: see "
        "--triton-fixed-warmup)",
        LOAD,
        parse=MS_OR_ZERO,
        metavar="MS",
        aliases=("--warmup",),
    )
    fixed_warmup: bool = _setting(
        False,
        "measure right after --triton-load-warmup; by default the warm-up goes on (up to 30 s "
        "more) until a second's request rate agrees with the next two seconds' within "
        "--triton-stability-percentage, so a JIT-compiling backend's first seconds are not "
        "measured",
        frozenset({"locust"}),
        parse=parse_bool,
        flag=True,
    )
    measurement_mode: MeasurementMode = _setting(
        "time_windows",
        "measurement windows by time (--triton-measurement-interval) or by "
        "request count (--triton-measurement-request-count, for slow models)",
        LOAD,
        choices=get_args(MeasurementMode),
        aliases=("--measurement-mode",),
    )
    measurement_interval: float = _setting(
        5000.0,
        "length of a time window; in a Locust run with -t, when not set, the windows shorten "
        "(not below 1 s) until --triton-stability-windows + 2 of them fit after the warm-up, "
        "and a -t too short for the warm-up and the windows a latency or throughput target "
        "is judged on is refused before any load, naming the shortest -t that works",
        LOAD,
        parse=MS,
        metavar="MS",
        aliases=("-p", "--measurement-interval"),
    )
    measurement_request_count: int = _setting(
        50,
        "requests of a count window",
        LOAD,
        parse=parse_positive_int,
        metavar="N",
        aliases=("--measurement-request-count",),
    )
    stability_percentage: float = _setting(
        10.0,
        "a measurement counts only when consecutive windows agree within this share on "
        "throughput and p99 latency",
        LOAD,
        parse=parse_positive_number,
        unit="%",
        metavar="PCT",
        aliases=("-s", "--stability-percentage"),
    )
    stability_windows: int = _setting(
        3, "consecutive windows that must agree", LOAD, parse=parse_positive_int, metavar="N"
    )
    max_trials: int = _setting(
        10,
        "windows measured per point at most before it is called unstable",
        PERF,
        parse=parse_positive_int,
        metavar="N",
        aliases=("--max-trials",),
    )
    allow_unstable: bool = _setting(
        False,
        "report an unstable measurement but do not fail on it",
        LOAD,
        parse=parse_bool,
        flag=True,
        aliases=("--allow-unstable",),
    )


@dataclass(frozen=True)
class GateSettings:
    """What decides a release: targets (model_analyzer's names), the report, baselines."""

    min_accuracy_ratio: float | None = _setting(
        None,
        "triton-tune: a candidate's metric on the accuracy dataset must reach this share of "
        "fp32 PyTorch's on the same data (MLPerf's 0.99 / 0.999); below it the candidate is "
        "disqualified, saying by how much",
        TUNE,
        parse=parse_ratio,
        option="--min-accuracy-ratio",
        metavar="R",
    )
    accuracy_dataset: str | None = _setting(
        None,
        "triton-tune: the data --min-accuracy-ratio is judged on: digits (the held-out "
        "scikit-learn digits, top-1 against their labels: the digits model), generated "
        "(the spec's generated inputs, top-1 agreement with fp32 PyTorch), click-logs "
        "(2,048 generated inputs with clicks drawn from the spec's fp32 module, ROC AUC: "
        "DLRM), or MODULE:CALLABLE returning (batches, metric)",
        TUNE,
        parse=parse_optional,
        option="--accuracy-dataset",
        metavar="NAME",
        shown_default="generated",
    )

    perf_latency_avg: float | None = _setting(
        None,
        "average client latency must stay at or below this",
        LOAD,
        parse=MS_OR_ZERO,
        bound="max",
        metavar="MS",
    )
    perf_latency_p95: float | None = _setting(
        None,
        "95th percentile client latency must stay at or below this",
        LOAD,
        parse=MS_OR_ZERO,
        bound="max",
        metavar="MS",
    )
    perf_latency_p99: float | None = _setting(
        None,
        "99th percentile client latency must stay at or below this",
        LOAD,
        parse=MS_OR_ZERO,
        bound="max",
        metavar="MS",
    )
    perf_throughput: float | None = _setting(
        None,
        "successful samples per second (requests x batch size) must reach this",
        LOAD,
        parse=parse_limit,
        unit="samples/s",
        bound="min",
        metavar="X",
    )
    perf_fail_ratio: float | None = _setting(
        0.0,
        "failed / all requests must stay at or below this (0 = no failed request allowed): "
        "over a Locust run; at every point of a triton-perf sweep (one point above it fails "
        "the run); a triton-tune candidate above it is disqualified. A wrong answer always "
        "fails (see --triton-max-wrong-answers); reports count failures by reason",
        LOAD,
        parse=parse_ratio,
        bound="max",
        metavar="R",
    )
    perf_goodput: float | None = _setting(
        None,
        "goodput: the share of requests answered successfully within --perf-slo-ms must "
        "reach this (triton-perf: the highest load at which it holds, with --latency-bound "
        "as the SLO unless --perf-slo-ms is given)",
        LOAD,
        parse=parse_ratio,
        bound="min",
        metavar="R",
        aliases=("--goodput",),
    )
    perf_slo_ms: float | None = _setting(
        None,
        "the latency SLO that --perf-goodput counts requests within",
        LOAD,
        parse=MS,
        metavar="MS",
        aliases=("--slo-ms",),
    )
    perf_memory_growth_mb_per_min: float | None = _setting(
        None,
        "soak: the server's memory (RSS of tritonserver and its stubs where local, else "
        "Triton's nv_cpu_memory_used_bytes) may grow at most this fast, as the slope fitted "
        "over the run after its warm-up",
        frozenset({"locust"}),
        parse=parse_limit,
        unit="MB/min",
        bound="max",
        metavar="MB",
    )
    perf_p99_drift: float | None = _setting(
        None,
        "soak: the p99 latency of the run's last third may exceed its first third's by at "
        "most this percentage",
        frozenset({"locust"}),
        parse=parse_limit,
        unit="%",
        bound="max",
        metavar="PCT",
    )
    perf_ttft_p99: float | None = _setting(
        None,
        "streams: the 99th percentile time to first token (request sent to its first "
        "token's response) must stay at or below this",
        frozenset({"locust", "perf"}),
        parse=MS_OR_ZERO,
        bound="max",
        metavar="MS",
    )
    perf_itl_p99: float | None = _setting(
        None,
        "streams: the 99th percentile inter-token latency (each gap between two tokens' "
        "responses of a stream) must stay at or below this",
        frozenset({"locust", "perf"}),
        parse=MS_OR_ZERO,
        bound="max",
        metavar="MS",
    )
    perf_output_tokens_per_s: float | None = _setting(
        None,
        "streams: output tokens per second (tokens of the streams that ended after the "
        "warm-up, over that span) must reach this",
        frozenset({"locust", "perf"}),
        parse=parse_limit,
        unit="tokens/s",
        bound="min",
        metavar="X",
    )
    perf_stream_goodput: float | None = _setting(
        None,
        "streams: the share of streams (failed ones count as not good) whose time to first "
        "token is within --perf-slo-ttft-ms and whose average inter-token latency is within "
        "--perf-slo-itl-ms must reach this (AIPerf's goodput)",
        frozenset({"locust", "perf"}),
        parse=parse_ratio,
        bound="min",
        metavar="R",
    )
    perf_slo_ttft_ms: float | None = _setting(
        None,
        "streams: the time-to-first-token SLO a good stream meets (--perf-stream-goodput)",
        frozenset({"locust", "perf"}),
        parse=MS,
        metavar="MS",
    )
    perf_slo_itl_ms: float | None = _setting(
        None,
        "streams: the SLO on a stream's average inter-token latency that a good stream meets "
        "(--perf-stream-goodput)",
        frozenset({"locust", "perf"}),
        parse=MS,
        metavar="MS",
    )
    wrong_answers: int | None = _setting(
        0,
        "wrong answers allowed in a load test (see --triton-check-every): answers that came "
        "back without error but are not PyTorch's",
        LOAD,
        parse=parse_count,
        option="--triton-max-wrong-answers",
        bound="max",
        metavar="N",
        aliases=("--max-wrong-answers",),
    )
    answer_agreement: float | None = _setting(
        None,
        "a reduced-precision variant (INT8, fp16) under load: judge the answers whose values "
        "are compared (--triton-check-every) by top-1 agreement with the fp32 reference "
        "instead of the parity tolerance, and fail the run when the share of their samples "
        "whose best class agrees falls below this (e.g. 0.99); the rounding of such a "
        "variant is not a wrong answer, a changed class is counted",
        LOAD,
        parse=parse_ratio,
        option="--triton-min-agreement",
        bound="min",
        metavar="R",
        aliases=("--min-agreement",),
    )
    report: str | None = _setting(
        None,
        "write the gate report here: report.json, report.md, plots and junit.xml, with "
        "every load-*.json found in the directory (Locust --triton-report-json, triton-perf "
        "--json)",
        PYTEST,
        parse=parse_optional,
        metavar="DIR",
    )
    baseline: str | None = _setting(
        None,
        "compare this run with a stored gate report and fail on a regression beyond the "
        "--triton-baseline-* limits",
        PYTEST,
        parse=parse_optional,
        metavar="FILE",
    )
    save_baseline: str | None = _setting(
        None,
        "write this run's gate report as a baseline (only when the gate passes)",
        PYTEST,
        parse=parse_optional,
        metavar="FILE",
    )
    baseline_throughput_drop: float = _setting(
        10.0,
        "baseline: fail when a load point's throughput (median over its windows) drops "
        "by more than this percentage",
        PYTEST,
        parse=parse_limit,
        metavar="PERCENT",
    )
    baseline_p99_rise: float = _setting(
        20.0,
        "baseline: fail when a load point's p99 latency (median over its windows) rises "
        "by more than this percentage",
        PYTEST,
        parse=parse_limit,
        metavar="PERCENT",
    )
    baseline_headroom: float = _setting(
        80.0,
        "baseline: fail when a parity row uses more than this percentage of its "
        "tolerance allowance",
        PYTEST,
        parse=parse_limit,
        metavar="PERCENT",
    )


@dataclass(frozen=True)
class TritonConfig:
    """Every setting, resolved, in small groups by job; `origins` says where each value came
    from. The settings table (SETTINGS) is read from the groups' fields: one declaration per
    setting, for every front end."""

    server: ServerSettings
    client: ClientSettings
    serving: ServingSettings
    load: LoadSettings
    measurement: MeasurementSettings
    gate: GateSettings
    origins: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def value(self, name: str) -> Any:
        """A setting's value by its name in the table (e.g. "perf_latency_p99")."""
        return getattr(getattr(self, GROUP_OF[name]), name)

    def with_overrides(self, overrides: Mapping[str, Any]) -> TritonConfig:
        """Factory arguments on top of this config; re-derives the launcher."""
        check_names(overrides)
        values = {s.name: self.value(s.name) for s in SETTINGS}
        origins = dict(self.origins)
        for name, raw in overrides.items():
            origin = f"factory argument {name}="
            values[name] = BY_NAME[name].convert(raw, origin)
            origins[name] = origin
        if "launcher" not in overrides and origins.get("launcher") == "derived":
            values["launcher"] = "auto"
        values["origins"] = origins
        return finish(values)


GROUPS: dict[str, type] = {
    "server": ServerSettings,
    "client": ClientSettings,
    "serving": ServingSettings,
    "load": LoadSettings,
    "measurement": MeasurementSettings,
    "gate": GateSettings,
}
GROUP_OF: dict[str, str] = {
    f.name: group for group, cls in GROUPS.items() for f in dataclasses.fields(cls)
}


def _rows() -> tuple[Setting, ...]:
    rows = []
    for cls in GROUPS.values():
        for f in dataclasses.fields(cls):
            help_text, fronts, info = f.metadata["setting"]
            parse = info.get("parse")
            if isinstance(parse, Duration):  # its unit is declared once, by its parser
                info = {**info, "unit": parse.unit}
            rows.append(Setting(f.name, f.default, help_text, fronts, **info))
    return tuple(rows)


SETTINGS: tuple[Setting, ...] = _rows()
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
TARGETS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.bound is not None)


def settings_for(front: Front) -> list[Setting]:
    return [s for s in SETTINGS if front in s.fronts]


def check_names(names: Iterable[str]) -> None:
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        raise ConfigError(
            f"unknown pytest-triton setting(s) {unknown}; known: {', '.join(BY_NAME)}"
        )


def finish(values: dict[str, Any]) -> TritonConfig:
    """Derive the launcher from url/gpu when left on auto, and reject contradictions."""
    origins = values["origins"]
    if values["launcher"] == "auto" and (values["url"] or not values["gpu"]):
        values["launcher"] = "external" if values["url"] else "local"
        origins["launcher"] = "derived"
    # auto with --triton-gpu stays auto here: which launcher can run a GPU server depends on
    # what this machine has (server/gpu.py decides when the launcher is made).
    if values["launcher"] == "external" and not values["url"]:
        raise ConfigError(
            "the external launcher needs --triton-url (or triton_url in ini), "
            "e.g. --triton-url http://127.0.0.1:8000"
        )
    if values["deployed"] and values["launcher"] != "external":
        raise ConfigError(
            "--triton-deployed gates the models a running server already serves: give its "
            "address with --triton-url (e.g. --triton-url https://triton.staging:8000)"
        )
    if values["shape"] == "replay" and not values["replay"]:
        raise ConfigError(
            "--triton-shape replay replays a trace: give its CSV with --triton-replay"
        )
    if values["gpu"] and origins.get("formats") == "default":
        values["formats"] = FORMATS + GPU_FORMATS  # TensorRT and ORT-TensorRT join on a GPU
    groups = {
        group: cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
        for group, cls in GROUPS.items()
    }
    return TritonConfig(**groups, origins=values["origins"])
