"""Repository-level test setup for the plugin's own suites (tests/, examples/, benchmarks/)."""

import os

# pytester drives the plugin as users meet it, in throwaway projects.
pytest_plugins = ["pytester"]

# This project's machines are offline: testcontainers' Ryuk reaper image cannot be pulled.
# pytest-triton labels its containers and reaps those of dead runs itself. (Read by
# testcontainers when it is first imported, which is after this file.)
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
