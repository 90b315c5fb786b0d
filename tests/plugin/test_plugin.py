"""The plugin as a user meets it, through pytester: options, fixtures, ids, reports, cleanup."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_triton.base.processes import group_members
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers.interrupts import default_sigint
from tests.helpers.plugin_runs import CONFTEST, run


def test_a_users_session_gets_only_the_plugins_markers(pytester: pytest.Pytester) -> None:
    """The suite's own markers (container, load, slow) stay in its pyproject.toml."""
    result = run(pytester, "--markers")
    assert result.ret == 0
    out = result.stdout.str()
    assert "@pytest.mark.triton:" in out and "@pytest.mark.gpu:" in out
    for suite_only in ("container", "load", "slow", "reliability"):
        assert f"@pytest.mark.{suite_only}:" not in out, suite_only


def test_help_lists_every_option_and_ini_key(pytester: pytest.Pytester) -> None:
    from pytest_triton.base.config import settings_for

    result = run(pytester, "--help")
    assert result.ret == 0
    out = result.stdout.str()
    assert "pytest-triton: serve PyTorch models on Triton" in out
    for option in settings_for("pytest"):
        assert option.cli in out and f"{option.ini} (string)" in out, option.name


@pytest.mark.parametrize(
    ("ini", "cli", "expected"),
    [
        pytest.param("", [], "120.0 default 0 default", id="defaults"),
        pytest.param(
            "triton_startup_timeout = 30\ntriton_log_verbose = 2",
            [],
            "30.0 ini triton_startup_timeout 2 ini triton_log_verbose",
            id="ini",
        ),
        pytest.param(
            "triton_log_verbose = 2",
            ["--triton-log-verbose=0"],
            "120.0 default 0 command line --triton-log-verbose",
            id="cli-zero-beats-ini",
        ),
        pytest.param(
            "triton_startup_timeout = 30",
            ["--triton-startup-timeout=5"],
            "5.0 command line --triton-startup-timeout 0 default",
            id="cli-beats-ini",
        ),
    ],
)
def test_precedence_cli_over_ini_over_default(
    pytester: pytest.Pytester, ini: str, cli: list[str], expected: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(
        test_cfg="""
def test_show(triton_config):
    o = triton_config.origins
    print("CFG", triton_config.server.startup_timeout, o["startup_timeout"],
          triton_config.server.log_verbose, o["log_verbose"])
"""
    )
    result = run(pytester, "-s", *cli)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"*CFG {expected}*"])


def test_factory_argument_beats_cli(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        CONFTEST
        + """
grpc_server = factories.server(protocol="grpc")
grpc_client = factories.client(server="grpc_server")
"""
    )
    pytester.makepyfile(
        test_ids="""
def test_default(triton_client): pass
def test_factory(grpc_client): pass
"""
    )
    result = run(pytester, "--collect-only", "-q", "--triton-protocol=http")
    result.stdout.fnmatch_lines(["*test_default[[]http[]]", "*test_factory[[]grpc[]]"])
    assert "test_factory[http]" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        pytest.param(
            ["--triton-startup-timeout=-1"],
            "",
            "command line --triton-startup-timeout: expected a number > 0, got '-1' (a "
            "duration: a bare number is in s, or give its unit: 30s, 2m)",
            id="cli-negative-timeout",
        ),
        pytest.param(
            [],
            "triton_startup_timeout = 2 minutes",
            "ini triton_startup_timeout: expected a number > 0, got '2 minutes' (a duration: a "
            "bare number is in s, or give its unit: 30s, 2m)",
            id="ini-timeout-in-words",
        ),
        pytest.param(
            [],
            "triton_protocol = ftp",
            "ini triton_protocol: expected http, grpc or both",
            id="ini-bad-protocol",
        ),
        pytest.param(
            ["--triton-formats=onnx,tflite"],
            "",
            "unknown format(s) ['tflite']",
            id="cli-bad-format",
        ),
        pytest.param(
            ["--triton-launcher=external"],
            "",
            "the external launcher needs --triton-url",
            id="external-without-url",
        ),
        pytest.param(
            ["--triton-gpu", "--triton-launcher=local"],
            "",
            "--triton-gpu needs an NVIDIA GPU, and none is visible here",
            id="gpu-with-local",
        ),
        pytest.param(
            [],
            "triton_numerics = fast",
            "ini triton_numerics: 'fast' is not one of strict, production",
            id="ini-bad-numerics",
        ),
    ],
)
def test_bad_settings_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_triton_gpu_fails_fast_without_a_gpu(pytester: pytest.Pytester) -> None:
    """On a machine without a GPU, stop at once and name the GPU (not Docker, whatever the
    engine here has): GPU mode does not need Docker."""
    pytester.makepyfile(test_x="def test_x(): pass")
    started = time.monotonic()
    result = run(pytester, "--triton-gpu")
    assert time.monotonic() - started < 30
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (
        "pytest-triton --triton-gpu: --triton-gpu needs an NVIDIA GPU, and none is visible "
        "here (no NVIDIA driver" in err
    ), err
    assert "Docker" not in err


