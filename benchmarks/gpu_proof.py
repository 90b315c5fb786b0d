"""The GPU proof: every GPU claim of docs/gpu.md, run as one command on a GPU machine.

On a machine prepared as docs/gpu.md says (`source .gpu/setup.sh` first), `make gpu-proof`
runs, each step under its own timeout and all within 8 minutes: the examples gate at fp32
(strict numerics) and at fp16 (production numerics), the GPU tests, a 20-second Locust run on
the GPU, benchmarks/serving_overhead.py on the GPU (short points) and a 60-second triton-tune
on the GPU. Each step's log, JUnit XML, JSON and figures go into one archive
(gpu-proof.tar.gz) beside a short summary (gpu-proof-summary.md), in --out ($OUT when set):
two files, since a lent GPU machine hands back only a few.

Without a visible GPU every step is skipped, saying why, and the exit code is 2; `--dry-run`
prints the steps. Exit 0: every step passed; 1: a step failed or ran out of time.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUDGET_S = 470.0  # 8 minutes, less the packing
ARCHIVE = "gpu-proof.tar.gz"
SUMMARY = "gpu-proof-summary.md"


@dataclass(frozen=True)
class Step:
    """One command of the proof; `{out}` in its arguments is the step folder's path."""

    name: str
    what: str
    argv: tuple[str, ...]
    timeout_s: float

    def command(self, out: Path) -> list[str]:
        return [a.replace("{out}", str(out)) for a in self.argv]


