"""triton-perf against AIPerf on one decoupled model, with Triton's statistics as referee.

ONE tritonserver serves the zoo's stream model (`-m tiny_stream`'s generator); AIPerf and
triton-perf then drive it in turn, alternating (round 1 AIPerf first, round 2 triton-perf
first, ...), with the same load: a closed loop of --concurrency users, one stream each at a
time, a 6-token prompt and --tokens tokens a stream, over HTTP generate_stream (Triton's
server-sent events), for --duration seconds each. Around each run the referee
(vs_perf_analyzer.py's: the server's statistics read every 0.25 s) takes the steady part:
the streams the server completed per second, its average time per stream (request start to
its final response) and, by Little's law, the concurrency the server actually saw
(streams/s x time per stream). A benchmark, not a test: it prints one table.

AIPerf (`pip install aiperf`, in a virtualenv of its own: its dependencies are not this
project's) runs with `--endpoint-type template`: a Jinja payload of token ids in the
model's JSON fields (PROMPT, MAX_TOKENS, STOP_TOKEN), against
`/v2/models/<model>/generate_stream`, `--streaming`, and a WordLevel tokenizer written here
(ids 0..vocab-1 as the words "0".."63", so that AIPerf counts each streamed TOKEN as one
token). Its prompt is one fixed prompt (triton-perf's users cycle through 16 of the same
length: the GRU computes the same work for any prompt of a length).

The definitions differ (docs/streams.md names them): AIPerf's inter-token latency is per
request ((request latency - TTFT) / (tokens - 1)), its percentiles over requests; ours is
every gap between two tokens' responses. Both TTFTs run from the request's send to the first
token's response; AIPerf's output tokens are its tokenizer's count of the streamed text.

    python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf==0.13.0
    python benchmarks/vs_aiperf.py --aiperf /tmp/aiperf-venv/bin/aiperf --concurrency 2 \
        --tokens 16 --duration 10 --rounds 2

With `--text SCHEME` (metaspace_bpe or bytelevel_bpe, tests/helpers/text_tokenizers.py) the
model is a GRU language model in the vLLM layout with that BPE tokenizer: AIPerf sends a text
prompt in vLLM's fields, reads each event's `text_output` and counts output tokens by
encoding each whole output text with the tokenizer; triton-perf counts the server's
`num_output_tokens`. The table's `tokens/stream` column gives each tool's count per stream
beside the server's (--tokens: no stop token, so every stream generates that many).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vs_perf_analyzer import Referee

from pytest_triton.base.urls import Endpoints
from pytest_triton.client.stream_interface import VLLM
from pytest_triton.models.tiny_generator import stream_spec
from pytest_triton.repository.stream import StreamSpec, write_stream_model
from pytest_triton.server import LocalLauncher, ServerArgs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESPONSE_FIELD = "TOKEN && join('', [to_string(TOKEN[0] || TOKEN), ' '])"  # JMESPath
TEXT_SPECS = {"metaspace_bpe": "metaspace_bpe_spec", "bytelevel_bpe": "bytelevel_bpe_spec"}
INSTALL = "python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf==0.13.0"


@dataclass(frozen=True)
class Run:
    """One tool's run: its own figures (ms, per second) and the referee's."""

    tool: str
    round: int
    streams_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    tokens_per_s: float
    e2e_p50_ms: float
    server_streams_per_s: float = float("nan")
    server_stream_ms: float = float("nan")  # the server's average time per stream
    tokens_per_stream: float = float("nan")  # the tool's output tokens per stream

    @property
    def server_concurrency(self) -> float:
        """Little's law: the streams the server had in flight on average."""
        return self.server_streams_per_s * self.server_stream_ms / 1e3


def check_aiperf(path: str) -> Path:
    """The `aiperf` executable, or a SystemExit saying how to install it."""
    found = shutil.which(path) if os.sep not in path else path
    if not found or not os.access(found, os.X_OK):
        raise SystemExit(
            f"--aiperf {path}: no aiperf executable there. Install AIPerf in a virtualenv of "
            f"its own (never this project's: it pins other versions), e.g.\n    {INSTALL}\n"
            "and pass --aiperf /tmp/aiperf-venv/bin/aiperf"
        )
    return Path(found)


