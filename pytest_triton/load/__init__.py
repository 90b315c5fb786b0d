"""Locust front end: load tests of Triton-served models.

`users` is what a locustfile imports (`TritonUser`, `zoo_model`); `locust/` runs inside Locust's
processes, `webui/` is the web UI's Triton tab, `sweep/` is triton-perf, `tune/` is triton-tune
(it measures with triton-perf's generator), and `measure/` is what they all measure with.

Rules: a front end, never imported by `plugin` or `cli`; only `users`, `locust/`, `webui/` and
`sweep/` import locust (it monkey-patches the process with gevent); nothing here imports pytest.
"""
