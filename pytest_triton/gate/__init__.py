"""The release-gate report: what a session served and measured, in one document a reviewer
reads (report.md, plots) and a machine compares (report.json, baselines).

This package only reads and writes documents (JSON-friendly dicts): the pytest plugin feeds it
the results it recorded per test, and load runs (Locust's --triton-report-json, triton-perf's
--json) leave their files in the report directory.

Rule: imports only itself and the package's errors (`base.errors`), and neither pytest nor
locust, so any front end (or a script) can write a report.
"""
