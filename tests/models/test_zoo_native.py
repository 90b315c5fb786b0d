"""The model zoo in plain PyTorch: seeding, shapes, exports and checkpoints, on CPU.

Every test uses the small configs except the parameter-count checks (meta device, no
allocation) and the ``slow`` test that really builds the full models.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
import torch

from pytest_triton.models import ZOO, CheckpointError, bert, dlrm, mnist, resnext
from pytest_triton.models import text_recognition as textrec

NAMES = sorted(ZOO)

pytestmark = [
    # Triton's PyTorch backend still serves TorchScript, so its deprecation is expected here.
    pytest.mark.filterwarnings("ignore:`torch.jit.*is deprecated:DeprecationWarning"),
    # The dynamo exporter's own chatter about dims it merged and pytree internals.
    pytest.mark.filterwarnings("ignore:# The axis name.*will not be used:UserWarning"),
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)`:FutureWarning"),
]

# Same kernels (eager vs TorchScript interpreter): only op fusion can reorder float math.
JIT_TOL = (1e-5, 1e-6)  # (rtol, atol)
# ONNX Runtime has its own GEMM/conv kernels, so fp32 sums are reassociated; observed
# differences are ~1e-7 on O(1) outputs, the bound leaves two orders of magnitude headroom.
ORT_TOL = (1e-4, 1e-5)


def outputs_of(result: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


@functools.cache
def small_model(name: str) -> torch.nn.Module:
    """One seed-0 small model per entry, shared by the read-only tests."""
    return ZOO[name].build(ZOO[name].small, seed=0)


def run(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return outputs_of(model(*inputs.values()))


def assert_outputs_close(
    actual: Sequence[torch.Tensor | npt.NDArray[Any]],
    expected: Sequence[torch.Tensor],
    tol: tuple[float, float],
) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(torch.as_tensor(got), want, rtol=tol[0], atol=tol[1])


# -- registry ---------------------------------------------------------------------------------


def test_zoo_has_every_seed_model() -> None:
    assert set(ZOO) == {
        "dlrm",
        "resnet50",
        "resnext101-32x4d",
        "se-resnext101-32x4d",
        "bert",
        "mnist",
        "text_recognition",
    }
    for name, entry in ZOO.items():
        assert entry.name == name
        assert entry.serving.source and ":" in entry.serving.source  # which example, which section
        assert entry.serving.max_batch_size >= 2


def test_serving_settings_follow_the_examples() -> None:
    b = ZOO["bert"].serving
    assert (b.max_batch_size, b.preferred_batch_size, b.instance_count) == (8, (4, 8), 1)
    assert b.max_queue_delay_microseconds == 5000
    m = ZOO["mnist"].serving
    assert (m.instance_count, m.instance_kind, m.max_queue_delay_microseconds) == (
        5,
        "KIND_CPU",
        150,
    )
    t = ZOO["text_recognition"].serving
    assert (t.max_batch_size, t.instance_count, t.max_queue_delay_microseconds) == (8, 2, 0)
    assert ZOO["resnext101-32x4d"].serving.max_batch_size == 64
    assert ZOO["dlrm"].serving.max_batch_size == 65536


@pytest.mark.parametrize("name", NAMES)
def test_io_spec_matches_a_real_forward(name: str) -> None:
    entry = ZOO[name]
    inputs = entry.example_inputs(entry.small, batch_size=3)
    outs = run(small_model(name), inputs)
    ins_spec, outs_spec = entry.io_spec(entry.small)
    assert [s.name for s in ins_spec] == list(entry.input_names) == list(inputs)
    assert [s.name for s in outs_spec] == list(entry.output_names)
    pairs = [*zip(ins_spec, inputs.values(), strict=True), *zip(outs_spec, outs, strict=True)]
    for spec, tensor in pairs:
        assert spec.dtype == tensor.dtype
        assert tensor.shape[0] == 3
        assert len(spec.dims) == tensor.dim() - 1
        assert all(d in (-1, n) for d, n in zip(spec.dims, tensor.shape[1:], strict=True))


def test_expected_output_shapes() -> None:
    def shapes(name: str, batch: int) -> list[tuple[int, ...]]:
        entry = ZOO[name]
        return [tuple(t.shape) for t in run(small_model(name), entry.example_inputs(None, batch))]

    s_bert = ZOO["bert"].small.seq_length
    assert shapes("bert", 3) == [(3, s_bert), (3, s_bert)]
    assert shapes("dlrm", 3) == [(3, 1)]
    assert shapes("mnist", 3) == [(3, 10)]
    assert shapes("resnext101-32x4d", 3) == [(3, 10)]
    assert shapes("text_recognition", 3) == [(3, ZOO["text_recognition"].small.time_steps, 37)]
    # full-size I/O from a meta-device forward: no weights allocated
    _, outs = ZOO["text_recognition"].io_spec(ZOO["text_recognition"].full)
    assert outs[0].dims == (26, 37)  # the tutorial's [B, 26, 37] CTC logits
    ins, outs = ZOO["resnet50"].io_spec(ZOO["resnet50"].full)
    assert (ins[0].dims, outs[0].dims) == ((3, 224, 224), (1000,))
    ins, outs = ZOO["bert"].io_spec(ZOO["bert"].full)
    assert [i.dims for i in ins] == [(-1,)] * 3 and [o.dims for o in outs] == [(-1,)] * 2


# -- seeding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_model_other_seed_other_model(name: str) -> None:
    entry = ZOO[name]
    before = torch.random.get_rng_state()
    a, b, c = (entry.build(entry.small, seed=s) for s in (7, 7, 8))
    assert torch.equal(torch.random.get_rng_state(), before), "build() touched the global RNG"
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    inputs = entry.example_inputs(entry.small, batch_size=2, seed=3)
    out_a, out_b, out_c = run(a, inputs), run(b, inputs), run(c, inputs)
    assert all(torch.equal(x, y) for x, y in zip(out_a, out_b, strict=True))
    assert not any(torch.allclose(x, y) for x, y in zip(out_a, out_c, strict=True))
    for t in out_a:
        assert torch.isfinite(t).all()
        assert t.std() > 0, "constant outputs would hide export bugs"


@pytest.mark.parametrize("name", NAMES)
def test_example_inputs_are_seeded_and_in_range(name: str) -> None:
    entry = ZOO[name]
    x1, x2, y = (entry.example_inputs(None, 4, seed=s) for s in (1, 1, 2))
    assert list(x1) == list(entry.input_names)
    assert all(torch.equal(x1[k], x2[k]) for k in x1)
    assert any(not torch.equal(x1[k], y[k]) for k in x1)
    cfg = entry.small
    if name == "dlrm":
        sizes = torch.tensor(cfg.table_sizes)
        cat = x1["categorical_features"]
        assert cat.dtype == torch.int64 and (cat >= 0).all() and (cat < sizes).all()
    if name == "bert":
        assert (x1["input_ids"] < cfg.vocab_size).all()
        assert (x1["attention_mask"] == 0).any(), "padding should be exercised"
        assert set(x1["token_type_ids"].unique().tolist()) == {0, 1}


# -- exports ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_torchscript_script_parity(name: str) -> None:
    entry, model = ZOO[name], small_model(name)
    scripted = torch.jit.script(model)
    buffer = io.BytesIO()  # what Triton's PyTorch backend loads is the saved file
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    inputs = entry.example_inputs(None, batch_size=3, seed=5)
    assert_outputs_close(run(loaded, inputs), run(model, inputs), JIT_TOL)


@pytest.mark.parametrize("name", NAMES)
def test_torchscript_trace_parity_at_another_batch_size(name: str) -> None:
    entry, model = ZOO[name], small_model(name)
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(entry.example_inputs(None, 2).values()))
    for batch in (1, 5):
        inputs = entry.example_inputs(None, batch_size=batch, seed=batch)
        assert_outputs_close(run(traced, inputs), run(model, inputs), JIT_TOL)
    if name == "bert":  # the traced graph must not bake in the sequence length either
        inputs = bert.example_inputs(entry.small.with_seq_length(11), batch_size=3)
        assert_outputs_close(run(traced, inputs), run(model, inputs), JIT_TOL)


@pytest.mark.parametrize("name", NAMES)
def test_onnx_dynamo_export_runs_in_onnxruntime(name: str, tmp_path: Path) -> None:
    entry, model = ZOO[name], small_model(name)
    path = tmp_path / f"{name}.onnx"
    # Batch 2, not 1: the dynamo exporter specialises size-1 dimensions to constants.
    example = entry.example_inputs(None, batch_size=2)
    torch.onnx.export(
        model,
        tuple(example.values()),
        str(path),
        dynamo=True,
        dynamic_shapes=entry.export_dynamic_shapes(),
        input_names=list(entry.input_names),
        output_names=list(entry.output_names),
        verbose=False,
    )
    graph = onnx.load(str(path)).graph
    assert [i.name for i in graph.input] == list(entry.input_names)
    assert [o.name for o in graph.output] == list(entry.output_names)
    for value in [*graph.input, *graph.output]:
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch"

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cases = [entry.example_inputs(None, batch_size=b, seed=b) for b in (1, 5)]
    if name == "bert":
        cases.append(bert.example_inputs(entry.small.with_seq_length(9), batch_size=3))
    for inputs in cases:
        feed = {k: v.numpy() for k, v in inputs.items()}
        got = session.run(list(entry.output_names), feed)
        assert_outputs_close(got, run(model, inputs), ORT_TOL)


# -- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_round_trip(name: str, tmp_path: Path) -> None:
    entry = ZOO[name]
    trained = entry.build(entry.small, seed=11)  # stands in for a user's trained weights
    state = trained.state_dict()
    inputs = entry.example_inputs(None, batch_size=2)
    want = run(trained, inputs)
    layouts = {
        "raw.pt": state,
        "lightning.pt": {"state_dict": state, "epoch": 3},
        "dataparallel.pt": {"model": {f"module.{k}": v for k, v in state.items()}},
    }
    for filename, obj in layouts.items():
        torch.save(obj, tmp_path / filename)
        loaded = entry.build(entry.small, seed=0, checkpoint=tmp_path / filename)
        assert not loaded.training
        assert_outputs_close(run(loaded, inputs), want, (0.0, 0.0))


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_with_wrong_keys_names_them(name: str, tmp_path: Path) -> None:
    entry = ZOO[name]
    state = dict(entry.build(entry.small).state_dict())
    dropped = sorted(state)[0]
    del state[dropped]
    state["head.bogus_weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError) as info:
        entry.build(entry.small, checkpoint=tmp_path / "bad.pt")
    message = str(info.value)
    assert "bad.pt" in message
    assert "missing keys (1)" in message and dropped in message
    assert "unexpected keys (1)" in message and "head.bogus_weight" in message


def test_checkpoint_errors_are_clear(tmp_path: Path) -> None:
    small = mnist.Config.small()
    # the full-size network into the small one: every shape but fc3.bias (10 classes) differs
    torch.save(mnist.build(mnist.Config.full()).state_dict(), tmp_path / "full.pt")
    with pytest.raises(CheckpointError, match=r"shape mismatches \(11\): conv1.weight"):
        mnist.build(small, checkpoint=tmp_path / "full.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        mnist.build(small, checkpoint=tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="could not be read"):
        mnist.build(small, checkpoint=tmp_path / "junk.pt")
    torch.save([torch.zeros(1)], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="expected a state_dict"):
        mnist.build(small, checkpoint=tmp_path / "list.pt")
    torch.save({"conv1.weight": torch.zeros(1), "note": "x"}, tmp_path / "mixed.pt")
    with pytest.raises(CheckpointError, match="'note' is a str, not a tensor"):
        mnist.build(small, checkpoint=tmp_path / "mixed.pt")


# -- parameter counts -------------------------------------------------------------------------

# Exact counts of the full configs, and the published figures they must be close to.
FULL_PARAMETERS = {
    "resnet50": (25_557_032, 25.6e6),
    "resnext101-32x4d": (44_177_704, 44.2e6),
    "se-resnext101-32x4d": (48_955_416, 49.0e6),
    "bert": (335_143_938, 335e6),  # BERT-large + pooler + QA head; 334.09M without pooler
    "mnist": (
        584_042,
        584_042,
    ),  # the MNIST CPU example: BYTES 2.374M = 4 * (params + batch-12 I/O)
    "text_recognition": (44_282_885, 44.3e6),  # Baek et al. 2019 table: 44.3M
    # 571,686 embedding rows x 128 + 2,368,897 MLP parameters
    "dlrm": (75_544_705, 75_544_705),
}


@pytest.mark.parametrize("name", NAMES)
def test_full_config_parameter_counts(name: str) -> None:
    exact, published = FULL_PARAMETERS[name]
    count = ZOO[name].num_parameters(ZOO[name].full)
    assert count == exact
    assert abs(count - published) / published < 0.005


def test_mnist_matches_the_seed_cost_figures() -> None:
    """the MNIST CPU example's thop output: 84.686M MACs at batch 12, 91.743M at batch 13."""
    model = mnist.build(mnist.Config.full())
    macs = 0

    def count(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal macs
        assert isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))
        macs += out.numel() * module.weight[0].numel()

    for module in model.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            module.register_forward_hook(count)
    run(model, mnist.example_inputs(mnist.Config.full(), batch_size=12))
    assert round(macs / 1e6, 3) == 84.686
    params = sum(p.numel() for p in model.parameters())
    assert round(4 * (params + 12 * 28 * 28 + 12 * 10) / 1e6, 3) == 2.374


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_full_configs_build_and_run(name: str) -> None:
    entry = ZOO[name]
    model = entry.build(entry.full, seed=0)
    assert sum(p.numel() for p in model.parameters()) == FULL_PARAMETERS[name][0]
    inputs = entry.example_inputs(entry.full, batch_size=2)
    for spec, out in zip(entry.io_spec(entry.full)[1], run(model, inputs), strict=True):
        assert out.shape[0] == 2 and torch.isfinite(out).all()
        assert all(d in (-1, n) for d, n in zip(spec.dims, out.shape[1:], strict=True))


