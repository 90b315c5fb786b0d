"""`triton-perf`: its command line and entry point; the sweep it drives is
load/perf/command.py's `run`.

    triton-perf -m dlrm -b 4096 --concurrency-range 1:16 -f dlrm.csv --markdown dlrm.md \
        --plot dlrm.png --latency-bound 250 --search
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.errors import ConfigError, TritonTestError
from pytest_triton.base.setting_sources import (
    add_arguments,
    check_environ,
    from_arguments,
    from_environ,
    join_dash_values,
)
from pytest_triton.base.version import __version__
from pytest_triton.load.perf.command import run
from pytest_triton.load.perf.points import parse_range, parse_rate_range


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,  # a setting another front end takes is refused, never abbreviated
        prog="triton-perf",
        description="Sweep concurrency and batch size of one model with Locust users "
        "(perf_analyzer's concurrency mode) and report throughput and latency; a stateful "
        "model is driven in sequences (--sequence-length, --sequence-id-range), a decoupled "
        "one in streams (time to first token, inter-token latency, tokens/s).",
    )
    p.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )  # the package's version (pyproject.toml, through importlib.metadata)
    p.add_argument(
        "-m",
        "--model",
        required=True,
        help="zoo model (dlrm, resnext101-32x4d, bert, mnist, text_recognition, ...; "
        "streaming_gru, a stateful model driven in sequences; tiny_stream, a decoupled "
        "token generator) or MODULE:CALLABLE returning a ModelSpec, SequenceSpec or "
        "StreamSpec; with --url the served config says which kind the model is",
    )
    p.add_argument(
        "--size", choices=("small", "full"), default="small", help="zoo model size (default small)"
    )
    p.add_argument(
        "--model-name",
        default=None,
        help="the model's name on --url (default: the embedded server's name)",
    )
    p.add_argument(
        "-b",
        "--batch-size",
        default="1",
        help="batch sizes, comma list or START:END:STEP (default 1)",
    )
    p.add_argument(
        "--concurrency-range",
        default="1",
        help="concurrencies, START:END:STEP as perf_analyzer, or a comma list",
    )
    p.add_argument(
        "--request-rate-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="open loop instead of concurrency: requests per second to measure, as "
        "perf_analyzer's (floats; or a comma list); see --triton-request-rate",
    )
    p.add_argument(
        "--percentile",
        type=int,
        choices=(50, 90, 95, 99),
        default=99,
        help="latency percentile for --latency-bound (default 99)",
    )
    p.add_argument(
        "--latency-bound",
        type=float,
        default=None,
        metavar="MS",
        help="report the largest concurrency within this latency and its throughput",
    )
    p.add_argument(
        "--search",
        action="store_true",
        help="with --latency-bound: double the concurrency from the range's start "
        "until the bound breaks, then bisect (instead of measuring every point)",
    )
    p.add_argument("-f", "--csv", type=Path, default=None, help="CSV (perf_analyzer columns)")
    p.add_argument("--markdown", type=Path, default=None, help="markdown table")
    p.add_argument("--plot", type=Path, default=None, help="PNG latency vs throughput plot")
    p.add_argument("--json", type=Path, default=None, help="all points as JSON")
    p.add_argument("--unit", default=None, help="throughput unit label (default per model)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_arguments(
        p.add_argument_group(
            "pytest-triton settings (also read from TRITON_* environment variables)"
        ),
        "perf",
    )
    return p


def perf_config(args: argparse.Namespace) -> TritonConfig:
    """Command line over TRITON_* variables over the table's defaults."""
    check_environ(os.environ, "perf")
    config = resolve(from_arguments(args, "perf"), from_environ(os.environ, "perf"))
    if config.client.protocol is not None and len(config.client.protocol) > 1:
        raise ConfigError(
            "triton-perf measures one protocol per run: pass --triton-protocol http or grpc"
        )
    return config


def perf_main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(join_dash_values(sys.argv[1:] if argv is None else argv))
    try:
        parse_range(args.batch_size)
        parse_range(args.concurrency_range)
        if args.request_rate_range is not None:
            parse_rate_range(args.request_rate_range)
    except ValueError as exc:
        _parser().error(str(exc))
    # SIGTERM must unwind through run()'s finally: the server and the generator go with us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return run(args, perf_config(args))
    except KeyboardInterrupt:
        print("[triton-perf] interrupted", file=sys.stderr)
        return 130
    except (TritonTestError, ValueError, OSError) as exc:
        print(f"[triton-perf] error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(perf_main())
