"""Fails the release when the committed DLRM serving configuration falls more than a share short
of the best one triton-tune finds on this session's server (opt-in: `--tune-gate`; a search
measures several configurations and takes minutes, too long for every gate run).

`tune()` runs in this process (its load generator is a subprocess: importing locust here would
patch pytest's process with gevent) against the session's own server, which runs in explicit
model-control mode, so each candidate is uploaded beside the models under test. Its JSON lands
in the --triton-report directory as `load-tune-dlrm.json`: the gate report shows the committed
and the best configuration and fails the release on the same check.

`--tune-budget` (seconds, default 600) bounds the search; TRITON_* variables of triton-tune's
settings (e.g. TRITON_MEASUREMENT_INTERVAL=5000 on a quiet runner) set its windows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_triton import Deployment, TritonConfig
from pytest_triton.base.config_resolution import resolve
from pytest_triton.base.setting_sources import from_environ
from pytest_triton.load.tune.tuner import SpaceChoice, TuneOptions, tune

ROWS = 1024  # rows per request, as the DLRM load gate sends them


@pytest.mark.tune
def test_committed_dlrm_config_is_within_reach_of_the_best(
    triton_server: Deployment,
    triton_config: TritonConfig,
    pytestconfig: pytest.Config,
    tmp_path: Path,
) -> None:
    within = float(pytestconfig.getoption("tune_within"))
    report = Path(triton_config.gate.report) if triton_config.gate.report else tmp_path
    report.mkdir(parents=True, exist_ok=True)
    config = resolve(
        from_environ(os.environ, "tune"), url=f"http://{triton_server.server.endpoints.http}"
    )
    outcome = tune(
        TuneOptions(
            model="dlrm",
            request_batch=ROWS,
            # what a 2-core CPU server can change; widen it on bigger hardware
            choice=SpaceChoice(
                dynamic_batching=(False, True),
                queue_delays_us=(0, 1000),
                instance_counts=(1, 2),
                threads=(0,),
                concurrencies=(1, 2, 4),
            ),
            time_budget_s=float(pytestconfig.getoption("tune_budget")),
            gate_within=within,
            config=config,
            output_dir=tmp_path / "tune-dlrm",
            json_path=report / "load-tune-dlrm.json",
        )
    )
    for line in outcome.summary():
        print(line)
    assert outcome.gate is not None
    assert outcome.gate.passed, outcome.gate.message
