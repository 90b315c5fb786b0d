"""The "Triton" tab of Locust's web UI: the live snapshot, PREFIX_triton.csv, the tab's page
and charts (static files in `static/`)."""
