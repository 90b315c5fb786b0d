"""Stream users of the vLLM layout, one per tokenizer scheme (tests/helpers/text_tokenizers.py),
each sending text prompts to its scheme's model (right: no fault asked) with every answer
checked as text; the Metaspace (Llama-style) one over HTTP generate_stream, the others over
gRPC."""

from pytest_triton.load.stream_users import StreamUser, stream_model
from tests.helpers import text_tokenizers


class WordLevelUser(StreamUser):
    served = stream_model(text_tokenizers.text_spec("wordlevel"))
    model = "vllm_wordlevel_faulty"
    prompts = text_tokenizers.PROMPTS
    max_tokens = 12


class ByteLevelUser(StreamUser):
    served = stream_model(text_tokenizers.text_spec("bytelevel_bpe"))
    model = "vllm_bytelevel_bpe_faulty"
    prompts = text_tokenizers.PROMPTS
    max_tokens = 12


class MetaspaceUser(StreamUser):
    served = stream_model(text_tokenizers.text_spec("metaspace_bpe"))
    model = "vllm_metaspace_bpe_faulty"
    protocol = "http"
    prompts = text_tokenizers.PROMPTS
    max_tokens = 12
