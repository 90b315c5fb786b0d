"""Light load on a variant of the digits-trained MNIST CNN on a server given with --host
(--triton-model names the variant): the held-out digits in batches of 16, each answer
checked against the fp32 CNN's logits. With --triton-min-agreement an INT8 variant is
judged by top-1 agreement instead of the parity tolerance.

    locust -f digits_agreement.py --host http://127.0.0.1:PORT \
        --triton-model digits_onnx_int8 --triton-check-every 1 --triton-min-agreement 0.98

The digits and the fp32 logits come from the .npz file DIGITS_AGREEMENT_DATA names (images,
logits: what the test computed already, so that this process imports neither torch nor
scikit-learn), else they are computed here.
"""

import os
from collections.abc import Mapping

import numpy as np
from locust import constant_throughput

from pytest_triton.base.dtypes import Array
from pytest_triton.load.users import TritonUser

BATCH = 16
RATE = 20  # requests per second per user: enough samples, little CPU
DATA = "DIGITS_AGREEMENT_DATA"


def held_out_and_logits() -> tuple[Array, Array]:
    """The held-out digits and the fp32 CNN's logits of them, loaded as the locustfile is
    imported: before the run's clock starts (a user's on_start blocks every greenlet)."""
    if os.environ.get(DATA):
        with np.load(os.environ[DATA]) as data:
            return data["images"], data["logits"]
    import torch

    from pytest_triton.models import digits

    images = digits.load().test_images
    with torch.inference_mode():  # the CNN from the export cache's directory, where one is set
        return images, digits.trained()(torch.from_numpy(images)).numpy()


IMAGES, LOGITS = held_out_and_logits()
BATCHES = len(IMAGES) // BATCH  # 22 batches: 352 of the 360 held-out digits
KNOWN = {
    IMAGES[i : i + BATCH].tobytes(): LOGITS[i : i + BATCH] for i in range(0, len(IMAGES), BATCH)
}


def held_out(batch_size: int, seed: int) -> dict[str, Array]:
    start = (seed % BATCHES) * BATCH
    return {"input__0": IMAGES[start : start + batch_size]}


def fp32(inputs: Mapping[str, Array]) -> dict[str, Array]:
    """The fp32 CNN's logits of one of held_out's batches."""
    return {"output__0": KNOWN[np.ascontiguousarray(inputs["input__0"]).tobytes()]}


class DigitsUser(TritonUser):
    inputs = staticmethod(held_out)
    reference = staticmethod(fp32)
    batch_size = BATCH
    distinct_inputs = BATCHES
    wait_time = constant_throughput(RATE)
