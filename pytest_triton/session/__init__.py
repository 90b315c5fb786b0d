"""Session layer: pick and start a launcher, plan the repository for what its server offers,
load variants on demand (`Deployment`, `ServedModel`).

Rule: imports `base`, `client`, `parity`, `repository`, `models` and `server`; never a front end.
"""

from pytest_triton.base.moved import forwarder

__getattr__ = forwarder(__name__)  # the names of the module this package replaced (0.1.0)
