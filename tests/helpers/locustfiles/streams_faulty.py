"""Stream users for the load tests: the good generator over HTTP generate_stream, and the
faulty one (tests/helpers/stream_models.py) corrupting the token at CORRUPT_AT over gRPC."""

from pytest_triton.load.stream_users import StreamUser, stream_model
from pytest_triton.models import tiny_generator
from pytest_triton.repository.stream import generate

SPEC = tiny_generator.stream_spec(instances=1)
MODULE = SPEC.module()


class HttpStreamUser(StreamUser):
    model = SPEC.name
    protocol = "http"
    prompts = SPEC.prompts(8)
    reference = staticmethod(lambda p, n, stop: generate(MODULE, p, n, stop))


class CorruptStreamUser(StreamUser):
    model = f"{SPEC.name}_faulty"
    served = stream_model(SPEC)  # its reference: the spec's greedy generation
    prompts = SPEC.prompts(8)
    parameters = {"fault": "corrupt"}
