"""`python -m pytest_triton.load.sweep` runs triton-perf."""

from pytest_triton.load.sweep.command import perf_main

raise SystemExit(perf_main())
