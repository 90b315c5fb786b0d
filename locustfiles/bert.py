"""BERT question answering (NVIDIA's BERT example) under load: one sequence per request, packed by
the dynamic batcher (max batch 8, preferred [4, 8], 5 ms queue delay, one instance: the zoo's
serving settings). The example's "100 ms bound -> 9 concurrent requests" is a GPU figure; pass your
own bound:

    locust -f locustfiles/bert.py --headless -u 9 -r 9 -t 30s --perf-latency-p99 100
"""

from pytest_triton.load.users import TritonUser, zoo_model

BERT = zoo_model("bert")


class BertUser(TritonUser):
    served = BERT
    batch_size = 1
