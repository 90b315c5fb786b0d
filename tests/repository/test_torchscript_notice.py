"""torch's TorchScript deprecation reaches a user once a session, saying what to use instead,
however many TorchScript exports the session makes."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from pytest_triton import Repository
from pytest_triton.repository import torchscript_notice
from tests.helpers.tiny_models import guarded_spec, scorer_spec

SESSION = """
import pytest
from pytest_triton import Repository
from tests.helpers.tiny_models import scorer_spec

@pytest.mark.parametrize("run", range(3))
@pytest.mark.parametrize("fmt", ["torchscript-script", "torchscript-trace"])
def test_export(tmp_path, fmt, run):
    repo = Repository(tmp_path / "repo", [scorer_spec(formats=[fmt])])
    (variant,) = repo.plan(["python"])
    repo.ensure(variant)
"""


def test_a_session_of_torchscript_exports_shows_the_deprecation_once(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_exports=SESSION)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", f"--rootdir={Path.cwd()}", timeout=300
    )
    result.assert_outcomes(passed=6)
    output = result.stdout.str()
    assert output.count("TorchScriptDeprecated") == 1, output
    assert output.count("is deprecated") == 1, "torch's own warning said only inside ours"
    assert "serve --triton-formats torch-export" in output and "or aoti" in output


def test_other_warnings_pass_through_and_the_notice_is_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torchscript_notice, "_shown", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            with torchscript_notice.torchscript_calls():
                warnings.warn(
                    "`torch.jit.save` is deprecated. Please switch to `torch.export`.",
                    DeprecationWarning,
                    stacklevel=1,
                )
                warnings.warn("something else", UserWarning, stacklevel=1)
    kinds = [w.category.__name__ for w in seen]
    assert kinds == ["TorchScriptDeprecated", "UserWarning", "UserWarning"], kinds
    assert "(`torch.jit.save` is deprecated. Please switch to `torch.export`)" in str(
        seen[0].message
    )


def test_an_export_in_process_says_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchscript_notice, "_shown", set())
    with pytest.warns(torchscript_notice.TorchScriptDeprecated) as said:
        for fmt in ("torchscript-script", "torchscript-trace"):
            repo = Repository(tmp_path / fmt, [scorer_spec(formats=[fmt])])
            (variant,) = repo.plan(["python"])
            repo.ensure(variant)
    assert len(said) == 1


def test_a_tracer_warning_of_an_export_reaches_the_user(tmp_path: Path) -> None:
    """A trace that froze a branch on the data warns (TracerWarning): the export passes it on
    (it recorded every warning and dropped all but torch's deprecation)."""
    repo = Repository(tmp_path / "repo", [guarded_spec(formats=["torchscript-trace"])])
    (variant,) = repo.plan(["python"])
    with pytest.warns(torch.jit.TracerWarning, match="Python boolean"):
        repo.ensure(variant)
