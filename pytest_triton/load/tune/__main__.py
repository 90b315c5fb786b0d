import os
import sys

from pytest_triton.load.tune.tuner import tune_main

os.environ.setdefault("PYTHONUNBUFFERED", "1")
sys.exit(tune_main())
