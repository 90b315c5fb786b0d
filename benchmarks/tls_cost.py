"""What TLS costs the Locust users. A benchmark, not a test.

Over TLS the users leave the multiplexer (one epoll loop for every user of a process) and
send on their own TLS connections. This measures, on one trivial python-backend model
(`add_one`) and at one concurrency, requests per second and the generator's CPU per request
on each path:

- gRPC plain (multiplexed) against gRPC over Triton's own TLS (--grpc-use-ssl);
- HTTP through Debian's nginx plain (multiplexed) against HTTP through the same nginx
  terminating TLS (the ingress's own cost stays on both sides of the comparison);
- and, for reference, HTTP straight to Triton.

    python benchmarks/tls_cost.py --duration 10 --users 8

Needs nginx and openssl (`make test-deps` installs nginx); certificates are made in a
temporary directory and removed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pytest_triton.server import LocalLauncher, ServerArgs  # noqa: E402
from tests.helpers import nginx  # noqa: E402
from tests.helpers.certificates import grpc_tls_flags, make_pki  # noqa: E402
from tests.helpers.locust_runs import run_locust, subprocess_env  # noqa: E402
from tests.helpers.raw_models import write_python_model  # noqa: E402

LOCUSTFILE = REPO / "tests" / "helpers" / "locustfiles" / "add_one.py"


def measure(host: str, users: int, duration: int, workdir: Path, **env: str) -> dict[str, Any]:
    args = ["--headless", "-u", str(users), "-r", str(users), "-t", f"{duration}s"]
    run = run_locust(
        LOCUSTFILE,
        *args,
        "--host",
        host,
        tmp_path=workdir,
        timeout=duration + 120,
        env=subprocess_env(**env),
    )
    if run.code != 0 or run.report is None:
        raise SystemExit(f"locust against {host} failed:\n{run.tail()}")
    measured = run.report["measured"]
    cpu = float(run.report.get("generator_cpu_percent") or 0.0)
    requests = int(measured["requests"])
    return {
        "req_s": float(measured["request_rate"]),
        "cpu_us_per_request": cpu / 100 * float(measured["duration_s"]) * 1e6 / max(requests, 1),
        "failures": int(measured["failures"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per run")
    parser.add_argument("--users", type=int, default=8, help="concurrency (Locust users)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if nginx.NGINX is None:
        print(nginx.MISSING, file=sys.stderr)
        return 2
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tls-cost-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        repo = work / "repo"
        write_python_model(repo, "add_one")
        plain = stack.enter_context(
            LocalLauncher().start(ServerArgs(repo, model_control_mode="none"))
        )
        secured = stack.enter_context(
            LocalLauncher().start(
                ServerArgs(
                    repo,
                    model_control_mode="none",
                    extra_args=grpc_tls_flags(pki),
                )
            )
        )
        upstream = [plain.endpoints.http]
        open_ingress = stack.enter_context(nginx.round_robin(upstream, work / "nginx-plain"))
        tls_ingress = stack.enter_context(
            nginx.round_robin(upstream, work / "nginx-tls", tls=(pki.server_cert, pki.server_key))
        )
        tls_env = {"TRITON_TLS_CA": str(pki.ca)}
        runs = {
            "http direct (multiplexed)": (f"http://{plain.endpoints.http}", {}),
            "http via nginx (multiplexed)": (f"http://{open_ingress}", {}),
            "https via nginx (own connections)": (f"https://{tls_ingress}", tls_env),
            "grpc (multiplexed)": (f"grpc://{plain.endpoints.grpc}", {}),
            "grpcs, Triton's TLS (own connections)": (f"grpcs://{secured.endpoints.grpc}", tls_env),
        }
        for name, (host, env) in runs.items():
            rows[name] = measure(host, args.users, args.duration, work, **env)
            print(f"{name}: {rows[name]['req_s']:,.0f} req/s", file=sys.stderr)
    print(f"\nconcurrency {args.users}, {args.duration} s each, trivial model (add_one)\n")
    print("| path | req/s | generator CPU per request |")
    print("|---|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['req_s']:,.0f} | {row['cpu_us_per_request']:.0f} us |")
    pairs = (
        ("http via nginx (multiplexed)", "https via nginx (own connections)"),
        ("grpc (multiplexed)", "grpcs, Triton's TLS (own connections)"),
    )
    for base, tls in pairs:
        cost = rows[tls]["cpu_us_per_request"] - rows[base]["cpu_us_per_request"]
        ratio = rows[tls]["req_s"] / rows[base]["req_s"] if rows[base]["req_s"] else 0.0
        print(f"\nTLS cost, {tls} vs {base}: {cost:+.0f} us CPU per request, {ratio:.2f}x req/s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
