"""triton-perf against perf_analyzer on one server, with Triton's statistics as referee.

ONE tritonserver serves one model; perf_analyzer 2.51 (`make perf-analyzer`) and triton-perf
then measure it in turn with the same batch size, concurrency (or request rate), protocol,
measurement window, stability threshold and input data, after the same load unmeasured
(--warmup), in the order --first says. Around each tool's run a sampler reads
the server's statistics API every 0.25 s: the referee's figures (requests, server-side
throughput, average queue and compute per request) come from the steady part of each run,
after the first second of load and before it stops, so warm-up and the tools' different run
lengths do not count. Printed: per tool, client throughput, p50/p99, the referee's figures,
and perf_analyzer's latency breakdown for both tools (client send / network+server send-recv /
client recv from perf_analyzer's --verbose-csv; for triton-perf, client overhead = its average
latency - the server's average request latency). A benchmark, not a test.

Targets: the referee's figures for the two tools within 3% of each other (exit 1 otherwise);
client throughput within 5% and p99 within 10%, or the gap explained by the tools' measured
client overheads (each case is printed; exit 1 when neither holds). In a closed loop the
server's inferences/s are concurrency x batch over the cycle (server request latency + the
tool's client overhead): a gap there with the server's request latencies within 3% is the
tools' own overheads, and is said so.

    make perf-analyzer
    python benchmarks/vs_perf_analyzer.py --model trivial --concurrency 8 --protocol grpc
    python benchmarks/vs_perf_analyzer.py --model dlrm --batch 256 --concurrency 4 --rounds 3
    python benchmarks/vs_perf_analyzer.py --model resnext101-32x4d --batch 8 --request-rate 20

Models: `trivial` (loadgen_vs_wrk.py's python-backend Y = X, the client-bound case) or a zoo
model (small size), served as ONNX by the embedded server (the python backend hosts it).

`--pin`: the server with its python stubs on the first CPU, the tools (and this script) on
the others. On two shared cores the tools' own CPU is a share the server loses: perf_analyzer
spends about twice triton-perf's CPU a request, and the server then computes slower for it;
pinned, both tools meet the same server and what differs is the load they send. Pinned, the
hosted model runs one compute thread (`--model-threads`, default: the server's CPUs): with
onnxruntime's default (a thread per core, idle ones spinning) the second thread spun on the
one CPU against the working one, and DLRM's compute took 9.3-10.8 ms a request in six runs of
one tool, against 6.0-6.4 ms with one thread, too unsteady to compare two tools within 3%.

Compute per request is per execution (Triton counts an execution's time for each request in
it): a tool whose requests reach the server together more often gets fuller executions and a
longer compute per request for the same work. The compute per inference (per row) is printed
beside it, and a compute gap that the rows per execution explain is said so (as client
throughput's gap explained by the tools' client overheads).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import psutil
import torch
from perf_analyzer_tool import MISSING, find_perf_analyzer, run_perf_analyzer, unstable_figures

from pytest_triton import ModelSpec, TritonClient
from pytest_triton.base.dtypes import Array
from pytest_triton.client.stats import ModelStats, read_stats
from pytest_triton.load.runner.embedded import EmbeddedServer, zoo_model
from pytest_triton.server import LocalLauncher, ServerArgs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SERVER_TOLERANCE = 0.03
THROUGHPUT_TOLERANCE = 0.05
P99_TOLERANCE = 0.10
SAMPLE_S = 0.25
SETTLE_S = 1.0  # load before this much time into a run is warm-up for the referee
COUNT_EVERY = 8  # samples between two counts of the tool's connections (a /proc scan each)


def trivial_spec() -> ModelSpec:
    """The trivial model's signature as a spec, so that triton-perf (-m loadgen_vs_wrk's...)
    can make its inputs: X, FP32 [4]; the served model is loadgen_vs_wrk.py's raw Y = X."""
    return ModelSpec(
        name="trivial",
        module=torch.nn.Identity,
        example_inputs={"X": torch.full((1, 4), 3.0)},
        inputs=["X"],
        outputs=["Y"],
        max_batch_size=64,
        input_factory=lambda batch, seed: {"X": torch.full((batch, 4), float(seed % 7))},
    )


