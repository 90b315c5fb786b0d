"""ResNeXt101-32x4d (NVIDIA's ResNeXt example) under load: single-image requests that the
dynamic batcher combines (max batch 64, no queue delay, one instance: the zoo's serving settings).

The same zoo family has "resnet50" and "se-resnext101-32x4d": change ARCH to load those.

    locust -f locustfiles/resnext.py --headless -u 16 -r 16 -t 30s
"""

from pytest_triton.load.users import TritonUser, zoo_model

ARCH = "resnext101-32x4d"
RESNEXT = zoo_model(ARCH)


class ResnextUser(TritonUser):
    served = RESNEXT
    batch_size = 1
