"""triton-tune beside model_analyzer: both config searches on one model, then a referee.

model_analyzer (NVIDIA's config search; a virtualenv of its own, never this project's: it pins
other versions) runs a brute search in local launch mode against the bundled tritonserver,
started through a wrapper script written here that gives the server the environment
server/local.py gives it (this interpreter's bin first on PATH for the python stub, the
bundle's libraries, a staged backend directory with the stub), with perf_analyzer 2.51
(`make perf-analyzer`), `cpu_only: true`, ports of its own, the spec's own inputs
(--input-data) and its own measurement defaults (count windows, grown where they disagree, as
a new user runs it). triton-tune's quick search
then runs over the same space (max_batch_size 1..--max-batch-size in powers of 2, instances
1..3, dynamic batching off/on, concurrency 1..16; its queue delays as it chooses them) with
--time-budget set to model_analyzer's search time.

The referee: ONE server serves the committed configuration and each tool's best side by side;
perf_analyzer and triton-perf (vs_perf_analyzer.py's runs: the server's statistics read
around each) measure each at --concurrency single-row requests, in rounds whose order of
configurations rotates and whose tool order alternates. Printed per model: each tool's search
wall time, configurations and measurements, best configuration and whether the other tool
ever measured it, then per configuration the referee's throughput and p99 (medians over
rounds), the server's inferences/s, and the CPU shares of the generator, the server and
everything else (which side was the bottleneck on a shared machine). With --check-answers,
--answer-requests single-row requests sent together to each configuration are compared with
PyTorch through tritonclient (parity's tolerances), the first difference named.

    python3 -m venv /tmp/ma-venv && /tmp/ma-venv/bin/pip install 'triton-model-analyzer==1.58.*'
    make perf-analyzer
    python benchmarks/vs_model_analyzer.py --model-analyzer /tmp/ma-venv/bin/model-analyzer \
        --model centered --check-answers

Models: mnist, dlrm (the zoo's, small), centered (tests/helpers/tune_models.py: each row minus
its batch's mean, answers that change under batching) or MODULE:CALLABLE returning a
ModelSpec; served as ONNX hosted by the bundled server's python backend. A benchmark, not a
test: nothing is judged, both tools' figures are printed (and written with --json).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (str(HERE), str(REPO)):  # vs_perf_analyzer's helpers; tests.helpers' models
    if _path not in sys.path:
        sys.path.insert(0, _path)

import psutil  # noqa: E402
from perf_analyzer_tool import MISSING, find_perf_analyzer  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc  # noqa: E402
from vs_perf_analyzer import (  # noqa: E402
    Result,
    Served,
    fmt,
    median_result,
    run_pa,
    run_triton_perf,
)

from pytest_triton.base.dtypes import Array  # noqa: E402
from pytest_triton.load.runner.embedded import EmbeddedModel, model_source  # noqa: E402
from pytest_triton.repository import pbtxt  # noqa: E402
from pytest_triton.server import LocalLauncher, ServerArgs  # noqa: E402
from pytest_triton.server.launcher import free_ports  # noqa: E402
from pytest_triton.server.local import Installation, find_installation, server_environment  # noqa: E402

ALIASES = {"centered": "tests.helpers.tune_models:batch_centered_spec"}
INSTALL = (
    "python3 -m venv /tmp/ma-venv && /tmp/ma-venv/bin/pip install 'triton-model-analyzer==1.58.*'"
)
WINDOW_MS = 2000  # the referee's windows: triton-tune's (load/tune/tuner.py TUNE_MEASUREMENT)
TAIL_LINES = 25
ENV_KEYS = ("PATH", "LD_LIBRARY_PATH", "PYTHONDONTWRITEBYTECODE", "OMP_WAIT_POLICY", "TMPDIR")


class StepFailed(SystemExit):
    """One step of the benchmark failed: which, and the tool's own last lines."""

    def __init__(self, step: str, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-TAIL_LINES:])
        super().__init__(f"{step} failed; its last lines:\n{tail}")


def find_model_analyzer() -> str | None:
    """$MODEL_ANALYZER, else model-analyzer on PATH."""
    return os.environ.get("MODEL_ANALYZER") or shutil.which("model-analyzer")


