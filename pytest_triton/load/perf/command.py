"""`triton-perf`: a perf_analyzer-like sweep over concurrency and batch size with Locust users.

    triton-perf -m dlrm -b 4096 --concurrency-range 1:16 -f dlrm.csv --markdown dlrm.md \
        --plot dlrm.png --latency-bound 250 --search
    triton-perf -m mnist --concurrency-range 1:4 --triton-formats onnx,torch-export,aoti

With --triton-formats each format is served in turn by a server of its own and swept over the
same points; the reports hold every format's points, one row each.

This process (no gevent) starts the embedded server (or takes --url), drives a generator
subprocess point by point, shows progress and writes the reports. The generator is a separate
process so that gevent patches it before anything else is imported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import (
    check_goodput,
    check_replicas_behind,
    client_security,
)
from pytest_triton.base.errors import ConfigError, TritonTestError
from pytest_triton.base.processes import die_with_parent
from pytest_triton.base.setting_sources import as_values
from pytest_triton.base.urls import Endpoints, check_host, endpoints_from, parse_url
from pytest_triton.client.triton_client import Protocol, TritonClient
from pytest_triton.load.measure.latency_histogram import ms_text
from pytest_triton.load.perf.kinds import (
    check_kind,
    check_kind_options,
    kind_of,
    perf_source,
    sequence_strategy,
    served_kind,
)
from pytest_triton.load.perf.points import Point, bound_search, parse_range, parse_rate_range
from pytest_triton.load.perf.report import exit_status, sweep_verdict, write_reports
from pytest_triton.load.preflight import preflight_load
from pytest_triton.load.runner.embedded import (
    DEFAULT_FORMAT,
    EmbeddedSequenceModel,
    EmbeddedServer,
    Size,
    check_format,
    check_gpu_host,
    served_format,
)
from pytest_triton.load.runner.user_settings import checked_shared_memory

# What NVIDIA's examples call a sample of each zoo model.
UNITS = {
    "dlrm": "rec/s",
    "bert": "seq/s",
    "resnet50": "img/s",
    "resnext101-32x4d": "img/s",
    "se-resnext101-32x4d": "img/s",
    "mnist": "img/s",
    "text_recognition": "img/s",
}
GENERATOR = (
    "import locust, sys; from pytest_triton.load.perf import generator as _generator; "
    "sys.exit(_generator.run_in_process())"
)


class GeneratorProcess:
    """The generator subprocess; every command gets one JSON answer."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", GENERATOR],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
        )
        self.ask({"op": "config", **config})

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin: IO[str] | None = self.proc.stdin
        stdout: IO[str] | None = self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise TritonTestError(
                f"the load generator exited (code {self.proc.wait()}); see its error output above"
            )
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise TritonTestError(f"the load generator failed: {answer['error']}")
        return answer

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()


def _point(answer: dict[str, Any], fmt: str = "") -> Point:
    fields = {k: v for k, v in answer.items() if k in Point.__dataclass_fields__}
    return Point(**{**fields, "format": fmt})


def perf_formats(config: TritonConfig, model: str, size: Size) -> list[str]:
    """The formats a run measures: --triton-formats, each served in turn by the server
    triton-perf starts (checked before any export); else the one of --triton-format, else
    the default (on a GPU, the first its server can serve)."""
    if config.origins.get("formats") == "default":
        fmt = config.serving.format or DEFAULT_FORMAT
        if not config.server.url:  # with --triton-gpu: the GPU preflight, before any export
            fmt = served_format(config, [perf_source(model, size, None)]) or fmt
        return [fmt]
    if config.serving.format:
        raise ConfigError(
            "--triton-format serves one format and --triton-formats sweeps several: give "
            "one of them (e.g. --triton-formats "
            f"{','.join(dict.fromkeys((config.serving.format, *config.serving.formats)))})"
        )
    if config.server.url:
        raise ConfigError(
            "--triton-formats serves each format on the server triton-perf starts; the server "
            "at --url serves what it was given: measure each of its models by --model-name, "
            "one run each, or drop --url"
        )
    kind = kind_of(perf_source(model, size, None))
    if kind != "single":
        raise ConfigError(
            f"-m {model} is a {kind} model, served as it is whatever the format: "
            "--triton-formats sweeps the export formats of a single model"
        )
    if not config.server.gpu:
        return [check_format(fmt) for fmt in config.serving.formats]
    return [
        served_format(config.with_overrides({"format": fmt}), []) or fmt
        for fmt in config.serving.formats
    ]


