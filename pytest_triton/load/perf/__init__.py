"""`triton-perf`: a perf_analyzer-like sweep over concurrency and batch size, with Locust
users run in library mode; its points, reports and latency-bound search."""
