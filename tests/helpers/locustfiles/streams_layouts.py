"""Stream users in the LLM backends' layouts (tests/helpers/stream_models.py's LAYOUT_SPECS):
the TensorRT-LLM layout over gRPC, right; the vLLM layout over HTTP generate_stream from its
faulty model, corrupting the token at CORRUPT_AT. Each user takes its interface, tokenizer and
reference from its spec."""

from pytest_triton.load.stream_users import StreamUser, stream_model
from tests.helpers.stream_models import LAYOUT_SPECS


class TrtLlmUser(StreamUser):
    served = stream_model(LAYOUT_SPECS["trtllm"])
    model = "trtllm_lm"
    max_tokens = 10


class FaultyVllmUser(StreamUser):
    served = stream_model(LAYOUT_SPECS["vllm"])
    model = "vllm_lm_faulty"
    protocol = "http"
    max_tokens = 10
    parameters = {"fault": "corrupt"}
