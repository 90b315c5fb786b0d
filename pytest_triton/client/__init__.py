"""Client layer: `TritonClient`, the one request path to a server, split by job behind one
face: `control` (what every part shares, failures mapped to our errors, model control,
health, metadata, statistics), `memory_regions` (shared memory as a transport), `inference`
(prepare, send, infer, lanes); `triton_client` composes them. Also the statistics API
(`stats`) and what a failed request says (`failures`); `wire/` below it.

Rule: imports only `base`; knows nothing of repositories, launchers or front ends.
"""

from pytest_triton.base.moved import forwarder

__getattr__ = forwarder(__name__)  # the names of the module this package replaced (0.1.0)
