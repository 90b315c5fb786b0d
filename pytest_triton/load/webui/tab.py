"""The "Triton" tab in Locust's web UI, and its charts page, through Locust's documented
extension points (its extend_web_ui example): `extended_tabs` / `extended_tables` in the web
UI's template arguments, the tab's rows as `extended_stats` in each /stats/requests answer, a
Flask blueprint on `web_ui.app` for the charts page, its JSON and the samples CSV, and
`extended_csv_files` for the links on the Download Data tab.

Locust's React UI renders an extended tab as one table, so the tab holds the figures; the
charts (samples/s and p99 over time, the server's latency breakdown, the batch-size
histogram; where the run has streams, their time to first token, inter-token latency and
output tokens/s) are on ./triton, a static page that draws them from ./triton/live.json.
"""

from __future__ import annotations

import csv
import io
import json
from importlib import resources
from typing import Any

from flask import Blueprint, Response, jsonify, make_response, request
from locust.env import Environment
from locust.web import WebUI

from pytest_triton.load.runner.run import run_of
from pytest_triton.load.webui.live import live_of
from pytest_triton.load.webui.snapshot import TAB_COLUMNS, TAB_KEY, as_json, csv_rows, tab_rows

STATIC = resources.files("pytest_triton.load.webui") / "static"
STATS_ENDPOINT = "locust.request_stats"  # Locust's /stats/requests, polled by its UI


def install_web_tab(environment: Environment) -> None:
    """Add the tab to the environment's web UI (the master's, or the local process's)."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None:
        return
    web_ui.template_args.update(
        extended_tabs=[{"title": "Triton", "key": TAB_KEY}],
        extended_tables=[{"key": TAB_KEY, "structure": TAB_COLUMNS}],
        extended_csv_files=[
            {"href": "./triton/csv", "title": "Download Triton samples/s CSV"},
            {
                "href": "./triton",
                "title": "Open the Triton charts (samples/s, p99, latency breakdown, batch "
                "sizes; streams' TTFT, ITL, tokens/s)",
            },
        ],
    )
    app = web_ui.app
    app.after_request(_add_rows(environment))
    app.register_blueprint(_blueprint(environment, web_ui))


def _add_rows(environment: Environment) -> Any:
    def add_rows(response: Response) -> Response:
        if request.endpoint != STATS_ENDPOINT or response.status_code != 200:
            return response
        body = response.get_json(silent=True)
        if isinstance(body, dict):
            view = live_of(environment)
            rows = tab_rows(view.snapshot if view else None, _refusal(environment))
            body["extended_stats"] = [{"key": TAB_KEY, "data": rows}]
            response.set_data(json.dumps(body))
        return response

    return add_rows


def _refusal(environment: Environment) -> str:
    """Why the current run was refused at its start; empty when it was not."""
    run = run_of(environment)
    return run.refusal if run is not None and run.refused else ""


def _blueprint(environment: Environment, web_ui: WebUI) -> Blueprint:
    base = (
        (environment.parsed_options.web_base_path or None)
        if environment.parsed_options is not None
        else None
    )
    blueprint = Blueprint("pytest_triton", __name__, url_prefix=base)

    @blueprint.route("/triton")
    @web_ui.auth_required_if_enabled
    def page() -> Response:
        return _static("triton.html", "text/html; charset=utf-8")

    @blueprint.route("/triton/static/<name>")
    @web_ui.auth_required_if_enabled
    def static(name: str) -> Response:
        types = {"triton.js": "text/javascript", "triton.css": "text/css"}
        if name not in types:
            return make_response("not found", 404)
        return _static(name, f"{types[name]}; charset=utf-8")

    @blueprint.route("/triton/live.json")
    @web_ui.auth_required_if_enabled
    def live() -> Response:
        view = live_of(environment)
        snapshot, history = (view.snapshot, view.history) if view else (None, ())
        return jsonify(as_json(snapshot, history, _refusal(environment)))

    @blueprint.route("/triton/csv")
    @web_ui.auth_required_if_enabled
    def samples_csv() -> Response:
        view = live_of(environment)
        if view is None or view.snapshot is None:
            return make_response("no test has run yet", 404)
        text = io.StringIO()
        csv.writer(text).writerows(csv_rows(view.snapshot))
        response = make_response(text.getvalue())
        response.headers["Content-Type"] = "text/csv"
        response.headers["Content-Disposition"] = "attachment;filename=triton_samples.csv"
        return response

    return blueprint


def _static(name: str, content_type: str) -> Response:
    response = make_response((STATIC / name).read_text(encoding="utf-8"))
    response.headers["Content-Type"] = content_type
    response.headers["Cache-Control"] = "no-store"
    return response
