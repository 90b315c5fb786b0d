"""The load tests' locustfile: the probe model, served by an embedded server without --host."""

from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.load.users import TritonUser
from tests.helpers.probe_models import probe_spec

PROBE = EmbeddedModel(probe_spec)


class ProbeUser(TritonUser):
    served = PROBE
    batch_size = 1