def check_model_analyzer(path: str | None) -> Path:
    """The model-analyzer executable, or a SystemExit saying how to install it."""
    found = (shutil.which(path) if path and os.sep not in path else path) or ""
    if not found or not os.access(found, os.X_OK) or not Path(found).is_file():
        raise SystemExit(
            f"--model-analyzer {path or '(not given)'}: no model-analyzer executable there. "
            "Install model_analyzer 1.58 in a virtualenv of its own (never this project's: it "
            f"pins other versions), e.g.\n    {INSTALL}\n"
            "and pass --model-analyzer /tmp/ma-venv/bin/model-analyzer"
        )
    return Path(found)


# -- configurations ---------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Config:
    """What both tools search, as one comparable key (the concurrency is the load, apart)."""

    max_batch_size: int
    dynamic_batching: bool
    queue_delay_us: int
    instances: int

    def label(self) -> str:
        batching = f"dyn {self.queue_delay_us} us" if self.dynamic_batching else "dyn off"
        return f"mbs {self.max_batch_size}, {batching}, {self.instances} inst"

    @classmethod
    def of(cls, config: mc.ModelConfig) -> Config:
        # max_batch_size 1 batches nothing, with dynamic batching or without
        dynamic = config.HasField("dynamic_batching") and config.max_batch_size > 1
        delay = config.dynamic_batching.max_queue_delay_microseconds if dynamic else 0
        instances = sum(g.count or 1 for g in config.instance_group) or 1
        return cls(config.max_batch_size, dynamic, int(delay), instances)


@dataclass
class Search:
    """One tool's search: what it measured and what it picked."""

    tool: str
    seconds: float
    configs: list[Config]  # every configuration measured (once each)
    measurements: int  # configuration x concurrency points measured
    best: Config | None
    best_concurrency: int
    best_throughput: float  # the tool's own figure
    best_dir: Path | None = None  # a model directory with the best config.pbtxt
    note: str = ""

    def measured(self, config: Config | None) -> bool:
        return config is not None and config in self.configs


def sorted_unique(configs: Sequence[Config]) -> list[Config]:
    return sorted(set(configs))


# -- the served model and its repository ------------------------------------------------------
def model_repository(model: EmbeddedModel, root: Path) -> tuple[Path, str]:
    """The model as the bundled server serves it (ONNX hosted by the python backend) in
    `root`: (its directory, its Triton name)."""
    from pytest_triton.repository.builder import Repository

    spec = dataclasses.replace(model.spec, formats=("onnx",))
    repo = Repository.create([spec], root)
    (variant,) = repo.plan({"python"})
    return repo.ensure(variant), variant.model_name


def staged_backends(install: Installation, directory: Path) -> Path:
    """The bundle's backends with this Python's stub beside the python backend (what
    LocalServer stages for its own servers)."""
    if install.backend_dir is None:
        raise SystemExit(f"tritonserver {install.executable} has no backend directory")
    shutil.copytree(install.backend_dir, directory, ignore=shutil.ignore_patterns("__pycache__"))
    if install.python_stub is not None:
        shutil.copy2(install.python_stub, directory / "python" / install.python_stub.name)
    return directory


def wrapper_script(
    executable: Path, env: Mapping[str, str], backends: Path, shm_prefix: str
) -> str:
    """A tritonserver for model_analyzer's local launch mode: the environment the project's
    launcher gives the server, its staged backends and a shared-memory prefix of our own
    (removed afterwards whatever way the server ended)."""
    exports = "".join(
        f"export {key}={_quote(env[key])}\n" for key in ENV_KEYS if env.get(key) is not None
    )
    return (
        "#!/bin/sh\n"
        "# tritonserver as benchmarks/vs_model_analyzer.py serves it (written per run)\n"
        f"{exports}"
        f'exec {_quote(str(executable))} "$@" --backend-directory={_quote(str(backends))} '
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}\n"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def powers_of_two(top: int) -> list[int]:
    return [2**k for k in range(top.bit_length()) if 2**k <= top]


