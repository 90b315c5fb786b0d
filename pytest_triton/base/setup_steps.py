"""One sink for the steps of a long set-up (an export, a server start, a model load, a load
run): the logger `pytest_triton.progress`. Any layer says a step here; the pytest plugin shows
them where they do not break pytest's progress lines (plugin/step_report.py), and elsewhere they
are ordinary log records."""

from __future__ import annotations

import logging

LOGGER = "pytest_triton.progress"

log = logging.getLogger(LOGGER)


def say(message: str) -> None:
    """Report a step ("exported mnist-onnx in 3.1s"); a step that only says it starts ends
    with "..." and is shown only where the test fails (in its captured log)."""
    log.info(message)
