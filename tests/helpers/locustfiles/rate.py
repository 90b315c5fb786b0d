"""The measurement tests' locustfile: load at a fixed rate on a server given with --host (the
model named by --triton-model), closed or open loop.

    locust -f rate.py PacedUser ...                          # closed loop, paced at 100 req/s
    locust -f rate.py OpenUser --triton-request-rate 100 ... # open loop at 100 req/s
"""

from locust import constant_throughput

from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.load.users import TritonUser
from tests.helpers.probe_models import probe_spec

RATE = 100
SIGNATURE = EmbeddedModel(probe_spec)  # x: FP32 [8] -> y: FP32 [4], as the sleepy models


class PacedUser(TritonUser):
    """A closed loop at RATE: the next request leaves 1/RATE after the last one left, or at
    once when that one took longer (Locust's constant_throughput): a stall delays one
    request, and the requests that should have left meanwhile are never sent."""

    served = SIGNATURE
    wait_time = constant_throughput(RATE)


class OpenUser(TritonUser):
    """With --triton-request-rate, requests leave on schedule whatever the server does."""

    served = SIGNATURE