def ma_config(
    *,
    repository: Path,
    model: str,
    workdir: Path,
    server: Path,
    perf_analyzer: Path,
    ports: Sequence[int],
    input_data: Path,
    max_batch_size: int,
    max_instances: int,
    max_concurrency: int,
) -> dict[str, Any]:
    """model_analyzer's profile configuration (YAML; written as JSON, which YAML reads)."""
    http, grpc, metrics = ports
    return {
        "model_repository": str(repository),
        "output_model_repository_path": str(workdir / "ma-output-models"),
        "override_output_model_repository": True,
        "export_path": str(workdir / "ma-export"),
        "checkpoint_directory": str(workdir / "ma-checkpoints"),
        "triton_launch_mode": "local",
        "triton_server_path": str(server),
        "perf_analyzer_path": str(perf_analyzer),
        "triton_http_endpoint": f"localhost:{http}",
        "triton_grpc_endpoint": f"localhost:{grpc}",
        "triton_metrics_url": f"http://localhost:{metrics}/metrics",
        "client_protocol": "grpc",
        "run_config_search_mode": "brute",
        "run_config_search_max_instance_count": max_instances,
        "run_config_search_min_model_batch_size": 1,
        "run_config_search_max_model_batch_size": max_batch_size,
        "run_config_search_min_concurrency": 1,
        "run_config_search_max_concurrency": max_concurrency,
        "profile_models": {
            model: {
                "cpu_only": True,
                "perf_analyzer_flags": {
                    "input-data": str(input_data),
                },
            }
        },
    }


def perf_input_data(model: EmbeddedModel, path: Path, samples: int = 64) -> Path:
    """perf_analyzer's --input-data: one entry per row of the spec's own inputs (DLRM's
    embedding indices must stay in range: random data would not)."""
    arrays = model.inputs(samples, 0)
    entries = [
        {
            n: {"content": a[i].reshape(-1).tolist(), "shape": list(a.shape[1:])}
            for n, a in arrays.items()
        }
        for i in range(samples)
    ]
    path.write_text(json.dumps({"data": entries}))
    return path


# -- model_analyzer -----------------------------------------------------------------------------
def run_model_analyzer(executable: Path, config: Path, timeout_s: float, log: Path) -> float:
    """`model-analyzer profile`; its wall time, or StepFailed with its last lines. On any
    way out (a failure, a timeout, Ctrl-C) model_analyzer and what it started (its
    tritonserver and perf_analyzer run in sessions of their own) are stopped."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(executable), "profile", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except BaseException as stopped:
            kill_tree(proc.pid)
            proc.wait()
            if isinstance(stopped, subprocess.TimeoutExpired):
                raise StepFailed(
                    f"model_analyzer profile (no end after {timeout_s:.0f} s)",
                    log.read_text(errors="replace"),
                ) from None
            raise
    if code != 0:
        raise StepFailed(f"model_analyzer profile (exit {code})", log.read_text(errors="replace"))
    return time.monotonic() - start


def kill_tree(pid: int) -> None:
    """A process and every descendant (by id), stopped."""
    try:
        root = psutil.Process(pid)
        family = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(family, timeout=10)


def read_ma_results(export: Path, output_models: Path, seconds: float, log: str) -> Search:
    """model_analyzer's search from its inference CSV (a row per configuration and
    concurrency) and its output repository's configs; best: the highest throughput."""
    found = sorted(export.rglob("metrics-model-inference.csv"))
    if not found:
        raise StepFailed("reading model_analyzer's results (no metrics-model-inference.csv)", log)
    with open(found[0], newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if any((v or "").strip() for v in r.values())]
    configs: dict[str, Config] = {}
    best_row: dict[str, str] | None = None
    for row in rows:
        name = (row.get("Model Config Path") or "").strip()
        path = output_models / name / "config.pbtxt"
        if name and path.is_file():
            configs[name] = Config.of(pbtxt.read_config(path))
        if best_row is None or _float(row, "Throughput") > _float(best_row, "Throughput"):
            best_row = row
    if best_row is None:
        raise StepFailed("reading model_analyzer's results (an empty CSV)", log)
    best_name = (best_row.get("Model Config Path") or "").strip()
    return Search(
        "model_analyzer",
        seconds,
        sorted_unique(list(configs.values())),
        len(rows),
        configs.get(best_name),
        int(_float(best_row, "Concurrency")),
        _float(best_row, "Throughput"),
        output_models / best_name if best_name in configs else None,
        note="; ".join([f"best {best_name}", *said(log)]),
    )


