"""The text-recognition model of Triton's tutorial (Triton tutorial part 2) under load: requests of
batch 2, as its `perf_analyzer -b 2 --concurrency-range 2:16:2` runs; served with dynamic
batching and two instances (the tutorial's best configuration, the zoo's serving settings).

    locust -f locustfiles/text_recognition.py --headless -u 16 -r 16 -t 30s
"""

from pytest_triton.load.users import TritonUser, zoo_model

TEXT_RECOGNITION = zoo_model("text_recognition")


class TextRecognitionUser(TritonUser):
    served = TEXT_RECOGNITION
    batch_size = 2