def write_tokenizer(vocab: int, directory: Path) -> Path:
    """A WordLevel tokenizer whose words are the token ids' decimal strings (a folder AIPerf
    loads with --tokenizer: tokenizer.json and its config)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    words = {str(i): i for i in range(vocab)} | {"[UNK]": vocab}
    tokenizer = Tokenizer(WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def template(prompt: list[int], tokens: int, workdir: Path) -> Path:
    """AIPerf's Jinja payload, the model's JSON fields with fixed token ids, in a file
    (a path: AIPerf reads a template from a file)."""
    path = workdir / "payload.json.j2"
    path.write_text(json.dumps({"PROMPT": prompt, "MAX_TOKENS": [tokens], "STOP_TOKEN": [-1]}))
    return path


def text_template(prompt: str, tokens: int, workdir: Path) -> Path:
    """AIPerf's payload in the vLLM layout's fields: a text prompt, greedy, `tokens` tokens,
    the server's token counts asked for."""
    fields = VLLM.request(prompt, tokens, -1)
    body = {
        name: (values.reshape(-1)[0].decode() if name in ("text_input", "sampling_parameters")
               else bool(values.reshape(-1)[0]))
        for name, values in fields.items()
    }  # fmt: skip
    path = workdir / "payload.json.j2"
    path.write_text(json.dumps(body))
    return path