def said(log: str) -> list[str]:
    """model_analyzer's own words on where its search stopped and what it recommends."""
    lines = (line.split("] ", 1)[-1].strip() for line in log.splitlines())
    return list(dict.fromkeys(ln for ln in lines if "plateaued" in ln or "better than" in ln))


def _float(row: Mapping[str, str], prefix: str) -> float:
    """A column by its name's start (model_analyzer writes units into its headers)."""
    for key, value in row.items():
        if key and key.strip().startswith(prefix):
            try:
                return float(value)
            except (TypeError, ValueError):
                return math.nan
    return math.nan


# -- triton-tune -------------------------------------------------------------------------------
def tune_command(source: str, args: argparse.Namespace, out: Path, budget_s: float) -> list[str]:
    """triton-tune's quick search over model_analyzer's space (its queue delays its own)."""
    mbs = ",".join(map(str, powers_of_two(args.max_batch_size)))
    return [
        sys.executable,
        "-m",
        "pytest_triton.cli.triton_tune",
        "-m",
        source,
        "--max-batch-sizes",
        mbs,
        "--instance-counts",
        ",".join(str(i) for i in range(1, args.max_instances + 1)),
        "--dynamic-batching",
        "off,on",
        "--threads",
        "0",
        "--concurrency-range",
        ",".join(map(str, powers_of_two(args.max_concurrency))),
        "--time-budget",
        f"{max(1, int(budget_s))}s",
        "--triton-protocol",
        "grpc",
        "-o",
        str(out),
    ]


def run_tune(
    source: str, args: argparse.Namespace, out: Path, budget_s: float, log: Path
) -> Search:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)])}
    env.pop("TRITON_URL", None)
    start = time.monotonic()
    with open(log, "w") as fh:
        done = subprocess.run(
            tune_command(source, args, out, budget_s),
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
            timeout=budget_s + 1800,
        )
    seconds = time.monotonic() - start
    text = log.read_text(errors="replace")
    if done.returncode != 0 or not (out / "tune.json").is_file():
        raise StepFailed(f"triton-tune (exit {done.returncode})", text)
    return read_tune_results(json.loads((out / "tune.json").read_text()), out, seconds)


def read_tune_results(result: Mapping[str, Any], out: Path, seconds: float) -> Search:
    """triton-tune's search from its tune.json (the measured candidates) and config.pbtxt."""

    def key(c: Mapping[str, Any]) -> Config:
        dynamic = bool(c["dynamic_batching"]) and c["max_batch_size"] > 1
        return Config(
            c["max_batch_size"],
            dynamic,
            c["max_queue_delay_us"] if dynamic else 0,
            c["instance_count"],
        )

    measured = [c for c in result["candidates"] if c["status"] == "measured"]
    best = result.get("best")
    disqualified = [c for c in result["candidates"] if c["status"] == "disqualified"]
    note = f"{len(disqualified)} disqualified by parity" if disqualified else ""
    return Search(
        "triton-tune",
        seconds,
        sorted_unique([key(c["candidate"]) for c in measured]),
        len(measured) + sum(max(0, len(c.get("measurements") or []) - 1) for c in measured),
        key(best["candidate"]) if best else None,
        best["candidate"]["concurrency"] if best else 0,
        best["throughput"] if best else math.nan,
        out if (out / "config.pbtxt").is_file() else None,
        note=note,
    )


# -- the referee --------------------------------------------------------------------------------
def referee_repository(
    committed: Path, picks: Mapping[str, Path], root: Path
) -> dict[str, tuple[str, Config]]:
    """The committed model directory and each pick's config.pbtxt over its files, each under a
    name of its own: {role: (Triton name, config)}."""
    root.mkdir(parents=True, exist_ok=True)
    served: dict[str, tuple[str, Config]] = {}
    for role, source in {"committed": committed, **picks}.items():
        name = f"{committed.name}_{role.replace('-', '_')}"
        target = root / name
        shutil.copytree(committed, target, symlinks=False)
        config = pbtxt.read_config(source / "config.pbtxt")
        config.name = name
        pbtxt.write_config(target, config)
        served[role] = (name, Config.of(config))
    return served


