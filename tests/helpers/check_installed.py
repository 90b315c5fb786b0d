"""pytest-triton proven as an installed package (`make wheel-check`): the sdist and the wheel
built (`python -m build`: the wheel from the sdist) and checked (`twine check`), every file the
package needs found in the wheel (a missing one named), the wheel installed (not editable)
into a clean virtualenv with constraints.txt, and from a directory outside the checkout: a
user project's parity tests (a conftest with its own ModelSpec), `locust -f` on a locustfile
that imports the package, with the web UI's Triton tab and its static files served,
`triton-deploy --help` and a few seconds of `triton-perf`.

Run with the project's environment (it has build and twine: the dev extra):
`.venv/bin/python tests/helpers/check_installed.py`. Exits non-zero naming the step that failed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "pytest_triton"
PTH = "pytest_triton_locust.pth"
EXTRAS = "local,load"  # the bundled tritonserver, and Locust
C_SOURCES = {"pytest_triton/client/wire/_http_pump.c": "pytest_triton/client/wire/_http_pump."}

CONFTEST = """
import torch
from pytest_triton import DynamicBatching, ModelSpec, factories


def ranker() -> ModelSpec:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return ModelSpec(name="ranker", module=model.eval(), example_inputs=(torch.randn(4, 16),),
                     inputs=["features"], outputs=["scores"], max_batch_size=32,
                     dynamic_batching=DynamicBatching(max_queue_delay_microseconds=2000))


triton_repository = factories.repository([ranker()], formats=["torchscript-trace"])
"""
TEST_MODEL = """
from pytest_triton import assert_dynamic_batching


def test_served_matches_pytorch(triton_model, triton_client):
    triton_model.assert_parity(triton_client, batch_size=8)


def test_dynamic_batching(triton_model, triton_client):
    assert_dynamic_batching(triton_model.assert_batched_parity(triton_client, requests=16))
"""
LOCUSTFILE = """
from conftest import ranker
from pytest_triton.load import EmbeddedModel, TritonUser

MODEL = EmbeddedModel(ranker, fmt="torchscript-trace")  # served: no --host given


class RankerUser(TritonUser):
    served = MODEL
    batch_size = 2
"""
STATIC = ("triton.js", "triton.css")


class Failed(Exception):
    """A step that failed, with what it printed."""


def run(
    command: Sequence[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise Failed(
            f"{' '.join(command)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
        )
    return done


def required_files() -> set[str]:
    """What the wheel must hold: every file of the package in git (a C source as its compiled
    module, where a C compiler exists) and the .pth at the top of site-packages."""
    listed = subprocess.run(
        ["git", "ls-files", PACKAGE], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    compiler = shutil.which("cc") or shutil.which("gcc")
    wanted = {PTH}
    for name in listed:
        if name in C_SOURCES:
            if compiler:
                wanted.add(C_SOURCES[name])  # a prefix: the module's platform suffix varies
        else:
            wanted.add(name)
    return wanted


def missing_from(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        held = set(archive.namelist())
    return sorted(
        name
        for name in required_files()
        if name not in held and not any(h.startswith(name) and h.endswith(".so") for h in held)
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str, deadline: float) -> bytes:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return bytes(answer.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def locust_with_web_ui(bin_dir: Path, project: Path, env: dict[str, str]) -> str:
    """A few seconds of load from the user's locustfile, its web UI up meanwhile: the Triton
    tab and its static files, byte for byte the package's."""
    port = free_port()
    command = [
        str(bin_dir / "locust"), "-f", "locustfile.py", "--autostart", "-u", "2", "-r", "2",
        "-t", "12s", "--autoquit", "20", "--web-host", "127.0.0.1", "--web-port", str(port),
        "--triton-measurement-interval", "2000",
    ]  # fmt: skip
    log = project / "locust.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=project, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 300
        base = f"http://127.0.0.1:{port}"
        if b"triton" not in fetch(f"{base}/triton", deadline).lower():
            raise Failed("the web UI's /triton page does not show the Triton tab")
        static = REPO / PACKAGE / "load" / "webui" / "static"
        for name in STATIC:
            if fetch(f"{base}/triton/static/{name}", deadline) != (static / name).read_bytes():
                raise Failed(f"the web UI served a {name} other than the package's")
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    text = log.read_text()
    if code != 0:
        raise Failed(f"locust -f locustfile.py exited {code}:\n{text[-4000:]}")
    return text


def check(work: Path) -> list[tuple[str, float]]:
    timings: list[tuple[str, float]] = []
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def step(name: str) -> None:
        timings.append((name, time.monotonic()))
        print(f"wheel-check: {name}", flush=True)

    dist, venv, project = work / "dist", work / "venv", work / "project"
    step("python -m build (the sdist, then the wheel from it)")
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], work, clean)
    (sdist,), (wheel,) = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    step("twine check")
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], work, clean)
    step("the wheel holds every file of the package")
    missing = missing_from(wheel)
    if missing:
        raise Failed(f"{wheel.name} lacks {len(missing)} file(s): {', '.join(missing)}")
    step("a clean virtualenv with the wheel (not editable), constraints.txt")
    run([sys.executable, "-m", "venv", str(venv)], work, clean)
    bin_dir = venv / "bin"
    env = {**clean, "PATH": f"{bin_dir}{os.pathsep}{clean.get('PATH', '')}"}
    run(
        [
            str(bin_dir / "pip"), "install", "--quiet", "--no-input",
            "-c", str(REPO / "constraints.txt"), f"{wheel}[{EXTRAS}]",
        ],
        work, env, timeout=1800,
    )  # fmt: skip
    step("the package imported from the virtualenv, outside the checkout")
    project.mkdir()
    where = run(
        [str(bin_dir / "python"), "-c", "import pytest_triton; print(pytest_triton.__file__)"],
        project,
        env,
    ).stdout.strip()
    if not where.startswith(str(venv)):
        raise Failed(f"pytest_triton imported from {where}, not the virtualenv")
    step("a user project's parity tests")
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_model.py").write_text(TEST_MODEL)
    (project / "locustfile.py").write_text(LOCUSTFILE)
    tests = run(
        [str(bin_dir / "pytest"), "-q", "-p", "no:cacheprovider", "--triton-protocol=http"],
        project,
        env,
    )
    if "2 passed" not in tests.stdout:  # one variant (TorchScript, hosted) over HTTP
        raise Failed(f"the user's parity tests did not all pass:\n{tests.stdout[-3000:]}")
    step("triton-deploy --help")
    run([str(bin_dir / "triton-deploy"), "--help"], project, env)
    step("locust -f locustfile.py, the web UI's Triton tab and static files")
    locust_with_web_ui(bin_dir, project, env)
    step("triton-perf, a few seconds")
    perf = [
        str(bin_dir / "triton-perf"), "-m", "conftest:ranker", "--triton-format",
        "torchscript-trace", "-b", "1", "--concurrency-range", "1", "--no-progress",
        "--triton-measurement-interval", "1000", "--triton-load-warmup", "300",
        "--triton-max-trials", "4", "--triton-allow-unstable", "--json", "perf.json",
    ]  # fmt: skip
    run(perf, project, env, timeout=600)
    if not (project / "perf.json").exists():
        raise Failed("triton-perf wrote no perf.json")
    step("done")
    return timings


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="pytest-triton-wheel-"))
    started = time.monotonic()
    try:
        timings = check(work)
    except Failed as exc:
        print(f"wheel-check FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for (name, at), (_, end) in itertools.pairwise(timings):
        print(f"  {end - at:6.1f} s  {name}")
    print(f"wheel-check passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