def steps(python: str = sys.executable) -> list[Step]:
    pytest = (python, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q")
    return [
        Step(
            "examples-fp32",
            "the release gate on the GPU: every zoo model, strict fp32",
            (*pytest, "examples", "--triton-gpu", "--junitxml={out}/examples-fp32.xml"),
            190,  # 143 s of pytest on an H200; the rest is the server's start and the packing
        ),
        Step(
            "examples-fp16",
            "the release gate at fp16, production numerics",
            (
                *pytest,
                "examples",
                "--triton-gpu",
                "--triton-precisions",
                "fp16",
                "--triton-numerics",
                "production",
                "--junitxml={out}/examples-fp16.xml",
            ),
            150,
        ),
        Step(
            "gpu-tests",
            "the plugin's GPU tests (the gpu-marked one runs on a GPU only)",
            (
                *pytest,
                "tests/models/test_gpu_served.py",
                "tests/load/test_gpu_front_ends.py",
                "--triton-gpu",
                "--junitxml={out}/gpu-tests.xml",
            ),
            120,
        ),
        Step(
            "locust-gpu",
            "20 s of Locust on DLRM served on the GPU (its default format there)",
            (
                python,
                "-m",
                "locust",
                "-f",
                "locustfiles/dlrm.py",
                "--headless",
                "-u",
                "8",
                "-r",
                "8",
                "-t",
                "20s",
                "--triton-gpu",
                "--triton-allow-unstable",
                "--triton-report-json",
                "{out}/locust-dlrm-gpu.json",
                "--csv",
                "{out}/locust-dlrm-gpu",
            ),
            100,
        ),
        Step(
            "serving-overhead",
            "in-process vs served on the GPU, 1 and 8 clients, plain gRPC and CUDA shared memory",
            (
                python,
                "benchmarks/serving_overhead.py",
                "--size",
                "full",
                "--device",
                "cuda",
                "--model",
                "dlrm:4096",
                "--model",
                "resnet50:64:fp16",
                "--transports",
                "none,cuda",
                "--duration",
                "3",
                "--warmup",
                "1",
                "--json",
                "{out}/serving-overhead.json",
            ),
            150,
        ),
        Step(
            "tune-gpu",
            "60 s of triton-tune on DLRM batch 4096 on the GPU (its default format there)",
            (
                python,
                "-m",
                "pytest_triton.cli.triton_tune",
                "-m",
                "dlrm",
                "-b",
                "4096",
                "--triton-gpu",
                "--time-budget",
                "60s",
                "-o",
                "{out}/tune-dlrm",
                "--json",
                "{out}/load-tune-dlrm.json",
            ),
            150,
        ),
    ]


@dataclass
class Outcome:
    step: Step
    status: str  # passed, failed, timed out, skipped
    wall_s: float
    note: str


def gpu_problem() -> str | None:
    """Why this machine cannot run the proof (the plugin's own GPU check), or None."""
    sys.path.insert(0, str(REPO))
    from pytest_triton.server.gpu import no_gpu_message, visible_gpus

    seen = visible_gpus()
    return None if seen.count else no_gpu_message(seen)


RESULT_LINE = re.compile(r"\b(passed|failed|error|skipped|verdict|PASS|FAIL)\b")


def highlights(log: Path, lines: int = 6) -> str:
    """The lines that say how a step went: pytest's result line, Locust's verdict, tables."""
    text = log.read_text(errors="replace").splitlines() if log.is_file() else []
    tables = [line for line in text if line.startswith("|")]
    picked = [line for line in text if RESULT_LINE.search(line)][-lines:]
    return "\n".join([*tables, *picked]) or "\n".join(text[-lines:])


def run_step(step: Step, work: Path, timeout_s: float) -> Outcome:
    folder = work / step.name
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    command = step.command(folder)
    started = time.monotonic()
    print(f"[gpu-proof] {step.name}: {shlex.join(command)} (timeout {timeout_s:.0f}s)", flush=True)
    with log.open("w") as sink:
        sink.write(f"$ {shlex.join(command)}\n")
        sink.flush()
        proc = subprocess.Popen(
            command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its own session: the step's servers and stubs too
            proc.wait()
            code = None
    wall = time.monotonic() - started
    status = "timed out" if code is None else ("passed" if code == 0 else f"failed (exit {code})")
    outcome = Outcome(step, status, wall, highlights(log))
    print(f"[gpu-proof] {step.name}: {status} in {wall:.0f}s", flush=True)
    return outcome


def environment_lines() -> list[str]:
    lines = []
    for label, command in (
        ("GPU", ["nvidia-smi", "-L"]),
        ("commit", ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        (
            "python",
            [
                sys.executable,
                "-c",
                "import sys, numpy, torch; print(sys.version.split()[0], 'torch', "
                "torch.__version__, 'numpy', numpy.__version__)",
            ],
        ),
    ):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            lines.append(f"- {label}: {done.stdout.strip() or done.stderr.strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            lines.append(f"- {label}: unknown ({exc})")
    return lines


def write_summary(out: Path, outcomes: Sequence[Outcome], header: Sequence[str]) -> Path:
    rows = [
        "# GPU proof",
        "",
        *header,
        "",
        "| step | status | wall s |",
        "|---|---|---|",
        *(f"| {o.step.name} | {o.status} | {o.wall_s:.0f} |" for o in outcomes),
        "",
    ]
    for o in outcomes:
        rows += [f"## {o.step.name}: {o.status}", "", o.step.what, "", "```", o.note, "```", ""]
    path = out / SUMMARY
    path.write_text("\n".join(rows))
    return path


def pack(out: Path, work: Path) -> Path:
    archive = out / ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(work, arcname="gpu-proof")
    shutil.rmtree(work)
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or "gpu-proof"),
        help="where the archive and the summary go (default $OUT, else ./gpu-proof)",
    )
    parser.add_argument("--only", default=None, help="comma list of steps to run (default all)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and exit")
    parser.add_argument(
        "--budget", type=float, default=BUDGET_S, help="seconds for all steps together"
    )
    args = parser.parse_args(argv)
    chosen = steps()
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {s.name for s in chosen})
        if unknown:
            parser.error(f"unknown step(s) {unknown}; steps: {', '.join(s.name for s in chosen)}")
        chosen = [s for s in chosen if s.name in wanted]
    out = args.out.resolve()
    if args.dry_run:
        for step in chosen:
            command = shlex.join(step.command(out / "gpu-proof" / step.name))
            print(f"{step.name} ({step.timeout_s:.0f}s): {command}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    work = out / "gpu-proof"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    problem = gpu_problem()
    deadline = time.monotonic() + args.budget
    outcomes: list[Outcome] = []
    if problem is not None:
        print(f"[gpu-proof] every step skipped: {problem}", flush=True)
    for step in chosen:
        left = deadline - time.monotonic()
        if problem is not None:
            outcomes.append(Outcome(step, "skipped", 0.0, f"no GPU: {problem}"))
        elif left < 10:
            note = f"the proof's {args.budget:.0f}s were spent before it"
            outcomes.append(Outcome(step, "skipped", 0.0, note))
        else:
            outcomes.append(run_step(step, work, min(step.timeout_s, left)))
    header = environment_lines() if problem is None else [f"- no GPU: {problem}"]
    summary = write_summary(out, outcomes, header)
    shutil.copy(summary, work / SUMMARY)
    archive = pack(out, work)
    print(f"[gpu-proof] wrote {summary} and {archive}", flush=True)
    if problem is not None:
        return 2
    return 0 if all(o.status == "passed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