# -- model specifics --------------------------------------------------------------------------


def test_dlrm_table_sizes_from_model_size_json(tmp_path: Path) -> None:
    sizes = {"_c14": 7, "_c15": 300, "_c16": 2}
    (tmp_path / "model_size.json").write_text(json.dumps(sizes))
    cfg = dlrm.Config.from_model_size(tmp_path / "model_size.json", embedding_dim=128)
    assert cfg.table_sizes == (7, 300, 2) and cfg.feature_names == ("_c14", "_c15", "_c16")
    (tmp_path / "list.json").write_text("[5, 6]")
    assert dlrm.Config.from_model_size(str(tmp_path / "list.json")).table_sizes == (5, 6)
    assert dlrm.Config.from_model_size([3, 4]).num_tables == 2
    with pytest.raises(ValueError, match="must equal embedding_dim"):
        dlrm.Config.from_model_size(sizes, embedding_dim=64)  # bottom MLP still ends in 128
    with pytest.raises(ValueError, match="integers"):
        not_sizes: Any = {"a": "many"}
        dlrm.Config.from_model_size(not_sizes)


def test_dlrm_interactions_hashing_and_fp16() -> None:
    small = dlrm.Config.small()
    n = small.num_tables + 1
    assert small.interaction_dim == 16 + n * (n - 1) // 2
    assert small.with_(self_interaction=True).interaction_dim == 16 + n * (n + 1) // 2
    cat = small.with_(interaction_op="cat")
    assert cat.interaction_dim == 16 * n
    inputs = dlrm.example_inputs(small, batch_size=4)
    for cfg in (cat, small.with_(self_interaction=True)):
        (out,) = run(dlrm.build(cfg), inputs)
        assert out.shape == (4, 1) and ((out > 0) & (out < 1)).all()

    model = small_model("dlrm")
    shifted = dict(inputs)  # hashing: index + k * table_size is the same row
    shifted["categorical_features"] = inputs["categorical_features"] + 3 * torch.tensor(
        small.table_sizes
    )
    assert torch.equal(run(model, shifted)[0], run(model, inputs)[0])

    half = small.with_(fp16=True)
    half_inputs = dlrm.example_inputs(half, batch_size=4)
    assert half_inputs["numerical_features"].dtype == torch.float16
    (out16,) = run(dlrm.build(half), half_inputs)
    assert out16.dtype == torch.float16
    # fp16 keeps ~3 significant digits; the output is a probability
    torch.testing.assert_close(out16.float(), run(model, inputs)[0], rtol=0, atol=5e-3)


