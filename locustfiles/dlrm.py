"""NVIDIA's DLRM example under load: requests of 4096 samples that the dynamic batcher packs,
as the example's client sends them.

Serving settings are the zoo's (as the example: max batch 65536, dynamic batching with a 1 ms queue
delay, one instance). The example's analysis "a 20 ms latency bound allows 8 concurrent requests" is
a V100 figure; on a CPU machine measure first (`triton-perf --model dlrm ...`), then gate:

    locust -f locustfiles/dlrm.py --headless -u 8 -r 8 -t 30s
    locust -f locustfiles/dlrm.py --headless -u 8 -r 8 -t 30s --triton-protocol grpc \
        --perf-latency-p99 250 --perf-throughput 50000
"""

from pytest_triton.load.users import TritonUser, zoo_model

DLRM = zoo_model("dlrm")


class DlrmUser(TritonUser):
    served = DLRM
    batch_size = 4096
