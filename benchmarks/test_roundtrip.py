"""One request's round trip per backend x protocol x batch size (pytest-benchmark).

    pytest benchmarks/test_roundtrip.py --benchmark-autosave          # save a baseline
    pytest benchmarks/test_roundtrip.py --benchmark-compare \\
        --benchmark-compare-fail=median:25%                           # compare with it
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_triton import TritonClient
from pytest_triton.session.deployment import ServedModel

pytestmark = pytest.mark.triton


@pytest.mark.parametrize("batch_size", [1, 8])
def test_round_trip(
    benchmark: Any, bench_model: ServedModel, bench_client: TritonClient, batch_size: int
) -> None:
    inputs = bench_model.inputs(batch_size)
    outputs = bench_model.variant.spec.output_names
    bench_client.infer(bench_model.name, inputs, outputs)  # warm: first call loads lazily
    benchmark.group = f"{bench_model.variant.spec.name} batch {batch_size}"
    benchmark.extra_info.update(
        variant=bench_model.id, protocol=bench_client.protocol, batch_size=batch_size
    )
    result = benchmark(bench_client.infer, bench_model.name, inputs, outputs)
    assert set(result) == set(outputs)
    assert all(len(v) == batch_size for v in result.values())
