"""The export cache (PYTEST_TRITON_EXPORT_CACHE): an ONNX export made once is reused by the
next repository, process or run, and any change to what the artifact is made of exports
anew. The suite itself runs with one cache per run (tests/conftest.py), so every served
parity check and every Locust answer check after the first export of a module is a check of
a cached artifact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pytest_triton import Int8, Repository
from pytest_triton.repository import export_cache
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import resolve_signature
from pytest_triton.repository.spec import ModelSpec
from tests.helpers.tiny_models import Scorer, scorer_inputs, scorer_spec


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(export_cache.ENVIRONMENT, str(root))
    return root


def _export(root: Path, spec: ModelSpec, said: list[str]) -> Path:
    repo = Repository(root, [spec], formats=["onnx"], progress=said.append)
    (variant,) = repo.plan(["python"])
    return repo.ensure(variant) / "1" / variant.artifact


def test_an_onnx_export_is_reused_by_the_next_repository(cache: Path, tmp_path: Path) -> None:
    first: list[str] = []
    made = _export(tmp_path / "a", scorer_spec(formats=["onnx"]), first)
    assert "from the export cache" not in first[-1]
    (entry,) = cache.iterdir()
    again: list[str] = []
    reused = _export(tmp_path / "b", scorer_spec(formats=["onnx"]), again)
    assert again[-1].endswith("(from the export cache)"), again
    assert reused.read_bytes() == made.read_bytes()
    assert reused.stat().st_ino != (entry / reused.name).stat().st_ino, "a copy, not a link"
    assert [p.name for p in cache.iterdir()] == [entry.name]


def test_without_the_variable_nothing_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(export_cache.ENVIRONMENT, raising=False)
    assert export_cache.directory() is None
    said: list[str] = []
    _export(tmp_path / "a", scorer_spec(formats=["onnx"]), said)
    assert "from the export cache" not in said[-1]


class ScaledScorer(Scorer):
    """A plain attribute that changes the answers, which no state_dict holds."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        score, label = super().forward(x, idx)
        return score * self.scale, label


def _key(spec: ModelSpec, fmt: str = "onnx", precision: str = "fp32") -> str | None:
    native = NativeModel(spec, precision)  # type: ignore[arg-type]
    return export_cache.key(fmt, spec, native, resolve_signature(spec))


def test_the_key_follows_everything_the_artifact_is_made_of() -> None:
    base = _key(scorer_spec(formats=["onnx"]))
    assert base is not None and base == _key(scorer_spec(formats=["onnx"]))
    other_weights = Scorer()
    with torch.no_grad():
        other_weights.dense.bias.add_(1.0)
    counted = ScaledScorer()  # a 0-d buffer, as BatchNorm's num_batches_tracked
    counted.register_buffer("seen", torch.tensor(3))
    changed = {
        "weights": scorer_spec(module=other_weights),
        "a 0-d buffer": scorer_spec(module=counted),
        "a plain attribute": scorer_spec(module=lambda: ScaledScorer(2.0)),
        "the class": scorer_spec(module=lambda: ScaledScorer(1.0)),
        "example shapes": scorer_spec(example_inputs=scorer_inputs(batch=5)),
        "output names": scorer_spec(outputs=["s", "l"]),
        "batching": scorer_spec(max_batch_size=16),
    }
    keys = {what: _key(spec) for what, spec in changed.items()}
    keys["precision"] = _key(scorer_spec(), precision="fp16")
    assert all(k is not None and k != base for k in keys.values()), keys
    assert len(set(keys.values())) == len(keys), keys
    assert _key(scorer_spec(), "torchscript-trace") is None, "milliseconds to export: not kept"


def test_pt2_formats_are_cached_each_under_its_own_key() -> None:
    """An AOTInductor compile takes tens of seconds: cached, apart from the program it is
    compiled from (test_pt2_exports.py serves a second compile from the cache)."""
    program = _key(scorer_spec(formats=["torch-export"]), "torch-export")
    package = _key(scorer_spec(formats=["aoti"]), "aoti")
    assert program and package and program != package


def test_an_int8_key_follows_how_the_spec_declares_the_quantization() -> None:
    """Two INT8 artifacts of one module quantized two ways are two entries: the declared
    `Int8` is part of the key, and `int8=True` is the same declaration as `Int8()`."""
    plain = _key(scorer_spec(int8=True), precision="int8")
    assert plain == _key(scorer_spec(int8=Int8()), precision="int8")
    declared = _key(scorer_spec(int8=Int8(per_channel=True, weights_only=True)), precision="int8")
    assert plain is not None and declared is not None and declared != plain
