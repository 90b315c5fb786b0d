"""`python -m pytest_triton.load.perf` runs triton-perf."""

from pytest_triton.load.perf.command import perf_main

raise SystemExit(perf_main())
