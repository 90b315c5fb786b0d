"""Load tests of Triton-served models with Locust.

Only `users`, `hooks` and `sweep` import locust (which monkey-patches the process with gevent);
the pytest plugin never imports this package, and the other modules here stay free of locust so
pytest can import them.
"""