@dataclass(frozen=True)
class Served:
    endpoints: Any
    model: str  # the name on the server
    source: str  # triton-perf's -m
    inputs: Callable[[int, int], dict[str, Array]]


@contextlib.contextmanager
def serve(name: str, workdir: Path, threads: int = 0) -> Iterator[Served]:
    """One server for both tools: the project's local launcher (trivial) or embedded server.
    `threads`: the hosted model's compute threads (0: its runtime's default)."""
    if name == "trivial":
        from loadgen_vs_wrk import write_trivial

        write_trivial(workdir / "repo")
        spec = trivial_spec()
        args = ServerArgs(workdir / "repo", model_control_mode="none", startup_timeout_s=60)
        with LocalLauncher().start(args) as local:
            yield Served(
                local.endpoints, "trivial", "vs_perf_analyzer:trivial_spec", spec.make_inputs
            )
        return
    parameters = {"intra_op_threads": str(threads)} if threads else {}
    embedded = zoo_model(name, parameters=parameters)
    server = EmbeddedServer([embedded], progress=lambda m: print(f"[vs-pa] {m}", file=sys.stderr))
    try:
        yield Served(server.start(), embedded.model_name(), name, embedded.inputs)
    finally:
        server.stop()


USER_BATCHES = 4  # TritonUser.distinct_inputs (not imported: locust would patch this process)


def input_data(served: Served, args: argparse.Namespace, path: Path) -> Path:
    """perf_analyzer's --input-data JSON: one entry per sample (no batch axis), the samples
    of every batch triton-perf's users send: user n cycles through the batches of seeds 4n
    to 4n+3 (embedding indices must stay in range: random data would not). Given one batch
    of samples only, perf_analyzer sent the same 256 rows over and over where triton-perf
    sent 16 batches (the server computed DLRM 13% faster for it in a pinned run: its
    embedding rows could stay in the caches)."""
    users = 1 if args.request_rate else args.concurrency
    entries = []
    for seed in range(USER_BATCHES * users):
        arrays = served.inputs(max(args.batch, 16), seed)
        count = next(iter(arrays.values())).shape[0]
        entries += [
            {
                n: {"content": a[i].reshape(-1).tolist(), "shape": list(a.shape[1:])}
                for n, a in arrays.items()
            }
            for i in range(count)
        ]
    path.write_text(json.dumps({"data": entries}))
    return path


# -- the referee -------------------------------------------------------------------------------
@dataclass
class Referee:
    """The server's statistics sampled through a run."""

    url: str
    model: str
    port: int  # where the load goes: the tool's connections to it are counted
    samples: list[tuple[float, ModelStats]] = field(default_factory=list)
    connections: int = 0  # the most the tool had open at once
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Referee:
        client = TritonClient(self.url, "http", timeout_s=30)
        self.samples = [(time.monotonic(), read_stats(client, self.model))]

        def loop() -> None:
            try:
                while not self._stop.wait(SAMPLE_S):
                    self.samples.append((time.monotonic(), read_stats(client, self.model)))
                    if len(self.samples) % COUNT_EVERY == 0:
                        self.connections = max(self.connections, self.count_connections())
            finally:
                client.close()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(2 * SAMPLE_S)  # statistics lag the last responses
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def count_connections(self) -> int:
        """Established connections to the load's port from other processes than this one
        (its own statistics requests): how the tool spreads its requests over the wire (one
        HTTP/2 connection carries many streams)."""
        return sum(
            1
            for c in psutil.net_connections(kind="tcp")
            if c.raddr
            and c.raddr.port == self.port
            and c.status == psutil.CONN_ESTABLISHED
            and c.pid != os.getpid()
        )

    @property
    def whole(self) -> ModelStats:
        return self.samples[-1][1] - self.samples[0][1]

    def steady(self) -> tuple[ModelStats, float]:
        """The delta (and seconds) between the first sample SETTLE_S after load began and the
        last sample before it stopped."""
        (t0, first), last = self.samples[0], self.samples[-1][1].requests
        began = next((t for t, s in self.samples if s.requests > first.requests), None)
        if began is None:
            raise SystemExit("the server saw no request of the tool's run")
        inner = [(t, s) for t, s in self.samples if t >= began + SETTLE_S and s.requests < last]
        if len(inner) < 2:
            raise SystemExit(
                f"the referee found no steady part in the tool's run: the server saw "
                f"{last - first.requests} requests over {self.samples[-1][0] - t0:.1f} s, all "
                f"within {SETTLE_S:g} s of the first (a run too short, or a load that stopped)"
            )
        (t0, s0), (t1, s1) = inner[0], inner[-1]
        return s1 - s0, t1 - t0


