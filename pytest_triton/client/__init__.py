"""Client layer: `TritonClient`, the one request path to a server (control, inference, shared
memory), the statistics API, and what a failed request says; `wire/` below it.

Rule: imports only `base`; knows nothing of repositories, launchers or front ends.
"""
