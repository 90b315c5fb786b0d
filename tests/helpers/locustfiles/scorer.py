"""The scorer (tests.helpers.tiny_models) as a Locust user, for servers started by a test."""

from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.load.users import TritonUser
from tests.helpers.tiny_models import scorer_spec

SCORER = EmbeddedModel(
    lambda: scorer_spec(formats=["torchscript-trace"], triton_name="scorer"), "torchscript-trace"
)


class ScorerUser(TritonUser):
    served = SCORER
    model = "scorer"
    batch_size = 1
