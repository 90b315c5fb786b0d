"""One server for the plugin's own served tests: every zoo model, small configuration; and a
numpy-2 interpreter for the stub-environment tests."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_triton import DynamicBatching, factories
from pytest_triton.base.processes import reap_orphaned
from pytest_triton.models import ZOO, zoo_spec
from pytest_triton.repository import export_cache
from tests.helpers import cpu_log, schedule, warm_start

# The examples' serving settings, except: one instance each (a 2-core machine cannot host the
# examples' five MNIST or two text-recognition instances per format) and a 20 ms queue delay.
# The examples' delays (0-5 ms) tune GPU throughput; proving that batching happens needs a
# window longer than it takes this client to put eight requests in flight, or the test
# would depend on scheduling luck.
PROVABLE = DynamicBatching(max_queue_delay_microseconds=20_000)
zoo_repository = factories.repository(
    [zoo_spec(name, instance_count=1, dynamic_batching=PROVABLE) for name in ZOO]
)
zoo_server = factories.server(repository="zoo_repository")
zoo_client = factories.client(server="zoo_server")
zoo_model = factories.model(server="zoo_server")


EXPORT_CACHE_PREFIX = "pytest-triton-exports-"  # then the suite's pid: a killed run's is reaped
_export_cache: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    """One export cache for the whole run (export_cache.py): its xdist workers, and the
    Locust, triton-perf and pytest processes its tests start, inherit the variable, so each
    module is exported to ONNX once a run instead of once a process (a Locust run's export
    is 4 s of CPU). Set by the controller before its workers start; a cache the person
    running the suite set is used as it is. PYTEST_TRITON_CPU_LOG=FILE logs each test's CPU
    (tests/helpers/cpu_log.py)."""
    cpu_log.register(config)
    if hasattr(config, "workerinput"):
        return
    _share_the_cores(config)
    if os.environ.get(export_cache.ENVIRONMENT):
        return
    reap_orphaned(tempfile.gettempdir(), EXPORT_CACHE_PREFIX, "-")
    made = Path(tempfile.mkdtemp(prefix=f"{EXPORT_CACHE_PREFIX}{os.getpid()}-"))
    _export_cache.append(made)
    os.environ[export_cache.ENVIRONMENT] = str(made)


def _share_the_cores(config: pytest.Config) -> None:
    """xdist's workers divide the cores among them: each, and every process it starts (Locust,
    servers and their stubs), runs torch's and OpenMP's operators on cores / workers threads.
    With torch's default, a thread a core in each, a worker exporting or computing a
    reference asks for both cores of the 2-core machine while the other runs a timed load
    test beside it, whose figures then measure the contention. A setting the person running
    the suite made is kept."""
    workers = config.getoption("numprocesses", None)  # xdist's -n, once resolved an int
    if not isinstance(workers, int) or workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))


def pytest_unconfigure(config: pytest.Config) -> None:
    for made in _export_cache:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop(export_cache.ENVIRONMENT, None)
    _export_cache.clear()


@pytest.fixture(scope="session")
def numpy2_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a throwaway venv whose python3 has numpy >= 2."""
    from tests.helpers.interpreters import make_numpy2_venv

    return make_numpy2_venv(tmp_path_factory.mktemp("interpreters"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test`'s `--dist loadgroup`: whole files to a worker (tests/helpers/schedule.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return schedule.file_scheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups (whole files) in the order of tests/helpers/schedule.py: the workers take
    them in collection order (`--no-loadscope-reorder`)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    files: dict[str, list[str]] = {}
    for item in items:
        files.setdefault(schedule.group_of(item.nodeid), []).append(item.nodeid.split("::")[0])
    costs = schedule.group_costs(files, schedule.read_costs())
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "2"))
    rank = {group: i for i, group in enumerate(schedule.order(costs, workers))}
    items.sort(key=lambda item: rank[schedule.group_of(item.nodeid)])


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A session a test starts is not a worker of `make test`'s xdist, even when the test
    runs in one: the plugin would name its models on external servers after that worker."""
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(pytester, "popen", functools.partial(_warm_popen, pytester))
    return pytester


def _warm_popen(
    pytester: pytest.Pytester,
    cmdargs: Sequence[str | os.PathLike[str]],
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    stdin: Any = None,
    **kw: Any,
) -> Any:
    """Pytester.popen (its environment and working directory), forked from a warm
    interpreter where it can be (tests/helpers/warm_start.py): runpytest_subprocess's
    sessions start without importing torch again."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    args = [os.fspath(a) for a in cmdargs]
    if stdin in (None, pytester.CLOSE_STDIN) and warm_start.kind_of(args) is not None:
        kw.pop("close_fds", None)
        return warm_start.popen(args, env=env, cwd=os.getcwd(), stdout=stdout, stderr=stderr, **kw)
    return pytest.Pytester.popen(
        pytester, cmdargs, stdout, stderr, stdin or pytester.CLOSE_STDIN, **kw
    )
