"""Soak: Locust keeps 8 users on a zoo model for a long time; does anything drift or leak?

A benchmark, not a timed test. The script starts the zoo model's embedded server itself (the
same server a locustfile starts without --host: exported, python-hosted on the bundled CPU
tritonserver), runs the zoo locustfile against it in a Locust subprocess, and samples every few
seconds the RSS of the server (tritonserver plus its python stubs) and of the Locust process,
and the server's successful request count (statistics API). It reports the failed requests,
the throughput of the first and the last window (a minute by default) and the drift between
them, and the RSS growth of server and client between those windows.

Exit status: 0 when no request failed and neither RSS grew by more than --max-rss-growth (5%);
1 otherwise (the report says which); 2 when the run itself could not be made.

    python benchmarks/soak.py                                  # 10 minutes, MNIST, HTTP
    python benchmarks/soak.py --model dlrm --protocol grpc --duration 30m
    python benchmarks/soak.py --duration 20s --window 5s --sample-interval 1s   # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from pytest_triton import TritonClient
from pytest_triton.client.stats import read_stats
from pytest_triton.load.runner.embedded import EmbeddedServer, zoo_model

REPO = Path(__file__).resolve().parent.parent

MODELS = ("mnist", "dlrm")
MB = 2**20


def seconds(text: str) -> float:
    """'10m', '20s', '1h30m' or plain seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if not text or parts is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 10m, 90s or 1h30m")
    h, m, s = (int(p or 0) for p in parts.groups())
    return float(h * 3600 + m * 60 + s)


@dataclass
class Sample:
    t: float  # seconds since Locust started
    server_rss: int  # tritonserver + its python stubs
    client_rss: int  # the Locust process
    requests: int  # successful requests the server counted so far


@dataclass
class Window:
    start: float
    end: float
    throughput: float  # successful requests per second
    server_rss_mb: float  # mean over the window's samples
    client_rss_mb: float


@dataclass
class Report:
    model: str
    protocol: str
    users: int
    duration_s: float
    requests: int
    failures: int
    first: Window
    last: Window
    throughput_drift: float  # (last - first) / first
    server_rss_growth: float
    client_rss_growth: float
    max_rss_growth: float
    passed: bool
    throughputs: list[float] = field(default_factory=list)  # every window from the first on
    reasons: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    def text(self) -> str:
        f, la = self.first, self.last
        lines = [
            f"Soak: {self.model} ({self.protocol}), {self.users} users, {self.duration_s:.0f} s",
            f"  requests: {self.requests:,} ({self.failures} failed)",
            f"  throughput: first window ({f.start:.0f}-{f.end:.0f} s) {f.throughput:,.1f} "
            f"req/s, last window ({la.start:.0f}-{la.end:.0f} s) {la.throughput:,.1f} req/s, "
            f"drift {self.throughput_drift:+.1%}",
            f"  throughput per window: {', '.join(f'{t:,.0f}' for t in self.throughputs)} req/s",
            f"  server RSS (tritonserver + stubs): {f.server_rss_mb:,.1f} -> "
            f"{la.server_rss_mb:,.1f} MiB ({self.server_rss_growth:+.2%})",
            f"  client RSS (Locust): {f.client_rss_mb:,.1f} -> {la.client_rss_mb:,.1f} MiB "
            f"({self.client_rss_growth:+.2%})",
            f"RESULT: {'PASS' if self.passed else 'FAIL - ' + '; '.join(self.reasons)}",
        ]
        return "\n".join(lines)