@dataclass
class Result:
    tool: str
    throughput: float  # client's infer/s
    p50_us: float
    p99_us: float
    avg_us: float
    breakdown: dict[str, float]  # perf_analyzer's client columns (send, network, recv), usec
    requests: int = 0  # the server's count over the whole run
    server_rate: float = 0.0  # the server's inferences/s, steady part
    queue_us: float = 0.0
    compute_us: float = 0.0  # input + infer + output per request
    avg_batch: float = 0.0  # the server's rows per execution: how requests reached it together
    connections: float = 0.0  # the tool's connections to the server (the most at once)
    request_us: float = 0.0  # the server's average request latency
    wall_s: float = 0.0
    csv: str = ""
    note: str = ""  # how the tool's own measurement went (windows, stability)

    @property
    def compute_per_inference_us(self) -> float:
        """Compute per row: the work's speed, whatever the batches' fill."""
        return self.compute_us / self.avg_batch if self.avg_batch else math.nan

    @property
    def overhead_us(self) -> float:
        """Client latency outside the server: avg client latency - server request latency."""
        return self.avg_us - self.request_us

    def judge(self, referee: Referee) -> None:
        steady, seconds = referee.steady()
        b = steady.latency_breakdown_us()
        self.requests = referee.whole.requests
        self.server_rate = steady.inference_count / seconds
        self.queue_us = b["queue"]
        self.compute_us = b["compute_input"] + b["compute_infer"] + b["compute_output"]
        self.request_us = b["request"]
        self.avg_batch = steady.avg_batch_size
        self.connections = referee.connections


def median_result(results: list[Result]) -> Result:
    """Each figure's median over the rounds (a round's note and CSV are the first's)."""
    first = results[0]
    numbers = {
        f.name: statistics.median(getattr(r, f.name) for r in results)
        for f in fields(Result)
        if isinstance(getattr(first, f.name), (int, float))
    }
    breakdown = {
        k: statistics.median(r.breakdown.get(k, math.nan) for r in results) for k in first.breakdown
    }
    notes = "; ".join(r.note for r in results)
    return replace(first, **numbers, breakdown=breakdown, note=notes)


PAIRED = {  # the server's figures compared round by round
    "server infer/s": lambda r: r.server_rate,
    "avg queue": lambda r: r.queue_us,
    "avg compute": lambda r: r.compute_us,
    "compute per inference": lambda r: r.compute_per_inference_us,
    "rows per execution": lambda r: r.avg_batch,
    "server request": lambda r: r.request_us,
}


def paired_gaps(pas: list[Result], tps: list[Result]) -> dict[str, float]:
    """Per figure, the median over the rounds of triton-perf's figure against perf_analyzer's
    of the same round, in percent: the tools of one round ran one after the other, so a
    machine whose speed drifts between rounds moves both alike (the medians of each tool's
    own figures mix rounds the drift set apart)."""
    return {
        label: 100 * statistics.median(of(tp) / of(pa) - 1 for pa, tp in zip(pas, tps, strict=True))
        for label, of in PAIRED.items()
    }


def load_port(served: Served, args: argparse.Namespace) -> int:
    return int(served.endpoints.url(args.protocol).rsplit(":", 1)[1])


def load_args(args: argparse.Namespace) -> list[str]:
    if args.request_rate:
        return ["--request-rate-range", f"{args.request_rate:g}"]
    return ["--concurrency-range", str(args.concurrency)]


