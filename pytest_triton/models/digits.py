"""Real labelled data with no download: scikit-learn's bundled handwritten digits (1,797
labelled 8x8 images of 0-9, in its wheel) upscaled to MNIST's 28x28, and the zoo's MNIST CNN
trained on them in seconds, so that its accuracy is a real number to keep.

Upscaling: bilinear, 8x8 -> 24x24, padded by 2 on each side (28x28, the digit centred as in
MNIST), values scaled from 0-16 to [0, 1].
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pytest_triton.base.dtypes import Array
from pytest_triton.models import mnist
from pytest_triton.repository import export_cache
from pytest_triton.repository.spec import ModelSpec

HELD_OUT = 0.2  # the share of the digits kept out of training, stratified by class
SEED = 0
SMALL = mnist.Config.small()


@dataclass(frozen=True)
class Digits:
    """Images [N, 1, 28, 28] float32 in [0, 1] and labels [N] int64, split once."""

    train_images: Array
    train_labels: Array
    test_images: Array
    test_labels: Array

    def batches(self, batch_size: int = 32, held_out: bool = True) -> list[tuple[Array, Array]]:
        """(images, labels) batches of the held-out (or training) split, in order."""
        images, labels = (
            (self.test_images, self.test_labels)
            if held_out
            else (self.train_images, self.train_labels)
        )
        return [
            (images[i : i + batch_size], labels[i : i + batch_size])
            for i in range(0, len(images), batch_size)
        ]


def upscale(images: Array) -> Array:
    """[N, 8, 8] digits (0-16) -> [N, 1, 28, 28] float32 in [0, 1]."""
    small = torch.from_numpy(np.asarray(images, dtype=np.float32)[:, None] / 16.0)
    big = F.interpolate(small, size=(24, 24), mode="bilinear", align_corners=False)
    return np.pad(big.numpy(), ((0, 0), (0, 0), (2, 2), (2, 2))).astype(np.float32)


@functools.cache
def load() -> Digits:
    """scikit-learn's digits, upscaled and split (stratified, fixed seed)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = upscale(data.images)
    labels = data.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=HELD_OUT, random_state=SEED, stratify=labels
    )
    return Digits(train_x, train_y, test_x, test_y)


@functools.cache
def trained(config: mnist.Config = SMALL, epochs: int = 6, lr: float = 1e-2) -> mnist.MNISTNet:
    """The zoo's MNIST CNN trained on the digits' training split (Adam with a one-cycle
    schedule, batch 32, a fixed seed: the same weights each time); in eval mode: seconds of
    CPU for the small network, about 97% on the held-out digits. Kept in the export
    cache's directory where PYTEST_TRITON_EXPORT_CACHE names one (export_cache.py), so the
    processes of one test run train it once."""
    cache = export_cache.directory()
    recipe = f"{config}|{epochs}|{lr}|{torch.__version__}".encode() + Path(__file__).read_bytes()
    key = hashlib.sha256(recipe).hexdigest()
    saved = cache / f"digits-mnist-{key[:16]}.pt" if cache is not None else None
    if saved is not None and saved.is_file():
        return mnist.build(config, checkpoint=saved)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small batches: several threads on a busy machine wait
    try:
        model = _train(config, epochs, lr)
    finally:
        torch.set_num_threads(threads)
    if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        partial = saved.with_name(f"{saved.name}.{os.getpid()}.partial")
        torch.save(model.state_dict(), partial)
        partial.replace(saved)  # atomic: a concurrent reader sees all of it or none
    return model


def _train(config: mnist.Config, epochs: int, lr: float) -> mnist.MNISTNet:
    digits = load()
    model = mnist.build(config, seed=SEED)
    model.train()
    gen = torch.Generator().manual_seed(SEED)
    x = torch.from_numpy(digits.train_images)
    y = torch.from_numpy(digits.train_labels)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * -(-len(x) // 32)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x), 32):
                pick = order[start : start + 32]
                optimizer.zero_grad()
                F.cross_entropy(model(x[pick]), y[pick]).backward()
                optimizer.step()
                schedule.step()
    return model.eval()


def held_out_accuracy(model: torch.nn.Module) -> float:
    """Top-1 of a model on the held-out digits, in PyTorch."""
    digits = load()
    with torch.inference_mode():
        predicted = model(torch.from_numpy(digits.test_images)).argmax(dim=1).numpy()
    return float((predicted == digits.test_labels).mean())


def spec(name: str = "digits", config: mnist.Config = SMALL, **fields: Any) -> ModelSpec:
    """The digits-trained CNN (`config`: the small network, or mnist.Config.full(), the
    example's) as a spec taking [N, 1, 28, 28] digits in batches of up to 64; `fields` set
    the rest (formats, fp16, int8, calibration)."""
    return ModelSpec(
        name=name,
        module=functools.partial(trained, config),
        example_inputs=(torch.from_numpy(load().train_images[:4]),),
        inputs=["input__0"],
        outputs=["output__0"],
        max_batch_size=64,
        **fields,
    )


def int8_spec(
    name: str = "digits", calibration: Array | None = None, config: mnist.Config = SMALL
) -> ModelSpec:
    """The digits-trained CNN served as fp32 and INT8 ONNX, its static quantization
    calibrated on `calibration` (default: the first 256 training digits) in batches of 64."""
    batches = calibration if calibration is not None else load().train_images[:256]
    return spec(
        name,
        config,
        formats=["onnx"],
        int8=True,
        calibration=lambda: [{"input__0": batches[i : i + 64]} for i in range(0, len(batches), 64)],
    )


def fp16_spec(
    name: str = "digits_fp16",
    formats: Sequence[str] = ("torchscript-trace", "onnx"),
    config: mnist.Config = SMALL,
) -> ModelSpec:
    """The digits-trained CNN served as fp32 and fp16 in `formats` (half weights, half
    inputs and outputs on the wire), to be judged by held-out accuracy against fp32 PyTorch."""
    return spec(name, config, formats=list(formats), fp16=True)
