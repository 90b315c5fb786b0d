"""Client layer: `TritonClient`, one protocol's client built from the parts it holds:
`control` (the endpoint every part shares, tritonclient's control client, failures mapped to
our errors, health, metadata, statistics), `memory_regions` (the shared-memory regions it
owns), `inference` (the checks, through tritonclient), `load_wire` (the load path over the
hand-written wire); `request_path` chooses between the two paths. Also the statistics API
(`stats`) and what a failed request says (`failures`); `wire/` below it.

Rule: imports only `base`; knows nothing of repositories, launchers or front ends.
"""
