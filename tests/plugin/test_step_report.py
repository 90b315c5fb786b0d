"""Set-up steps (exports, server starts, load runs) are shown without breaking pytest's progress
lines: a gate-like session through pytester (the real plugin, a small model exported and served
by the bundled tritonserver), in -v, the default mode and -q, as a non-TTY log."""

from __future__ import annotations

import re

import pytest

from pytest_triton.plugin.step_report import seconds, shown
from tests.helpers.plugin_runs import CONFTEST

TEST_A = """
import pytest

def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=2)

def test_batching(triton_model, triton_client):
    triton_model.assert_batched_parity(triton_client, requests=4)

def test_plain():
    pass
"""

# The same steps said by a fixture of the test's own: the line logic without a server
TEST_A_SAID = """
import pytest
from pytest_triton.base import setup_steps

@pytest.fixture(scope="module")
def triton_server():
    setup_steps.say("exporting affine-torchscript-trace-hosted ...")
    setup_steps.say("exported affine-torchscript-trace-hosted in 0.1s")
    setup_steps.say("triton_server: local server ready in 0.2s")
    yield
    setup_steps.say("triton_server: stopped in 0.1s")

def test_parity(triton_server):
    pass

def test_batching(triton_server):
    pass

def test_plain():
    pass
"""

TEST_B = """
from pytest_triton.base import setup_steps

def test_a_long_load_run():
    setup_steps.say("locust -f probe.py exited 0 in 6.0s")  # as tests/helpers/locust_runs does

def test_after():
    pass
"""


def _session(pytester: pytest.Pytester, mode: str) -> tuple[str, list[str], list[int]]:
    """A session of five tests in two files; its output, its lines and where the step lines
    are. -v: a gate-like session on the bundled server; default and -q: the same steps said
    by a fixture (the line logic, a server start cheaper)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a=TEST_A if mode == "-v" else TEST_A_SAID, test_b=TEST_B)
    # in process: no second interpreter importing torch; its terminal is not a TTY
    args = ([] if mode == "default" else [mode]) + ["--triton-protocol=http"]
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    out = result.stdout.str()
    assert result.ret == 0, out
    result.assert_outcomes(passed=5)
    lines = out.splitlines()
    steps = [i for i, line in enumerate(lines) if "[pytest-triton]" in line]
    assert not any("exporting" in lines[i] for i in steps), "start lines are for failures"
    return out, lines, steps


@pytest.mark.triton
def test_verbose_each_test_line_once_and_the_steps_right_after_it(
    pytester: pytest.Pytester,
) -> None:
    out, lines, steps = _session(pytester, "-v")
    ids = sorted(set(re.findall(r"^(test_[ab]\.py::\S+) PASSED", out, re.MULTILINE)))
    assert len(ids) == 5, out
    # the progress lines; pytest's warnings summary names the test that warned (torch's
    # TorchScript deprecation, said once a process: in the first session that exports)
    progress = out.split(" warnings summary ")[0]
    for test_id in ids:
        assert progress.count(test_id) == 1, f"{test_id} printed more than once:\n{out}"
    first = next(i for i, line in enumerate(lines) if line.startswith("test_a.py::"))
    # the first served test's server start and export, right after its result line
    after = lines[first + 1] + lines[first + 2]
    assert "exported affine-torchscript-trace" in after, out
    assert "triton_server: local server ready in" in after, out
    assert any("probe.py exited 0 in 6.0s" in lines[i] for i in steps), out


def test_default_steps_at_the_file_lines_boundaries(pytester: pytest.Pytester) -> None:
    out, lines, steps = _session(pytester, "default")
    files = [line for line in lines if line.startswith("test_")]
    assert [f.split()[0] for f in files] == ["test_a.py", "test_b.py"], out
    assert files[0].startswith("test_a.py ...") and files[0].endswith("%]"), out
    a, b = (lines.index(f) for f in files)
    assert steps and all(a < i < b for i in steps[:2]) and steps[-1] > b, out
    assert lines[b - 1] != "", "no blank line between a file's steps and the next file"


def test_quiet_long_steps_only_in_the_summary(pytester: pytest.Pytester) -> None:
    out, lines, steps = _session(pytester, "-q")
    assert not steps, f"-q has no file lines to put steps after:\n{out}"
    summary = lines.index(next(line for line in lines if "long set-up steps" in line))
    assert (
        "locust -f probe.py exited 0 in 6.0s  (test_b.py::test_a_long_load_run)"
        in lines[summary + 1 :]
    ), out
    assert "exported affine" not in out, "a step of 0.1 s is only counted"


def test_quiet_without_a_long_step_prints_no_section(pytester: pytest.Pytester) -> None:
    """Steps all shorter than SLOW_S: no "long set-up steps" section that would only say
    "... and 3 more step(s)" and list nothing."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_a=TEST_A_SAID)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    out = result.stdout.str()
    result.assert_outcomes(passed=3)
    assert "long set-up steps" not in out and "more step(s)" not in out, out


def test_which_steps_are_shown_and_their_durations() -> None:
    assert shown("exported mnist-onnx in 3.1s") and not shown("exporting mnist-onnx ...")
    assert seconds("locust -f dlrm.py exited 0 in 12.5s") == 12.5
    assert seconds("triton_server: local server ready in 3s") == 3.0
    assert seconds("exporting mnist-onnx ...") is None
