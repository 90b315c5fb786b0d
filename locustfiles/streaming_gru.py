"""The zoo's stateful model under load: a streaming GRU behind Triton's sequence batcher.

Each user sends whole sequences (about 8 frames, lengths varied by 20%, as perf_analyzer's
--sequence-length 8 --sequence-length-variation 20), every answer checked against its own
sequence's PyTorch reference, so state leaking between interleaved sequences fails the run.

    locust -f locustfiles/streaming_gru.py --headless -u 8 -r 8 -t 30s      # embedded server
    locust -f locustfiles/streaming_gru.py --headless -u 8 -t 30s --host grpc://127.0.0.1:8001 \
        --triton-check-every 1 --perf-latency-p99 20
"""

from pytest_triton.load.sequence_users import EmbeddedSequenceModel, SequenceUser
from pytest_triton.models import streaming_gru

STREAMING_GRU = EmbeddedSequenceModel(lambda: streaming_gru.sequence_spec("small", "direct"))


class StreamingGruUser(SequenceUser):
    served = STREAMING_GRU
    sequence_length = 8
    sequence_length_variation = 0.2
