"""`triton-tune`: its command line and entry point; the search it drives is
load/tune/tuner.py's `tune`."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

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
from pytest_triton.load.perf.points import parse_range
from pytest_triton.load.tune import space as sp
from pytest_triton.load.tune.accuracy_rule import rule_for
from pytest_triton.load.tune.strategy import OBJECTIVES, Constraints
from pytest_triton.load.tune.tables import Outcome, markdown
from pytest_triton.load.tune.tuner import SpaceChoice, TuneOptions, tune


def _duration(text: str) -> float:
    """Seconds: '600', '90s', '10m', '1h'."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 600, 90s or 10m")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,  # a setting another front end takes is refused, never abbreviated
        prog="triton-tune",
        description="Search serving configurations of one model (format, precision, "
        "max_batch_size, dynamic batching, instances, intra-op threads, client concurrency): "
        "each candidate is deployed, checked against PyTorch (fp32: element-wise parity; "
        "int8/fp16: accuracy, --min-accuracy-ratio) and measured; writes every candidate "
        "(CSV, markdown, JSON), a Pareto plot and the best config.pbtxt with its diff.",
    )
    p.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )  # the package's version (pyproject.toml, through importlib.metadata)
    p.add_argument(
        "-m", "--model", required=True, help="zoo model or MODULE:CALLABLE returning a ModelSpec"
    )
    p.add_argument("--size", choices=("small", "full"), default="small")
    p.add_argument("-b", "--batch-size", type=int, default=1, help="rows per request (default 1)")
    space = p.add_argument_group("search space (comma lists; default: a few around the committed)")
    space.add_argument(
        "--formats", default=None, help="export formats (default --triton-format or onnx)"
    )
    space.add_argument("--max-batch-sizes", default=None, metavar="N,N")
    space.add_argument("--dynamic-batching", default=None, metavar="off,on", help="default off,on")
    space.add_argument(
        "--queue-delays", default=None, metavar="US,US", help="max_queue_delay_microseconds"
    )
    space.add_argument(
        "--preferred-batch-sizes",
        default=None,
        metavar="SETS",
        help="sets separated by ';', e.g. 'none;4,8' (default none)",
    )
    space.add_argument("--instance-counts", default=None, metavar="N,N")
    space.add_argument(
        "--instance-kinds", default=None, metavar="KIND,KIND", help="default: the server's"
    )
    space.add_argument(
        "--threads",
        default=None,
        metavar="N,N",
        help="intra-op threads per instance, 0 = the backend's default (default 0,1)",
    )
    space.add_argument(
        "--concurrency-range",
        default=None,
        help="client concurrencies, START:END:STEP or a comma list (default 1,2,4,8)",
    )
    goal = p.add_argument_group("objective and constraints")
    goal.add_argument("--objective", choices=OBJECTIVES, default="throughput")
    goal.add_argument(
        "--slo",
        type=float,
        default=None,
        metavar="MS",
        help="latency SLO: each candidate's share of requests within it (goodput)",
    )
    goal.add_argument(
        "--max-memory",
        type=float,
        default=None,
        metavar="MB",
        help="resident memory of the server's processes at most: a local server that "
        "triton-tune starts (refused with --triton-url or a container, where it is unknown)",
    )
    search = p.add_argument_group("search")
    search.add_argument("--mode", choices=("quick", "exhaustive"), default="quick")
    search.add_argument(
        "--time-budget", type=_duration, default=None, help="stop starting candidates after it"
    )
    search.add_argument(
        "--committed",
        type=Path,
        default=None,
        metavar="CONFIG_PBTXT",
        help="the committed config.pbtxt: the search starts from its serving settings "
        "(default: the model spec's own) and the best config is written as a change to it",
    )
    search.add_argument(
        "--committed-concurrency",
        type=int,
        default=None,
        help="where the search starts (default: the smallest concurrency)",
    )
    search.add_argument(
        "--confirm",
        type=int,
        default=1,
        metavar="N",
        help="measure the committed and the best configuration N more times at the end, "
        "alternately; their figures become medians (default 1; 0: off)",
    )
    search.add_argument(
        "--gate-within",
        type=float,
        default=None,
        metavar="PERCENT",
        help="exit 1 when the committed configuration is more than this share below the "
        "best one found on the objective",
    )
    out = p.add_argument_group("output")
    out.add_argument("-o", "--output-dir", type=Path, default=None, help="default tune-MODEL")
    out.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the JSON here (e.g. REPORT_DIR/load-tune-dlrm.json for the gate report)",
    )
    out.add_argument("--unit", default=None, help="throughput unit label")
    add_arguments(
        p.add_argument_group("pytest-triton settings (also read from TRITON_* variables)"),
        "tune",
    )
    return p