def tree_rss(pid: int) -> int:
    """RSS of a process and all its descendants (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def window(samples: list[Sample], start: float, end: float) -> Window:
    inside = [s for s in samples if start <= s.t <= end]
    if len(inside) < 2:
        raise ValueError(
            f"fewer than 2 samples between {start:.0f} and {end:.0f} s: sample "
            "more often (--sample-interval) or use a longer --window"
        )
    first, last = inside[0], inside[-1]
    return Window(
        first.t,
        last.t,
        (last.requests - first.requests) / (last.t - first.t),
        statistics.fmean(s.server_rss for s in inside) / MB,
        statistics.fmean(s.client_rss for s in inside) / MB,
    )


def growth(before: float, after: float) -> float:
    return (after - before) / before if before else 0.0


def judge(
    samples: list[Sample],
    window_s: float,
    requests: int,
    failures: int,
    max_growth: float,
    **about: Any,
) -> Report:
    """Windows from the first sample with load to the last one with load; the verdict."""
    loaded = [s for s in samples if s.requests > 0]
    if len(loaded) < 2:
        raise ValueError("the server counted no requests: nothing to judge")
    begin = next(s.t for s in samples if s.requests > 0)
    end = next(s.t for s in samples if s.requests == loaded[-1].requests)
    span = min(window_s, (end - begin) / 2)  # two windows that do not overlap
    first, last = window(samples, begin, begin + span), window(samples, end - span, end)
    report = Report(
        requests=requests,
        failures=failures,
        first=first,
        last=last,
        throughput_drift=growth(first.throughput, last.throughput),
        server_rss_growth=growth(first.server_rss_mb, last.server_rss_mb),
        client_rss_growth=growth(first.client_rss_mb, last.client_rss_mb),
        max_rss_growth=max_growth,
        passed=True,
        samples=samples,
        **about,
    )
    start = begin
    while start + span <= end + 1e-9:  # the run window by window: is a drift steady or noise?
        with contextlib.suppress(ValueError):
            report.throughputs.append(window(samples, start, start + span).throughput)
        start += span
    if failures:
        report.reasons.append(f"{failures} of {requests} requests failed")
    for side, grown in (("server", report.server_rss_growth), ("client", report.client_rss_growth)):
        if grown > max_growth:
            report.reasons.append(f"{side} RSS grew {grown:.2%} (limit {max_growth:.0%})")
    report.passed = not report.reasons
    return report


def run(args: argparse.Namespace, workdir: Path) -> Report:
    served = zoo_model(args.model)
    server = EmbeddedServer([served], progress=lambda m: print(f"[soak] {m}", flush=True))
    endpoints = server.start()
    try:
        model = server.model_names()[0]
        host = f"{args.protocol}://{endpoints.url(args.protocol)}"
        stats = TritonClient(endpoints.http, "http", timeout_s=30)
        tritonserver = server.deployment.server.process.pid  # type: ignore[union-attr]
        report_json = workdir / "locust.json"
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(REPO / "locustfiles" / f"{args.model}.py"),
            "--headless",
            "-u",
            str(args.users),
            "-r",
            str(args.users),
            "-t",
            f"{args.duration:.0f}s",
            "--host",
            host,
            "--only-summary",
            "--triton-report-json",
            str(report_json),
        ]
        print(
            f"[soak] {args.users} users on {model} at {host} for {args.duration:.0f} s", flush=True
        )
        samples: list[Sample] = []
        log = workdir / "locust.log"
        with open(log, "w") as out:
            locust = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            started = time.monotonic()
            deadline = started + args.duration + 300  # start-up and shutdown included
            next_report = started + 60
            while locust.poll() is None:
                if time.monotonic() > deadline:
                    locust.kill()
                    raise SystemExit(f"locust did not end by {args.duration + 300:.0f} s")
                samples.append(
                    Sample(
                        time.monotonic() - started,
                        tree_rss(tritonserver),
                        tree_rss(locust.pid),
                        read_stats(stats, model).success.count,
                    )
                )
                if time.monotonic() >= next_report:
                    s = samples[-1]
                    print(
                        f"[soak] {s.t:.0f} s: {s.requests:,} requests, server "
                        f"{s.server_rss / MB:.1f} MiB, client {s.client_rss / MB:.1f} MiB",
                        flush=True,
                    )
                    next_report += 60
                time.sleep(args.sample_interval)
        if not report_json.exists():
            raise SystemExit(
                f"locust failed (exit {locust.returncode}):\n{log.read_text()[-3000:]}"
            )
        measured = json.loads(report_json.read_text())["measured"]
        stats.close()
    finally:
        server.stop()
    samples = [s for s in samples if s.client_rss]  # Locust's own start and end
    return judge(
        samples,
        args.window,
        measured["requests"],
        measured["failures"],
        args.max_rss_growth,
        model=model,
        protocol=args.protocol,
        users=args.users,
        duration_s=args.duration,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        choices=MODELS,
        default="mnist",
        help="zoo model (small configuration, its locustfile)",
    )
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument(
        "--duration", type=seconds, default=600.0, help="load duration (default 10m)"
    )
    parser.add_argument(
        "--window", type=seconds, default=60.0, help="first and last window compared (default 1m)"
    )
    parser.add_argument(
        "--sample-interval",
        type=seconds,
        default=5.0,
        help="seconds between RSS and request-count samples (default 5)",
    )
    parser.add_argument(
        "--max-rss-growth",
        type=float,
        default=0.05,
        help="largest RSS growth allowed, server and client (default 0.05)",
    )
    parser.add_argument("--report-json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pytest-triton-soak-") as tmp:
        try:
            report = run(args, Path(tmp))
        except (ValueError, SystemExit) as exc:
            print(f"soak: {exc}", file=sys.stderr)
            return 2
    print(report.text(), flush=True)
    if args.report_json:
        args.report_json.write_text(json.dumps(asdict(report), indent=2))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