def write_text_tokenizer(tokenizer: Any, directory: Path) -> Path:
    """A trained tokenizer as a folder AIPerf loads (tokenizer.json and its config)."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def aiperf_command(
    aiperf: Path, spec: StreamSpec, http: str, args: argparse.Namespace, workdir: Path
) -> list[str]:
    prompt = spec.prompts(1)[0]
    if spec.interface.text:
        text = spec.interface.prompt_text(prompt, spec.tokenizer)
        payload, field = text_template(text, args.tokens, workdir), "text_output"
        tokenizer = write_text_tokenizer(spec.tokenizer, workdir / "tokenizer")
    else:
        payload, field = template(prompt, args.tokens, workdir), RESPONSE_FIELD
        tokenizer = write_tokenizer(spec.vocab, workdir / "tokenizer")
    return [
        str(aiperf),
        "profile",
        "--model",
        spec.name,
        "--url",
        f"http://{http}",
        "--endpoint-type",
        "template",
        "--custom-endpoint",
        f"/v2/models/{spec.name}/generate_stream",
        "--extra-inputs",  # JSON: KEY:VALUE pairs split at commas and colons
        json.dumps(
            {
                "payload_template": str(payload),
                # the id layout: each event's TOKEN as a word of the tokenizer (one token a
                # response); the text layout: each event's text delta
                "response_field": field,
            }
        ),
        "--streaming",
        "--tokenizer",
        str(tokenizer),
        "--synthetic-input-tokens-mean",
        str(len(prompt)),
        "--output-tokens-mean",
        str(args.tokens),
        "--concurrency",
        str(args.concurrency),
        "--benchmark-duration",
        str(args.duration),
        "--warmup-request-count",
        str(2 * args.concurrency),
        "--artifact-dir",
        str(workdir / "aiperf"),
        "--ui-type",
        "none",
    ]


def run_aiperf(
    aiperf: Path, spec: StreamSpec, ends: Endpoints, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One AIPerf run; its JSON export's metrics."""
    cmd = aiperf_command(aiperf, spec, ends.http, args, workdir)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # breaks local folders
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=args.duration * 6 + 120, env=env
    )
    exported = sorted((workdir / "aiperf").rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not exported:
        raise SystemExit(
            f"AIPerf failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-2000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    metrics: dict[str, Any] = json.loads(exported[-1].read_text())
    shutil.rmtree(workdir / "aiperf")
    return metrics


def aiperf_figures(metrics: dict[str, Any], round_: int) -> Run:
    def stat(name: str, key: str) -> float:
        found = metrics.get(name) or metrics.get("records", {}).get(name) or {}
        return float(found.get(key, "nan"))

    return Run(
        "AIPerf",
        round_,
        stat("request_throughput", "avg"),
        stat("time_to_first_token", "p50"),
        stat("time_to_first_token", "p99"),
        stat("inter_token_latency", "p50"),
        stat("inter_token_latency", "p99"),
        stat("output_token_throughput", "avg"),
        stat("request_latency", "p50"),
        tokens_per_stream=stat("output_sequence_length", "avg"),
    )


def run_triton_perf(
    spec: StreamSpec, ends: Endpoints, args: argparse.Namespace, workdir: Path, round_: int
) -> Run:
    """One triton-perf run over HTTP generate_stream: warm-up, then --duration of windows."""
    report = workdir / "triton-perf.json"
    window_ms = int(args.duration * 1000 / 3)
    cmd = [sys.executable, "-m", "pytest_triton.cli.triton_perf", "-m", args.model]
    cmd += ["--model-name", spec.name, "-u", f"http://{ends.http}"]
    cmd += ["--concurrency-range", str(args.concurrency), "--triton-load-warmup", "500"]
    cmd += ["--triton-measurement-interval", str(window_ms), "--max-trials", "3"]
    cmd += ["--triton-allow-unstable", "--no-progress", "--json", str(report)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=args.duration * 6 + 120, cwd=REPO, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"triton-perf failed ({done.returncode}):\n{done.stderr[-3000:]}")
    (point,) = json.loads(report.read_text())["points"]
    return Run(
        "triton-perf",
        round_,
        point["streams_per_s"],
        point["ttft_p50_ms"],
        point["ttft_p99_ms"],
        point["itl_p50_ms"],
        point["itl_p99_ms"],
        point["output_tokens_per_s"],
        point["p50_ms"],
        tokens_per_stream=point["output_tokens"] / point["streams"],
    )


def refereed(run: Run, referee: Referee) -> Run:
    steady, seconds = referee.steady()
    stream_ms = steady.latency_breakdown_us()["request"] / 1e3
    return Run(
        **{
            **run.__dict__,
            "server_streams_per_s": steady.requests / seconds,
            "server_stream_ms": stream_ms,
        }
    )


@contextmanager
def serve(spec: StreamSpec, workdir: Path) -> Iterator[Endpoints]:
    write_stream_model(workdir / "repo", spec)
    args = ServerArgs(workdir / "repo", model_control_mode="none", startup_timeout_s=60)
    with LocalLauncher().start(args) as server:
        yield server.endpoints


def table(runs: list[Run]) -> str:
    lines = [
        "| tool | round | streams/s | server streams/s | server ms/stream | server concurrency "
        "| TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | tokens/s | end to end p50 | tokens/stream |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.tool} | {r.round} | {r.streams_per_s:.1f} | {r.server_streams_per_s:.1f} | "
            f"{r.server_stream_ms:.2f} | {r.server_concurrency:.2f} | {r.ttft_p50_ms:.2f} | "
            f"{r.ttft_p99_ms:.2f} | {r.itl_p50_ms:.3f} | {r.itl_p99_ms:.3f} | "
            f"{r.tokens_per_s:.0f} | {r.e2e_p50_ms:.2f} | {r.tokens_per_stream:.2f} |"
        )
    return "\n".join(lines)


def medians(runs: list[Run]) -> str:
    """Per tool, the median of each figure over its rounds."""
    out = []
    for tool in ("AIPerf", "triton-perf"):
        mine = [r for r in runs if r.tool == tool]
        if not mine:
            continue
        figures = {
            name: statistics.median(getattr(r, name) for r in mine)
            for name in (
                "streams_per_s",
                "server_streams_per_s",
                "server_stream_ms",
                "ttft_p50_ms",
                "itl_p50_ms",
                "tokens_per_s",
                "tokens_per_stream",
            )
        }
        out.append(
            f"{tool} (median of {len(mine)}): "
            + ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", required=True, help="path of AIPerf's `aiperf` executable")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16, help="tokens a stream")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating pairs of runs")
    parser.add_argument("--instances", type=int, default=1, help="the model's instances")
    parser.add_argument(
        "--text",
        choices=sorted(TEXT_SPECS),
        help="serve the vLLM layout with this BPE tokenizer (default: the id layout)",
    )
    args = parser.parse_args(argv)
    aiperf = check_aiperf(args.aiperf)
    if args.tokens != 16:
        raise SystemExit("--tokens: triton-perf's stream users ask for 16 tokens; give 16")
    spec = stream_spec(instances=args.instances)
    args.model = "tiny_stream"
    if args.text:
        sys.path.insert(0, str(REPO))
        from tests.helpers import text_tokenizers

        args.model = f"tests.helpers.text_tokenizers:{TEXT_SPECS[args.text]}"
        spec = text_tokenizers.text_spec(args.text)
        if args.instances != spec.instances:
            spec = dataclasses.replace(spec, instances=args.instances)
    print(f"[vs-aiperf] {spec.name}: {spec.interface.layout} layout", file=sys.stderr)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="vs-aiperf-") as tmp, serve(spec, Path(tmp)) as ends:
        port = int(ends.http.rsplit(":", 1)[1])
        for round_ in range(1, args.rounds + 1):
            order = ("AIPerf", "triton-perf") if round_ % 2 else ("triton-perf", "AIPerf")
            for tool in order:
                print(f"[vs-aiperf] round {round_}: {tool}", file=sys.stderr)
                with Referee(ends.http, spec.name, port) as referee:
                    if tool == "AIPerf":
                        metrics = run_aiperf(aiperf, spec, ends, args, Path(tmp))
                        run = aiperf_figures(metrics, round_)
                    else:
                        run = run_triton_perf(spec, ends, args, Path(tmp), round_)
                runs.append(refereed(run, referee))
                time.sleep(1)
    print(table(runs))
    print(medians(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