def options_from(args: argparse.Namespace) -> TuneOptions:
    check_environ(os.environ, "tune")
    config = resolve(from_arguments(args, "tune"), from_environ(os.environ, "tune"))
    if config.load.request_rate:
        raise ConfigError("triton-tune measures closed loops: leave out --triton-request-rate")
    choice = SpaceChoice(
        formats=tuple(f.strip() for f in args.formats.split(",") if f.strip())
        if args.formats
        else None,
        max_batch_sizes=sp.parse_ints(args.max_batch_sizes, "max batch sizes", 0)
        if args.max_batch_sizes
        else None,
        dynamic_batching=sp.parse_switch(args.dynamic_batching) if args.dynamic_batching else None,
        queue_delays_us=sp.parse_ints(args.queue_delays, "queue delays", 0)
        if args.queue_delays
        else None,
        preferred_batch_sizes=sp.parse_preferred(args.preferred_batch_sizes)
        if args.preferred_batch_sizes
        else None,
        instance_counts=sp.parse_ints(args.instance_counts, "instance counts", 1)
        if args.instance_counts
        else None,
        instance_kinds=sp.parse_kinds(args.instance_kinds) if args.instance_kinds else None,
        threads=sp.parse_ints(args.threads, "threads", 0) if args.threads else None,
        concurrencies=tuple(parse_range(args.concurrency_range))
        if args.concurrency_range
        else None,
        precisions=sp.searched_precisions(config.serving.precisions)
        if config.serving.precisions
        else None,
    )
    accuracy = rule_for(
        choice.precisions or ("fp32",),
        config.gate.min_accuracy_ratio,
        config.gate.accuracy_dataset,
    )
    constraints = Constraints(
        max_p99_ms=config.gate.perf_latency_p99,
        min_throughput=config.gate.perf_throughput,
        max_memory_mb=args.max_memory,
    )
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.model.rsplit(":", 1)[-1])
    return TuneOptions(
        model=args.model,
        size=args.size,
        request_batch=args.batch_size,
        choice=choice,
        objective=args.objective,
        constraints=constraints,
        accuracy=accuracy,
        slo_ms=args.slo,
        mode=args.mode,
        time_budget_s=args.time_budget,
        committed=args.committed,
        committed_concurrency=args.committed_concurrency,
        gate_within=args.gate_within,
        confirm=args.confirm,
        config=config,
        output_dir=args.output_dir or Path(f"tune-{name}"),
        json_path=args.json,
        unit=args.unit,
    )


def tune_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(join_dash_values(sys.argv[1:] if argv is None else argv))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        options = options_from(args)
        outcome = tune(options)
    except KeyboardInterrupt:
        print("[triton-tune] interrupted", file=sys.stderr)
        return 130
    except (TritonTestError, OSError) as exc:
        print(f"[triton-tune] error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        parser.error(str(exc))
    print(open_table(outcome, options))
    for line in outcome.summary():
        print(line)
    if outcome.gate is not None and not outcome.gate.passed:
        return 1
    if outcome.best is None or outcome.committed_failed is not None:
        return 1
    return 0


def open_table(outcome: Outcome, options: TuneOptions) -> str:
    where = f"\nwritten to {options.output_dir}/" if options.output_dir else ""
    return markdown(outcome) + where


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(tune_main())
