"""Inside a Locust process: our listeners on Locust's events, its options from the settings
table, the run's state, the embedded server, the user machinery (multiplexer, open loop),
request recording and the verdict at the end.

Rule: may import locust; never pytest.
"""
