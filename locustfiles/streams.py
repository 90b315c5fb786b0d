"""A decoupled token generator under streaming load: time to first token, inter-token latency,
output tokens/s, and one stream in N compared token by token with PyTorch's greedy generation.

With no --host the locustfile serves the zoo's streaming example itself
(models/tiny_generator.py: a small GRU generator with random weights, TorchScript in a
decoupled python-backend model).

    locust -f locustfiles/streams.py --headless -u 4 -r 4 -t 20s              # embedded server
    locust -f locustfiles/streams.py --headless -u 4 -t 30s --perf-ttft-p99 200 \
        --perf-itl-p99 50 --perf-output-tokens-per-s 100 \
        --perf-stream-goodput 0.95 --perf-slo-ttft-ms 100 --perf-slo-itl-ms 20
    locust -f locustfiles/streams.py --headless -u 8 -t 20s --triton-request-rate 20 \
        --triton-request-distribution poisson --triton-max-in-flight 4      # open loop
"""

from pytest_triton.load.stream_users import StreamUser, stream_model

STREAM = stream_model()


class GrpcStreamUser(StreamUser):
    served = STREAM
    protocol = "grpc"
    max_tokens = 16