def test_gpu_marked_tests_skip_with_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_x="""
import pytest
@pytest.mark.gpu
def test_on_gpu(): pass
"""
    )
    result = run(pytester, "-rs")
    result.stdout.fnmatch_lines(
        ["*SKIPPED*GPU test: run with --triton-gpu on a machine with an NVIDIA GPU*"]
    )


def test_model_fixture_without_specs_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(triton_model): pass")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*pytest-triton: no models in repository fixture "
            "'triton_repository': define it in conftest.py*"
        ]
    )
    assert "Traceback" not in result.stdout.str()


@pytest.mark.triton
def test_user_flow_ids_parity_and_log_on_failure(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_affine="""
from pytest_triton import assert_dynamic_batching

def test_parity(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=3)

def test_batching(triton_model, triton_client):
    assert_dynamic_batching(triton_model.assert_batched_parity(triton_client, requests=8))

def test_fails(triton_model, triton_client):
    assert triton_client.is_model_ready(triton_model.name)
    assert False, "deliberate"
"""
    )
    result = run(pytester, "-v")
    result.stdout.fnmatch_lines(
        [
            "*test_parity[[]affine-torchscript-trace-hosted-http[]] PASSED*",
            "*test_parity[[]affine-torchscript-trace-hosted-grpc[]] PASSED*",
            "*test_batching[[]affine-torchscript-trace-hosted-grpc[]] PASSED*",
            "*test_fails[[]affine-torchscript-trace-hosted-http[]] FAILED*",
        ]
    )
    out = result.stdout.str()
    assert "tritonserver log (local, 127.0.0.1:" in out
    assert "successfully loaded 'affine_torchscript_trace'" in out
    result.assert_outcomes(passed=4, failed=2)


@pytest.mark.triton
def test_ctrl_c_and_killed_pytest_leave_no_server(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """SIGINT runs teardown; SIGKILL of pytest still takes the server down (PDEATHSIG)."""
    pytester.makeconftest(CONFTEST)
    marker = tmp_path / "server.txt"
    pytester.makepyfile(
        test_wait=f"""
import time
def test_wait(triton_model, triton_client):
    server = triton_model.deployment.server
    with open({str(marker)!r}, "w") as f:
        f.write(f"{{server.process.pid}} {{triton_model.deployment.repository.root}}")
    time.sleep(120)
"""
    )
    for sig in (signal.SIGINT, signal.SIGKILL):
        marker.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-x",
                "-q",
                "--triton-protocol=http",
            ],
            cwd=pytester.path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=default_sigint,
        )
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            assert time.monotonic() < deadline, "the test never got a server"
            assert proc.poll() is None
            time.sleep(0.2)
        pid_text, repo_root = marker.read_text().split(" ", 1)
        pgid = int(pid_text)
        assert group_members(pgid)
        proc.send_signal(sig)
        proc.wait(60)
        deadline = time.monotonic() + 30
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_members(pgid) == [], f"server left behind after {sig.name}"
        if sig == signal.SIGINT:
            assert not Path(repo_root).exists(), "temporary repository left behind"
        else:  # SIGKILL skips all cleanup: the next launch reaps what the dead pytest left
            from pytest_triton.repository.builder import reap_orphaned_repositories
            from pytest_triton.server.local import reap_orphan_servers

            # the next launch reaps it: this one, or a concurrent one (another xdist worker
            # starting a server) that got there first
            reap_orphan_servers()
            reap_orphaned_repositories()
            assert not Path(repo_root).exists()
            assert not list(Path(tempfile.gettempdir()).glob(f"pytest-triton-server-{proc.pid}-*"))


@pytest.mark.triton
def test_xdist_workers_get_their_own_servers(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_par="""
import os, pathlib
def test_a(triton_model, triton_client):
    triton_model.assert_parity(triton_client)
    worker = os.environ["PYTEST_XDIST_WORKER"]
    pathlib.Path(f"server-{worker}.txt").write_text(triton_model.deployment.server.endpoints.http)
"""
    )
    result = run(pytester, "-n", "2", "-v")
    result.assert_outcomes(passed=2)
    servers = {p.read_text() for p in pytester.path.glob("server-gw*.txt")}
    assert len(servers) == 2, f"each worker needs its own server on its own ports: {servers}"


@pytest.mark.triton
def test_external_launcher_uploads_models(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """A server someone else started (explicit mode, empty repository) gets models uploaded."""
    empty = tmp_path / "staging-repo"
    empty.mkdir()
    with LocalLauncher().start(ServerArgs(empty)) as staging:
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(
            test_ext="""
def test_parity(triton_model, triton_client):
    assert triton_model.deployment.server.launcher == "external"
    triton_model.assert_parity(triton_client)
"""
        )
        result = run(
            pytester,
            "-v",
            f"--triton-url=http://{staging.endpoints.http}",
            f"--triton-grpc-url=grpc://{staging.endpoints.grpc}",
        )
        result.assert_outcomes(passed=2)
        assert "successfully loaded 'affine_torchscript_trace'" in staging.log_text()
        assert not any(empty.iterdir()), "uploads must not write into the server's repository"
