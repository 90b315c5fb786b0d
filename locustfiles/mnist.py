"""The MNIST CPU example under load: single-image requests, like its perf_analyzer sweep.

Serving settings are the zoo's (as the example: dynamic batching with a 150 us queue delay,
five CPU instances, max batch 8).

    locust -f locustfiles/mnist.py --headless -u 8 -r 8 -t 30s            # embedded server
    locust -f locustfiles/mnist.py --headless -u 8 -t 30s --host grpc://127.0.0.1:8001 \
        --triton-model mnist_onnx --perf-latency-p99 20
"""

from pytest_triton.load.users import TritonUser, zoo_model

MNIST = zoo_model("mnist")


class MnistUser(TritonUser):
    served = MNIST
    batch_size = 1