def window_args(args: argparse.Namespace, trials: str = "-r") -> list[str]:
    return ["-p", str(args.window_ms), "-s", f"{args.stability:g}", trials, str(args.max_trials)]


def pin(served_cpu: int = 0) -> str:
    """The server's processes (this script's children now: the server and its stubs, every
    thread of each) on `served_cpu`; this script, and the tools it starts from now on, on
    the other CPUs. What it did, for the report."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    rest = [c for c in cpus if c != served_cpu]
    for process in psutil.Process().children(recursive=True):
        for thread in process.threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread.id, {served_cpu})
    os.sched_setaffinity(0, rest)
    return f"server on CPU {served_cpu}, the tools on CPU {','.join(map(str, rest))}"


def warm_up(executable: Path, served: Served, args: argparse.Namespace, workdir: Path) -> None:
    """The same load, unmeasured: three windows of a third of --warmup each."""
    url = served.endpoints.url(args.protocol)
    cmd = ["-m", served.model, "-u", url, "-i", args.protocol, "-b", str(args.batch)]
    cmd += [*load_args(args), "-p", str(max(1, int(args.warmup * 1000 / 3))), "-s", "100"]
    cmd += ["-r", "3", "--input-data", str(input_data(served, args, workdir / "in.json"))]
    done = run_perf_analyzer(executable, cmd, workdir / "warmup.csv", timeout_s=args.timeout)
    # The warm-up is load, not a measurement: windows that disagree (a busy machine) are fine.
    if done.returncode != 0 and "Failed to obtain stable measurement" not in done.output:
        raise SystemExit(f"perf_analyzer's warm-up failed ({done.returncode}):\n{done.output}")


def run_pa(executable: Path, served: Served, args: argparse.Namespace, workdir: Path) -> Result:
    url = served.endpoints.url(args.protocol)
    cmd = ["-m", served.model, "-u", url, "-i", args.protocol, "-b", str(args.batch)]
    cmd += [*load_args(args), *window_args(args), "--verbose-csv", "-v"]
    cmd += ["--input-data", str(input_data(served, args, workdir / "input.json"))]
    csv_path = workdir / "perf_analyzer.csv"
    with Referee(served.endpoints.http, served.model, load_port(served, args)) as referee:
        done = run_perf_analyzer(executable, cmd, csv_path, timeout_s=args.timeout)
    if done.returncode != 0 or not done.rows:
        unstable = unstable_passes(done.output)
        if unstable is None:
            raise SystemExit(f"perf_analyzer failed ({done.returncode}):\n{done.output[-3000:]}")
        result = unstable  # the referee's figures still count: they are the server's
        result.wall_s = done.wall_s
        result.judge(referee)
        return result
    row = done.rows[-1]

    def us(column: str) -> float:
        return float(row.get(column) or "nan")

    result = Result(
        "perf_analyzer",
        float(row["Inferences/Second"]),
        us("p50 latency"),
        us("p99 latency"),
        us("Avg latency"),
        {
            "send": us("Client Send"),
            "network": us("Network+Server Send/Recv"),
            "recv": us("Client Recv"),
        },
        wall_s=done.wall_s,
        csv=csv_path.read_text(),
        note=f"{done.output.count('Pass [')} windows, stable",
    )
    result.judge(referee)
    return result


def unstable_passes(output: str) -> Result | None:
    """perf_analyzer's figures when its windows never agreed (perf_analyzer_tool's
    unstable_figures: its last three windows, no percentiles); None otherwise."""
    found = unstable_figures(output)
    if found is None:
        return None
    throughput, avg_us, windows = found
    nan = math.nan
    return Result(
        "perf_analyzer",
        throughput,
        nan,
        nan,
        avg_us,
        {"send": nan, "network": nan, "recv": nan},
        note=f"{windows} windows, NOT stable (its last 3 windows)",
    )


def run_triton_perf(served: Served, args: argparse.Namespace, workdir: Path) -> Result:
    url = f"{args.protocol}://{served.endpoints.url(args.protocol)}"
    cmd = [sys.executable, "-m", "pytest_triton.cli.triton_perf", "-m", served.source]
    cmd += ["--model-name", served.model, "-u", url, "--triton-protocol", args.protocol]
    cmd += ["-b", str(args.batch), *load_args(args), *window_args(args, "--max-trials")]
    cmd += ["--triton-allow-unstable", "--no-progress"]
    csv_path, report = workdir / "triton-perf.csv", workdir / "triton-perf.json"
    cmd += ["-f", str(csv_path), "--json", str(report)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(HERE), str(REPO), os.environ.get("PYTHONPATH")])
        ),
    }
    start = time.monotonic()
    with Referee(served.endpoints.http, served.model, load_port(served, args)) as referee:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO, env=env
        )
    if done.returncode != 0:
        raise SystemExit(f"triton-perf failed ({done.returncode}):\n{done.stderr[-3000:]}")
    (point,) = json.loads(report.read_text())["points"]
    result = Result(
        "triton-perf",
        point["throughput"],
        point["p50_ms"] * 1e3,
        point["p99_ms"] * 1e3,
        point["avg_ms"] * 1e3,
        {},
        wall_s=time.monotonic() - start,
        csv=csv_path.read_text(),
        note=f"{len(point['windows'])} windows, "
        + ("stable" if point["stable"] else f"NOT stable: {point['stability']}"),
    )
    result.judge(referee)
    return result


# -- verdicts ----------------------------------------------------------------------------------
def gap(a: float, b: float) -> float:
    """Relative difference of two figures (to their mean)."""
    mean = (abs(a) + abs(b)) / 2
    return abs(a - b) / mean if mean else 0.0


def explained(
    line: str, apart: float, cause: str, tolerance: float = SERVER_TOLERANCE
) -> tuple[bool, str]:
    """A gap judged by the figure that would account for it (`apart`: that figure's own gap;
    `cause` names it, its parenthesis left open for the gap)."""
    ok = apart <= tolerance
    verdict = "explained" if ok else "NOT explained"
    return ok, f"{line}{verdict} by {cause}, {100 * apart:.1f}% apart)"


def compute_explained(pa: Result, tp: Result, line: str) -> tuple[bool, str]:
    """A compute-per-request gap is the batches' fill when the compute per row agrees: the
    same work at the same speed, in fuller or emptier executions."""
    a, b = pa.compute_per_inference_us, tp.compute_per_inference_us
    cause = (
        f"rows per execution ({pa.avg_batch:.0f} vs {tp.avg_batch:.0f}; compute per inference "
        f"{a:.2f} vs {b:.2f} us"
    )
    return explained(line, gap(a, b), cause)


def overhead_explained(
    pa: Result, tp: Result, line: str, tolerance: float = SERVER_TOLERANCE
) -> tuple[bool, str]:
    """Closed loop: a user's next request leaves once its answer is handled, so each cycle is
    the server's request latency plus the tool's client overhead, and throughput (the
    server's inferences/s, the client's) goes as concurrency x batch / cycle (Little's law).
    With the server's request latency the same for both tools, the rest of a gap is how long
    each tool takes between an answer and the next request: its own overhead, not the load
    the server sees."""
    cause = (
        f"client overhead ({pa.overhead_us:.0f} us per request for perf_analyzer, "
        f"{tp.overhead_us:.0f} us for triton-perf; server request latencies "
        f"{pa.request_us:.0f} vs {tp.request_us:.0f} us"
    )
    return explained(line, gap(pa.request_us, tp.request_us), cause, tolerance)


Explain = Callable[[Result, Result, str], tuple[bool, str]]


def verdicts(pa: Result, tp: Result, args: argparse.Namespace) -> list[tuple[bool, str]]:
    """(passed, line) per target. Open loop: both tools send the asked rate, and no gap is
    explained by client overhead."""
    closed = not args.request_rate
    lines: list[tuple[bool, str]] = []
    server: list[tuple[str, float, float, Explain | None]] = [
        (
            "server inferences/s",
            pa.server_rate,
            tp.server_rate,
            overhead_explained if closed else None,
        ),
        ("server avg queue", pa.queue_us, tp.queue_us, None),
        ("server avg compute", pa.compute_us, tp.compute_us, compute_explained),
    ]
    for label, a, b, explain in server:
        d = gap(a, b)
        line = f"{label}: {a:,.1f} vs {b:,.1f} ({100 * d:.1f}% apart; target 3%): "
        if d > SERVER_TOLERANCE and explain is not None:
            lines.append(explain(pa, tp, line))
        else:
            lines.append(
                (d <= SERVER_TOLERANCE, line + ("PASS" if d <= SERVER_TOLERANCE else "FAIL"))
            )
    d = gap(pa.throughput, tp.throughput)
    line = f"client throughput: {100 * d:.1f}% apart"
    if d <= THROUGHPUT_TOLERANCE:
        lines.append((True, f"{line}: within 5%"))
    elif closed:
        lines.append(overhead_explained(pa, tp, f"{line} (target 5%): ", THROUGHPUT_TOLERANCE))
    else:
        lines.append((False, f"{line} (target 5%): NOT explained by client overhead"))
    d = gap(pa.p99_us, tp.p99_us)
    line = f"client p99: {100 * d:.1f}% apart"
    if d <= P99_TOLERANCE:
        lines.append((True, f"{line}: within 10%"))
    else:
        a, b = pa.p99_us - pa.overhead_us, tp.p99_us - tp.overhead_us
        cause = f"client overhead (p99 - overhead: {a:.0f} vs {b:.0f} us"
        lines.append(explained(f"{line} (target 10%): ", gap(a, b), cause, P99_TOLERANCE))
    return lines


def fmt(value: float | None, digits: int = 0) -> str:
    """A figure for a table: thousands separated, "-" where there is none."""
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def tables(results: list[Result]) -> str:
    lines = [
        "| tool | client infer/s | p50 | p99 | server requests | server infer/s | "
        "avg queue | avg compute | compute per inference | rows per execution | connections |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.tool} | {fmt(r.throughput, 1)} | {fmt(r.p50_us)} µs | {fmt(r.p99_us)} µs | "
            f"{r.requests:,} | {fmt(r.server_rate, 1)} | {fmt(r.queue_us)} µs | "
            f"{fmt(r.compute_us)} µs | {fmt(r.compute_per_inference_us, 2)} µs | "
            f"{fmt(r.avg_batch, 1)} | {fmt(r.connections)} |"
        )
    lines += [
        "",
        "| tool | avg latency | client send | network + server send/recv | client recv | "
        "client overhead (avg - server request) | server request | server queue | "
        "server compute |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        send, net, recv = (r.breakdown.get(k, math.nan) for k in ("send", "network", "recv"))
        lines.append(
            f"| {r.tool} | {fmt(r.avg_us)} µs | {fmt(send)} | {fmt(net)} | {fmt(recv)} | "
            f"{fmt(r.overhead_us)} µs | {fmt(r.request_us)} µs | {fmt(r.queue_us)} µs | "
            f"{fmt(r.compute_us)} µs |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default="trivial", help="trivial, or a zoo model (dlrm, resnext101-32x4d, ...)"
    )
    parser.add_argument("--batch", type=int, default=1, help="batch size of every request")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight")
    parser.add_argument(
        "--request-rate", type=float, default=None, help="open loop at this many requests/s"
    )
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--duration", type=float, default=3.0, help="seconds per measurement window (-p)"
    )
    parser.add_argument(
        "--stability",
        type=float,
        default=20.0,
        help="-s, percent (default 20: windows on a shared 2-core machine vary by 10-30%%)",
    )
    parser.add_argument("--max-trials", type=int, default=10, help="-r: windows at most")
    parser.add_argument(
        "--warmup",
        type=float,
        default=9.0,
        help="seconds of the same load, unmeasured, before either tool measures (the first "
        "tool would otherwise measure a cold model: JIT, caches, the python backend's stubs)",
    )
    parser.add_argument(
        "--first",
        choices=("perf_analyzer", "triton-perf"),
        default="perf_analyzer",
        help="which tool measures first (run both orders to see what order costs)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of both tools, alternating which goes first (from --first); figures and "
        "verdicts are the medians over the rounds (a shared machine's load drifts between runs)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on the first CPU, the tools on the others (neither tool's CPU is "
        "then taken from the server)",
    )
    parser.add_argument(
        "--model-threads",
        type=int,
        default=None,
        help="the hosted model's compute threads (onnxruntime's intra-op threads); default: "
        "1 with --pin (the server's one CPU), else the runtime's own (a thread per core)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per tool run")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    args.window_ms = int(args.duration * 1000)
    if args.model_threads is None:
        args.model_threads = 1 if args.pin else 0
    executable = find_perf_analyzer()
    if executable is None:
        print(MISSING, file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="pytest-triton-vs-pa-"))
    try:
        with serve(args.model, workdir, args.model_threads) as served:
            if args.pin:
                print(f"[vs-pa] {pin()}", file=sys.stderr, flush=True)
            if args.warmup > 0:
                print(f"[vs-pa] warming {served.model} up ...", file=sys.stderr, flush=True)
                warm_up(executable, served, args, workdir)
            runs: dict[str, Callable[[], Result]] = {
                "perf_analyzer": lambda: run_pa(executable, served, args, workdir),
                "triton-perf": lambda: run_triton_perf(served, args, workdir),
            }
            done: dict[str, list[Result]] = {tool: [] for tool in runs}
            for round_ in range(args.rounds):  # rounds alternate which tool goes first
                order = sorted(runs, key=lambda tool: (tool != args.first) != (round_ % 2 == 1))
                for tool in order:
                    print(
                        f"[vs-pa] round {round_ + 1}/{args.rounds}: {tool} on {served.model} ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    done[tool].append(runs[tool]())
            pa, tp = median_result(done["perf_analyzer"]), median_result(done["triton-perf"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load = (
        f"request rate {args.request_rate:g}/s"
        if args.request_rate
        else f"concurrency {args.concurrency}"
    )
    print(
        f"\n{args.model}, batch {args.batch}, {load}, {args.protocol}, {args.window_ms} ms "
        f"windows (stability {args.stability:g}%, at most {args.max_trials}), after "
        f"{args.warmup:g} s of warm-up, {args.first} first"
        + (f", median of {args.rounds} alternating rounds" if args.rounds > 1 else "")
        + (", the server pinned to CPU 0 and the tools to the others" if args.pin else "")
        + (f", the model on {args.model_threads} compute thread(s)" if args.model_threads else "")
        + "; server figures "
        f"from the statistics API over each run's steady part; {os.cpu_count()} cores, load "
        f"average {os.getloadavg()[0]:.1f}\n"
    )
    if args.rounds > 1:
        print("each round:\n")
        print(
            tables(
                [
                    replace(r, tool=f"{r.tool} (round {i + 1})")
                    for i in range(args.rounds)
                    for r in (done["perf_analyzer"][i], done["triton-perf"][i])
                ]
            )
        )
        print(f"\nmedians of {args.rounds} rounds:\n")
    print(tables([pa, tp]))
    print()
    for r in (pa, tp):
        print(f"  {r.tool}: {r.note}, {r.wall_s:.0f} s")
    judged = verdicts(pa, tp, args)
    for ok, line in judged:
        print(("  " if ok else "! ") + line)
    paired = paired_gaps(done["perf_analyzer"], done["triton-perf"])
    if args.rounds > 1:
        print(
            "  paired by round (median of triton-perf / perf_analyzer - 1, for a machine that "
            "drifts): " + ", ".join(f"{label} {gap:+.1f}%" for label, gap in paired.items())
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "results": [vars(r) for r in (pa, tp)],
                    "rounds": {tool: [vars(r) for r in rs] for tool, rs in done.items()},
                    "paired_percent": paired,
                    "verdicts": [{"passed": ok, "line": line} for ok, line in judged],
                },
                indent=2,
            )
        )
    return 0 if all(ok for ok, _ in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