@dataclass
class Refereed:
    """One configuration under one tool, each round's figures and their medians."""

    role: str
    tool: str
    rounds: list[Result] = field(default_factory=list)
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # generator, server, rest

    @property
    def median(self) -> Result:
        return median_result(self.rounds)

    @property
    def cpu_median(self) -> tuple[float, float, float]:
        return tuple(statistics.median(c[i] for c in self.cpu) for i in range(3))  # type: ignore[return-value]


@contextlib.contextmanager
def cpu_shares(server_pid: int) -> Iterator[list[float]]:
    """Shares of the machine's CPUs over the block: [generator, server, everything else]
    (the generator: children this process reaped in the block; the server: it and its
    stubs; the rest: the machine's busy time less both)."""
    shares: list[float] = []
    server = psutil.Process(server_pid)

    def server_cpu() -> float:
        total = 0.0
        for process in [server, *server.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += float(times.user + times.system)
        return total

    def busy() -> float:
        t = psutil.cpu_times()
        return float(t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0))

    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0, b0, t0 = server_cpu(), busy(), time.monotonic()
    yield shares
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1, b1, t1 = server_cpu(), busy(), time.monotonic()
    capacity = (t1 - t0) * (psutil.cpu_count() or 1)
    gen = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    srv = s1 - s0
    shares += [gen / capacity, srv / capacity, max(0.0, (b1 - b0) - gen - srv) / capacity]


