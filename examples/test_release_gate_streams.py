"""Fails the release when the streaming example (a decoupled token generator) misses its time
to first token, inter-token latency or output tokens/s targets, or streams a wrong token.

locustfiles/streams.py serves the generator itself (an embedded server: the session's server
holds no decoupled model) and runs in a subprocess, since importing locust would patch
pytest's process with gevent. Every stream is compared token by token with PyTorch's greedy
generation (--triton-check-every 1). Its verdict file, `load-streams.json` in the
--triton-report directory, joins the gate report: the targets' rows and a line with the
streams' TTFT, ITL and tokens/s.

The targets hold with a wide margin on a 2-core CPU shared with other work (measured there
over 30 s at 4 users: TTFT p99 92 ms, ITL p99 28 ms, 675 tokens/s; see docs/streams.md); set
your own for your hardware. As in the DLRM gate, stability is reported without failing on
it (--triton-allow-unstable); drop that flag on a dedicated runner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

LOCUSTFILE = Path(__file__).resolve().parent.parent / "locustfiles" / "streams.py"
USERS, SECONDS = 2, 8
TARGETS = {
    "--perf-ttft-p99": "2000",
    "--perf-itl-p99": "1000",
    "--perf-output-tokens-per-s": "20",
    "--perf-fail-ratio": "0",
}
WINDOWS = (
    "--triton-load-warmup",
    "1000",
    "--triton-measurement-interval",
    "1000",
    "--triton-allow-unstable",
    "--triton-check-every",
    "1",
)


@pytest.mark.load
def test_streams_meet_their_targets(
    gate_report_dir: Path, locust_gate: Callable[..., None]
) -> None:
    report = gate_report_dir / "load-streams.json"
    arguments = [
        "-u",
        str(USERS),
        "-r",
        str(USERS),
        "-t",
        f"{SECONDS}s",
        *WINDOWS,
        *(part for flag, value in TARGETS.items() for part in (flag, value)),
    ]
    locust_gate(LOCUSTFILE, report, arguments, SECONDS + 180)
