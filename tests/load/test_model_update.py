"""A model update under load from Locust (--triton-update-to): the embedded server loads the
probe's version 2 (other weights) beside version 1 during the run, then retires version 1;
every answer is checked against both versions' PyTorch references. An update to a version
that serves wrong answers fails the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.locust_runs import PROBE_LOCUSTFILE, run_locust

pytestmark = [pytest.mark.load, pytest.mark.triton]
UPDATE = ("--triton-update-to", "tests.helpers.probe_models:probe_v2_spec")


def test_a_model_update_under_load_keeps_every_answer_right(tmp_path: Path) -> None:
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "120s",  # a bound: the run ends 3 s after the update, however long its load took
        "--triton-format",
        "torchscript-trace",
        *UPDATE,
        "--triton-update-at",
        "2",
        "--triton-update-then",
        "3",
        tmp_path=tmp_path,
        timeout=240,
    )
    assert run.code == 0, run.tail()
    assert run.report is not None
    update = run.report["update"]
    assert update["done"] and update["error"] is None, update
    assert (update["old_version"], update["new_version"]) == (1, 2)
    assert update["requests_after_switch"] > 0 and update["p99_during_switch_ms"] > 0, update
    measured = run.report["measured"]
    assert measured["failures"] == 0 and measured["wrong_answers"] == 0, run.tail()
    assert "Model update: probe_torchscript_trace version 1 -> 2" in run.output
    assert "answers checked against PyTorch" in run.output


def test_an_update_to_a_version_serving_wrong_answers_fails_the_run(tmp_path: Path) -> None:
    """Version 2's exported model answers 1 higher than its PyTorch module: the update
    itself succeeds, and every answer after it is wrong, which the verdict names."""
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "120s",  # a bound, as in the test above
        "--triton-format",
        "torchscript-trace",
        "--triton-update-to",
        "tests.helpers.probe_models:broken_v2_spec",
        "--triton-update-at",
        "1",
        "--triton-update-then",
        "3",
        tmp_path=tmp_path,
        timeout=240,
    )
    assert run.code == 1, run.tail()
    assert run.report is not None
    assert run.report["update"]["done"], run.report["update"]
    wrong = run.report["wrong_answers"]
    assert wrong > 0 and run.report["measured"]["wrong_answers"] == wrong, run.tail()
    assert "wrong answer: model 'probe_torchscript_trace'" in run.output, run.tail()
    assert "RESULT: FAIL - " in run.output and "wrong_answers measured" in run.output


def test_an_update_needs_the_server_the_locustfile_starts(tmp_path: Path) -> None:
    run = run_locust(
        PROBE_LOCUSTFILE,
        "--headless",
        "-u",
        "1",
        "-t",
        "2s",
        "--host",
        "http://127.0.0.1:9",
        *UPDATE,
        tmp_path=tmp_path,
        timeout=60,
    )
    assert run.code == 2, run.tail()
    assert "--triton-update-to updates the model of the server a locustfile starts" in run.output
