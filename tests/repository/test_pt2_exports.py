"""torch-export and aoti exports with real parts: an AOTInductor compile of a tiny module made
once and served from the export cache the second time, by the real bundled server; a module
torch.export cannot capture refused naming why, while its TorchScript variants serve; and no
C++ compiler refused naming what to install."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_triton import Repository
from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ExportError
from pytest_triton.repository import export_cache
from pytest_triton.session.deployment import Deployment
from pytest_triton.session.lifecycle import start_deployment
from tests.helpers.tiny_models import guarded_spec, scorer_spec

pytestmark = pytest.mark.triton


@dataclass
class Served:
    """What the module's one server shows: the compile's progress lines and times."""

    deployment: Deployment
    first: list[str]
    second: list[str]
    first_s: float
    second_s: float


def _work_directories() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("pytest-triton-aoti-")}


@pytest.fixture(scope="module")
def served(
    triton_config: TritonConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The scorer compiled by AOTInductor into a cache of its own, then a second repository
    of it (served from that cache) beside a guarded module's TorchScript variants."""
    cache = tmp_path_factory.mktemp("export-cache")
    before = _work_directories()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(export_cache.ENVIRONMENT, str(cache))
        first: list[str] = []
        repo = Repository.create([scorer_spec(formats=["aoti"])], progress=first.append)
        try:
            (variant,) = repo.plan(["python"])
            started = time.perf_counter()
            repo.ensure(variant)
            first_s = time.perf_counter() - started
        finally:
            repo.remove()
        second: list[str] = []
        specs = [
            scorer_spec(formats=["aoti"]),
            guarded_spec(formats=["torchscript-script", "torchscript-trace"]),
        ]
        repo = Repository.create(specs, progress=second.append)
        try:
            started = time.perf_counter()
            deployment = start_deployment(triton_config, repo)
            deployment.model("scorer-aoti-hosted")  # exported (or restored) and loaded
            second_s = time.perf_counter() - started
        except BaseException:
            repo.remove()
            raise
    assert _work_directories() == before, "the compile's work directory was left behind"
    try:
        yield Served(deployment, first, second, first_s, second_s)
    finally:
        deployment.close()
        repo.remove()


def test_a_second_compile_is_served_from_the_export_cache(served: Served) -> None:
    assert not any("from the export cache" in line for line in served.first), served.first
    (reused,) = [line for line in served.second if line.startswith("exported scorer-aoti")]
    assert reused.endswith("(from the export cache)"), served.second
    print(f"aoti compile {served.first_s:.1f}s; cached repository served in {served.second_s:.1f}s")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_compiled_package_answers_like_eager(served: Served, protocol: str) -> None:
    model = served.deployment.model("scorer-aoti-hosted")
    client = served.deployment.client(protocol)  # type: ignore[arg-type]
    model.assert_parity(client, batch_size=3)
    model.assert_batched_parity(client, requests=4, seed=2)


def test_a_module_torch_export_cannot_capture_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    repo = Repository(tmp_path / "repo", [guarded_spec(formats=["torch-export", "aoti"])])
    for variant in repo.plan(["python"]):
        with pytest.raises(ExportError) as refused:
            repo.ensure(variant)
        message = str(refused.value)
        assert f"exporting model 'guarded' as {variant.format} (fp32) failed" in message
        assert "torch.export cannot capture model 'guarded'" in message
        assert "data-dependent" in message  # torch's own reason
        assert "formats that do not go through torch.export: torchscript-script, " in message
        assert "See:" not in message and len(message) < 1200, "torch's debugging pages cut"
    assert not (tmp_path / "repo" / "guarded_torch_export").exists()


@pytest.mark.parametrize("fmt", ["torchscript-script", "torchscript-trace"])
def test_its_torchscript_variants_still_serve(served: Served, fmt: str) -> None:
    model = served.deployment.model(f"guarded-{fmt}-hosted")
    model.assert_parity(served.deployment.client("http"), batch_size=3)


NO_COMPILER = """
from pathlib import Path
from pytest_triton.base.errors import ExportError
from pytest_triton.repository import exporters
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import resolve_signature
from tests.helpers.tiny_models import scorer_spec
spec = scorer_spec()
try:
    exporters.export("aoti", spec, NativeModel(spec), Path("{out}"), resolve_signature(spec))
except ExportError as exc:
    print(exc)
"""


def test_aoti_without_a_cpp_compiler_says_what_to_install(tmp_path: Path) -> None:
    out = tmp_path / "model.pt2"
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path.cwd()), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", NO_COMPILER.format(out=out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    said = done.stdout.strip()
    assert said.startswith("exporting model 'scorer' as aoti (fp32) failed: "), done
    assert "found no compiler" in said and "install g++" in said and "CXX" in said, said
    assert not out.exists()
