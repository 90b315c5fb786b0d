"""A locustfile for a server that already serves `add_one` (Y = X + 1, dims [4]): the load
tests' client of deployed servers, behind an ingress for instance."""

from typing import Any

import numpy as np

from pytest_triton.load.users import TritonUser


class AddOneUser(TritonUser):
    model = "add_one"
    batch_size = 1

    @staticmethod
    def inputs(batch_size: int, seed: int) -> dict[str, Any]:
        return {"X": np.full((batch_size, 4), float(seed), np.float32)}