def run(args: argparse.Namespace, config: TritonConfig) -> int:
    check_replicas_behind(config, config.server.url, "--url")
    # Goodput: the share of requests within the SLO (--perf-slo-ms, else --latency-bound);
    # with --latency-bound it replaces the percentile as what a point must hold.
    args.slo_ms = check_goodput(config, args.latency_bound)
    args.goodput = config.gate.perf_goodput
    rates = (
        parse_rate_range(args.request_rate_range)
        if args.request_rate_range is not None
        else [config.load.request_rate]
        if config.load.request_rate
        else None
    )
    check_gpu_host(config, config.server.url, "--url")
    formats = perf_formats(config, args.model, args.size)
    names: list[str] = []
    points: list[Point] = []
    unit = ""
    for fmt in formats:  # one after another, each on a server of its own
        name, unit, measured = _measure_format(args, config, fmt, rates, len(formats) > 1)
        names.append(name)
        points += measured
    verdict = sweep_verdict(points, config)
    write_reports(points, args, unit, ", ".join(names), verdict)
    return exit_status(verdict)


def _measure_format(
    args: argparse.Namespace,
    config: TritonConfig,
    fmt: str,
    rates: Sequence[float] | None,
    labelled: bool,
) -> tuple[str, str, list[Point]]:
    """One format's sweep: its server (or --url's), the generator, every point; the model's
    name, the throughput unit and the points, each tagged with the format it served."""
    batches = parse_range(args.batch_size)
    concurrencies = parse_range(args.concurrency_range)
    unit = args.unit or UNITS.get(args.model, "")
    chosen: Protocol | None = None
    if config.client.protocol:
        chosen = "grpc" if config.client.protocol[0] == "grpc" else "http"
    server: EmbeddedServer | None = None
    generator: GeneratorProcess | None = None
    try:
        if config.server.url:  # before any model is made: a refusal is said at once
            check_host(config.server.url, config.load.allow_remote)
            scheme = parse_url(config.server.url)[0]
            asked: Protocol = chosen or ("grpc" if scheme in ("grpc", "grpcs") else "http")
            preflight_load(config.server.url, "--url", [asked], config)
        served_config: dict[str, Any] | None = None
        if config.server.url:
            check_host(config.server.url, config.load.allow_remote)
            scheme, _ = parse_url(config.server.url)
            protocol: Protocol = chosen or ("grpc" if scheme in ("grpc", "grpcs") else "http")
            endpoints = endpoints_from(config.server.url, config.server.grpc_url)
            stats_protocol: Protocol = "http" if scheme in ("http", "https") else "grpc"
            if args.model_name:  # a single model's spec stays unmade here (no torch)
                served_config = _served_config(config, endpoints, stats_protocol, args.model_name)
        served = perf_source(
            args.model,
            args.size,
            fmt,
            lazy=served_config is not None and served_kind(served_config) == "single",
        )
        kind = kind_of(served)
        unit = unit or ("streams/s" if kind == "stream" else "infer/s")
        transport = checked_shared_memory(config, config.server.url)
        check_kind_options(kind, config, batches, concurrencies, rates is not None, transport)
        if transport != "none":
            print(
                f"[triton-perf] tensors travel through {transport} shared memory", file=sys.stderr
            )
        if not config.server.url:
            if labelled:
                print(f"[triton-perf] format {fmt}", file=sys.stderr)
            server = EmbeddedServer(
                [served],
                fmt,
                config=config,
                progress=lambda m: print(f"[triton-perf] {m}", file=sys.stderr),
            )
            endpoints = server.start()
            protocol = chosen or "http"
            stats_protocol = "http"
        name = args.model_name or served.model_name(fmt)
        if config.server.url:  # the kind the server serves, from its config, must be -m's
            if served_config is None:
                served_config = _served_config(config, endpoints, stats_protocol, name)
            check_kind(kind, served_kind(served_config), name, args.model, config.server.url)
        if isinstance(served, EmbeddedSequenceModel):
            strategy = sequence_strategy(served_config) if served_config else served.spec.strategy
            print(
                f"[triton-perf] {name} is stateful (sequence_batching, strategy {strategy}): "
                "each concurrent user owns a sequence",
                file=sys.stderr,
            )
        elif kind == "stream":
            print(f"[triton-perf] {name} is decoupled: measuring streams", file=sys.stderr)
        secure = {"http": "https", "grpc": "grpcs"}
        host = f"{secure[protocol] if protocol in endpoints.tls else protocol}://"
        host += endpoints.url(protocol)
        generator = GeneratorProcess(
            {
                "host": host,
                "model": name,
                "source": args.model,
                "size": args.size,
                "format": fmt,
                "stats_url": endpoints.url(stats_protocol),
                "stats_protocol": stats_protocol,
                "stats_tls": stats_protocol in endpoints.tls,
                "config": as_values(config),
                "kind": kind,
                "embedded": endpoints.encode() if server is not None else None,
            }
        )
        tag = "" if config.server.url else fmt  # with --url: whatever that server serves
        points = _sweep(generator, args, batches, concurrencies, rates, unit, tag, labelled)
    finally:
        if generator is not None:
            generator.close()
        if server is not None:
            server.stop()
    return name, unit, points