def referee(
    served: Mapping[str, tuple[str, Config]],
    model: EmbeddedModel,
    source: str,
    args: argparse.Namespace,
    perf_analyzer: Path,
    workdir: Path,
) -> tuple[dict[tuple[str, str], Refereed], dict[str, str]]:
    """Every configuration under both tools, rounds rotated; with --check-answers, each
    configuration's answers first. ({(role, tool): figures}, {role: answer verdict})."""
    root = workdir / "referee-models"
    run_args = argparse.Namespace(
        protocol="grpc",
        batch=1,
        concurrency=args.concurrency,
        request_rate=None,
        window_ms=WINDOW_MS,
        stability=20.0,
        max_trials=args.max_trials,
        timeout=600.0,
    )
    figures = {
        (role, tool): Refereed(role, tool)
        for role in served
        for tool in ("perf_analyzer", "triton-perf")
    }
    answers: dict[str, str] = {}
    server_args = ServerArgs(root, model_control_mode="none", startup_timeout_s=120)
    with LocalLauncher().start(server_args) as server:
        endpoints = server.endpoints
        if args.check_answers:
            for role, (name, config) in served.items():
                answers[role] = check_answers(
                    endpoints.http, name, model, args.answer_requests, config.dynamic_batching
                )
        roles = list(served)
        for round_ in range(args.rounds):
            order = roles[round_ % len(roles) :] + roles[: round_ % len(roles)]
            tools = ["perf_analyzer", "triton-perf"][:: 1 if round_ % 2 == 0 else -1]
            for role in order:
                name = served[role][0]
                target = Served(endpoints, name, source, model.inputs)
                for tool in tools:
                    print(
                        f"[vs-ma] referee round {round_ + 1}/{args.rounds}: {role} ({name}) "
                        f"with {tool} ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    with cpu_shares(server.process.pid) as shares:
                        result = (
                            run_pa(perf_analyzer, target, run_args, workdir)
                            if tool == "perf_analyzer"
                            else run_triton_perf(target, run_args, workdir)
                        )
                    figures[(role, tool)].rounds.append(result)
                    figures[(role, tool)].cpu.append((shares[0], shares[1], shares[2]))
    return figures, answers


def check_answers(
    url: str, name: str, model: EmbeddedModel, requests: int, batching: bool, bursts: int = 5
) -> str:
    """'' when `requests` single-row requests sent together each answer like PyTorch on
    that row alone, else the first difference (request index and parity's description). A
    dynamic-batching configuration gets up to `bursts` until two requests share an execution
    (at a 0 us queue delay a burst's requests may each run alone); 'unproven: ...' if none did."""
    from pytest_triton import TritonClient
    from pytest_triton.client.stats import StatsWindow
    from pytest_triton.parity.compare import compare_outputs

    rows = model.inputs(requests, 0)
    singles = [{n: a[i : i + 1] for n, a in rows.items()} for i in range(requests)]
    outputs = list(model.spec.output_names)
    client = TritonClient(url, "http", timeout_s=60)
    try:
        for _ in range(bursts if batching else 1):
            with StatsWindow(client, name, expect_requests=requests) as window:
                served = client.infer_many(name, singles, outputs)
            wrong = []
            for index, (single, answer) in enumerate(zip(singles, served, strict=True)):
                native = model.reference(single)
                shaped: dict[str, Array] = {
                    k: v.reshape(native[k].shape) if k in native and v.size == native[k].size else v
                    for k, v in answer.items()
                }
                report = compare_outputs(native, shaped, fmt="onnx", context=f"request {index}")
                if not report.ok:
                    wrong.append(" ".join(report.describe().split()))
            if wrong:
                return f"{len(wrong)} of {requests} differ; first: {wrong[0]}"
            if not batching or window.delta.execution_count < requests:
                return ""
    finally:
        client.close()
    return f"unproven: its requests never shared an execution in {bursts} bursts"


def answer_cell(verdict: str) -> str:
    if not verdict:
        return "yes"
    return "unproven" if verdict.startswith("unproven") else "NO"


# -- the report ------------------------------------------------------------------------------
def search_table(searches: Sequence[Search]) -> str:
    """Per tool: its search and whether the other tool measured its best."""
    lines = [
        "| tool | search | configs measured | measurements | best | its figure | "
        "measured by the other |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in searches:
        other = next(o for o in searches if o is not s)
        best = f"{s.best.label()}, c{s.best_concurrency}" if s.best else "none"
        lines.append(
            f"| {s.tool} | {s.seconds:.0f} s | {len(s.configs)} | {s.measurements} | {best} | "
            f"{fmt(s.best_throughput, 1)} infer/s | "
            f"{'yes' if other.measured(s.best) else 'no'} |"
        )
    return "\n".join(lines)


def referee_table(
    served: Mapping[str, tuple[str, Config]],
    figures: Mapping[tuple[str, str], Refereed],
    answers: Mapping[str, str],
) -> str:
    lines = [
        "| configuration | referee | infer/s | p99 | server infer/s | CPU: generator / server "
        "/ rest | answers like PyTorch |",
        "|---|---|---|---|---|---|---|",
    ]
    for role, (_name, config) in served.items():
        for tool in ("perf_analyzer", "triton-perf"):
            ref = figures[(role, tool)]
            r = ref.median
            g, s, o = ref.cpu_median
            verdict = answer_cell(answers[role]) if role in answers else "-"
            lines.append(
                f"| {role}: {config.label()} | {tool} | {fmt(r.throughput, 1)} | "
                f"{fmt(r.p99_us / 1e3, 2)} ms | {fmt(r.server_rate, 1)} | "
                f"{100 * g:.0f}% / {100 * s:.0f}% / {100 * o:.0f}% | {verdict} |"
            )
    return "\n".join(lines)


def ratios(figures: Mapping[tuple[str, str], Refereed]) -> list[str]:
    """triton-tune's best over model_analyzer's, per referee."""
    out = []
    for tool in ("perf_analyzer", "triton-perf"):
        ma = figures.get(("model_analyzer", tool))
        tt = figures.get(("triton-tune", tool))
        if ma is None or tt is None:
            continue
        a, b = ma.median, tt.median
        out.append(
            f"{tool}: triton-tune's best / model_analyzer's: throughput "
            f"{b.throughput / a.throughput:.2f}x, p99 {b.p99_us / a.p99_us:.2f}x"
        )
    return out


# -- the run ---------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-analyzer",
        default=find_model_analyzer(),
        help="model-analyzer's path (default: $MODEL_ANALYZER, else PATH)",
    )
    parser.add_argument("--model", default="centered", help="mnist, dlrm, centered, or M:C")
    parser.add_argument("--max-batch-size", type=int, default=128)
    parser.add_argument("--max-instances", type=int, default=3)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument(
        "--concurrency", type=int, default=16, help="the referee's requests in flight"
    )
    parser.add_argument("--rounds", type=int, default=2, help="referee rounds (rotated)")
    parser.add_argument("--max-trials", type=int, default=10, help="referee windows at most")
    parser.add_argument("--check-answers", action="store_true")
    parser.add_argument("--answer-requests", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=3600.0, help="model_analyzer's, s")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    analyzer = check_model_analyzer(args.model_analyzer)
    perf_analyzer = find_perf_analyzer()
    if perf_analyzer is None:
        raise SystemExit(MISSING)
    source = ALIASES.get(args.model, args.model)
    model = model_source(source)
    # SIGTERM as Ctrl-C: the finally blocks stop model_analyzer's processes and remove the files
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-vs-ma-"))
    shm_prefix = f"vs_ma_{os.getpid()}_"
    try:
        report = run(args, analyzer, perf_analyzer, source, model, workdir, shm_prefix)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        for leftover in Path("/dev/shm").glob(f"{shm_prefix}*"):
            leftover.unlink(missing_ok=True)
    print(report["text"])
    if args.json:
        args.json.write_text(json.dumps(report["data"], indent=2, default=str))
    return 0


def run(
    args: argparse.Namespace,
    analyzer: Path,
    perf_analyzer: Path,
    source: str,
    model: EmbeddedModel,
    workdir: Path,
    shm_prefix: str,
) -> dict[str, Any]:
    def say(line: str) -> None:
        print(f"[vs-ma] {line}", file=sys.stderr, flush=True)

    say(f"exporting {args.model} ...")
    committed, name = model_repository(model, workdir / "models")
    install = find_installation()
    scratch = workdir / "tmp"
    scratch.mkdir()
    env = {**server_environment(install), "TMPDIR": str(scratch)}
    wrapper = workdir / "tritonserver"
    wrapper.write_text(
        wrapper_script(
            install.executable, env, staged_backends(install, workdir / "backends"), shm_prefix
        )
    )
    wrapper.chmod(0o755)
    config = ma_config(
        repository=workdir / "models",
        model=name,
        workdir=workdir,
        server=wrapper,
        perf_analyzer=perf_analyzer,
        ports=free_ports(3, "127.0.0.1"),
        input_data=perf_input_data(model, workdir / "input.json"),
        max_batch_size=args.max_batch_size,
        max_instances=args.max_instances,
        max_concurrency=args.max_concurrency,
    )
    (workdir / "ma.yaml").write_text(json.dumps(config, indent=2))
    say(f"model_analyzer brute search of {name} ...")
    log = workdir / "model_analyzer.log"
    seconds = run_model_analyzer(analyzer, workdir / "ma.yaml", args.timeout, log)
    ma = read_ma_results(
        workdir / "ma-export", workdir / "ma-output-models", seconds, log.read_text()
    )
    say(f"model_analyzer: {len(ma.configs)} configs in {seconds:.0f} s; triton-tune ...")
    tt = run_tune(source, args, workdir / "tune", seconds, workdir / "tune.log")
    say(f"triton-tune: {len(tt.configs)} configs in {tt.seconds:.0f} s; refereeing ...")
    picks = {s.tool: s.best_dir for s in (ma, tt) if s.best_dir is not None}
    served = referee_repository(committed, picks, workdir / "referee-models")
    figures, answers = referee(served, model, source, args, perf_analyzer, workdir)
    head = (
        f"{args.model} ({name}): model_analyzer brute search and triton-tune's quick search "
        f"over mbs 1-{args.max_batch_size}, instances 1-{args.max_instances}, dynamic "
        f"batching, concurrency 1-{args.max_concurrency}; referee: gRPC, batch 1, "
        f"concurrency {args.concurrency}, {WINDOW_MS} ms windows, median of {args.rounds} "
        f"rounds (configurations rotated, tools alternating); {psutil.cpu_count()} cores"
    )
    lines = [head, "", search_table([ma, tt]), "", referee_table(served, figures, answers), ""]
    lines += ratios(figures)
    lines += [f"{role} answers: {verdict}" for role, verdict in answers.items() if verdict]
    lines += [f"{s.tool}: {s.note}" for s in (ma, tt) if s.note]
    data = {
        "model": args.model,
        "searches": [dataclasses.asdict(s) for s in (ma, tt)],
        "served": {role: [n, dataclasses.asdict(c)] for role, (n, c) in served.items()},
        "referee": {
            f"{role}/{tool}": {
                "median": dataclasses.asdict(ref.median),
                "cpu": ref.cpu,
            }
            for (role, tool), ref in figures.items()
        },
        "answers": answers,
    }
    return {"text": "\n".join(lines), "data": data}


if __name__ == "__main__":
    sys.exit(main())