def test_dlrm_full_config_is_memory_bounded() -> None:
    full = dlrm.Config.full()
    assert full.num_tables == 26 and max(full.table_sizes) == dlrm.FULL_TABLE_CAP
    assert full.embedding_bytes < 300e6
    assert full.hash_indices and full.embedding_dim == 128
    assert full.top_mlp_sizes == (1024, 1024, 512, 256, 1)


def test_bert_padding_does_not_leak_into_real_tokens() -> None:
    model = small_model("bert")
    inputs = bert.example_inputs(bert.Config.small(), batch_size=3)
    padded = inputs["attention_mask"] == 0
    changed = {k: v.clone() for k, v in inputs.items()}
    changed["input_ids"][padded] = 7
    for a, b in zip(run(model, changed), run(model, inputs), strict=True):
        assert torch.equal(a[~padded], b[~padded])


def test_bert_variants() -> None:
    assert bert.Config.by_name("large-384") == bert.Config.full(384)
    assert bert.Config.by_name("base-128").num_layers == 12
    assert bert.Config.base(384).seq_length == 384
    assert ZOO["bert"].num_parameters(bert.Config.base()) == 109_483_778  # BERT-base + QA
    with pytest.raises(ValueError, match="unknown BERT variant"):
        bert.Config.by_name("huge-1")
    with pytest.raises(ValueError, match="seq_length"):
        bert.Config.small(seq_length=4096)


def test_resnext_configs() -> None:
    with pytest.raises(ValueError, match="unknown architecture"):
        resnext.Config.full("resnet18")
    small = resnext.Config.small("se-resnext101-32x4d")
    assert small.se_reduction and small.groups > 1 and small.image_size == 64
    assert resnext.Config.small("resnet50").groups == 1
    assert textrec.Config.full().time_steps == 26
