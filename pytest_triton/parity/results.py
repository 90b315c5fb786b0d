"""What a served check found, kept where it is computed: parity figures per output, the path
the requests took (protocol, transport) and the batching the statistics showed.

ServedModel hands each result to its Deployment's listeners; the pytest plugin records them on
the running test item for the gate report. Nothing here parses log text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_triton.base.config import Numerics
from pytest_triton.client.stats import ModelStats
from pytest_triton.parity.compare import OutputDiff, ParityReport, finite_or_none

Check = Literal[
    "parity", "batched_parity", "sequence_parity", "pipeline_parity", "pipeline_batching"
]
NO_TRANSPORT = "none"


def transport_of(client: object) -> str:
    """The client's data path besides the protocol (shared memory, when a client offers it);
    "none" for plain requests."""
    for attribute in ("transport", "shared_memory"):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            return value
    return NO_TRANSPORT


@dataclass(frozen=True)
class ParityResult:
    """One parity check of one served variant over one protocol and transport.

    A batched check sends several requests together; its figures are the worst over them.
    """

    variant: str  # the test id part: dlrm-onnx-hosted
    model: str  # the spec's name
    triton_model: str
    format: str
    precision: str
    backend: str  # the Triton backend that served it (python for hosted variants)
    protocol: str
    transport: str
    check: Check
    batch_size: int
    requests: int
    reports: tuple[ParityReport, ...]
    batching: ModelStats | None = None
    server: str = ""  # the server's HTTP endpoint, to tell several servers apart
    device: str = "cpu"  # where the instances ran: the tolerance tables' device
    numerics: Numerics = "strict"
    # a pipeline's check: its name, mode, front model, the first diverging step of a failed
    # parity check, each composing model's batching (session/served_pipeline.py)
    pipeline: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reports)

    @property
    def headroom_used(self) -> float:
        return max((r.headroom_used for r in self.reports), default=0.0)

    def outputs(self) -> list[dict[str, Any]]:
        """Per output, the worst figures over every request of the check."""
        merged: dict[str, list[OutputDiff]] = {}
        for report in self.reports:
            for diff in report.diffs:
                merged.setdefault(diff.name, []).append(diff)
        return [_merge(diffs) for diffs in merged.values()]

    def as_dict(self) -> dict[str, Any]:
        batching = None
        if self.batching is not None:
            b = self.batching
            batching = {
                "requests": b.requests,
                "executions": b.execution_count,
                "inferences": b.inference_count,
                "avg_batch_size": b.avg_batch_size,
                "batch_histogram": {str(k): v for k, v in sorted(b.batches.items())},
                "queue_us": b.queue.avg_us,
                "compute_infer_us": b.compute_infer.avg_us,
            }
        extra = {"pipeline": dict(self.pipeline)} if self.pipeline is not None else {}
        return {
            "variant": self.variant,
            "model": self.model,
            "triton_model": self.triton_model,
            "format": self.format,
            "precision": self.precision,
            "backend": self.backend,
            "protocol": self.protocol,
            "transport": self.transport,
            "check": self.check,
            "batch_size": self.batch_size,
            "requests": self.requests,
            "ok": self.ok,
            "headroom_used": finite_or_none(self.headroom_used),
            "outputs": self.outputs(),
            "batching": batching,
            "server": self.server,
            "device": self.device,
            "numerics": self.numerics,
            **extra,
        }


def _merge(diffs: Sequence[OutputDiff]) -> dict[str, Any]:
    worst = max(diffs, key=lambda d: d.headroom_used)
    return {
        **worst.as_dict(),
        "max_abs": finite_or_none(max(d.max_abs for d in diffs)),
        "max_rel": finite_or_none(max(d.max_rel for d in diffs)),
        "mismatched": sum(d.mismatched for d in diffs),
        "total": sum(d.total for d in diffs),
        "ok": all(d.ok for d in diffs),
        "problem": next((d.problem for d in diffs if d.problem), ""),
    }