def _served_config(
    config: TritonConfig, endpoints: Endpoints, protocol: Protocol, name: str
) -> dict[str, Any]:
    """The config the server at --url reports for model `name`."""
    client = TritonClient(
        endpoints.url(protocol),
        protocol,
        timeout_s=30,
        security=client_security(config, protocol in endpoints.tls),
    )
    try:
        return client.model_config(name)
    finally:
        client.close()


def _sweep(
    generator: GeneratorProcess,
    args: argparse.Namespace,
    batches: Sequence[int],
    concurrencies: Sequence[int],
    rates: Sequence[float] | None,
    unit: str,
    fmt: str = "",
    labelled: bool = False,
) -> list[Point]:
    """Every batch size x concurrency (closed loop) or x request rate (open loop); each point
    tagged with `fmt` (named in the progress bar when `labelled`: several formats a run)."""
    from tqdm import tqdm

    searching = args.search and args.latency_bound is not None and rates is None
    loads = len(rates) if rates is not None else len(concurrencies)
    total = None if searching else len(batches) * loads
    points: list[Point] = []
    with tqdm(
        total=total, unit="point", file=sys.stderr, disable=args.no_progress, dynamic_ncols=True
    ) as bar:

        def measure(batch: int, concurrency: int, rate: float | None = None) -> Point:
            load = f"rate {rate:g} req/s" if rate else f"concurrency {concurrency}"
            bar.set_description(f"{fmt + ' ' if labelled else ''}batch {batch} {load}")
            point = _point(
                generator.ask(
                    {
                        "op": "measure",
                        "batch_size": batch,
                        "concurrency": concurrency,
                        "request_rate": rate,
                        "percentile": args.percentile,
                        "slo_ms": args.slo_ms,
                    }
                ),
                fmt,
            )
            points.append(point)
            bar.update(1)
            bar.set_postfix_str(
                f"{point.throughput:,.0f} {unit}, p{args.percentile} "
                f"{ms_text(point.latency(args.percentile))} ms"
                + (f", goodput {point.goodput:.3f}" if point.goodput is not None else "")
                + ("" if point.stable else ", NOT STABLE")
            )
            return point

        for batch in batches:
            if rates is not None:
                for rate in rates:
                    measure(batch, 1, rate)
            elif searching:

                def at(concurrency: int, batch: int = batch) -> Point:
                    return measure(batch, concurrency)

                for _ in bound_search(
                    at,
                    args.latency_bound,
                    min(concurrencies),
                    max(concurrencies),
                    args.percentile,
                    args.goodput,
                ):
                    pass
            else:
                for concurrency in concurrencies:
                    measure(batch, concurrency)
    return points
