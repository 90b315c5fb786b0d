"""perf_analyzer 2.51, the anchor our load generators are compared with: install, find, run.

perf_analyzer 2.51 (the release of the bundled tritonserver) ships as `bin/perf_analyzer` in
the tritonclient 2.51.0 wheel (later wheels dropped it). The project's environment keeps a newer
tritonclient, so the wheel is downloaded, not installed: only the binary is unpacked into
.tools/perf_analyzer/ (git-ignored) with the two libraries it loads, Debian's libb64 (libb64-0d)
and libcudart.so.12 (the nvidia-cuda-runtime-cu12 wheel; loaded even without a GPU), and a
wrapper script that puts them on LD_LIBRARY_PATH. It then runs on CPU.

    python benchmarks/perf_analyzer_tool.py            # install (make perf-analyzer); idempotent
    python benchmarks/perf_analyzer_tool.py --check    # where it is; exit 1 when absent

Found in this order: $PERF_ANALYZER (a path), .tools/perf_analyzer/perf_analyzer, PATH.
Standard library only, so that it runs before the project's environment exists.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / ".tools" / "perf_analyzer"
WRAPPER_NAME = "perf_analyzer"
VERSION = "2.51.0"
WHEEL = f"tritonclient=={VERSION}"
# Any CUDA 12 runtime serves perf_analyzer 2.51 (built against 12.6); pinned for repeatability.
CUDART_WHEEL = "nvidia-cuda-runtime-cu12==12.9.79"
LIBB64 = "libb64.so.0d"
MISSING = "perf_analyzer is not installed: run `make perf-analyzer`"
WRAPPER = """#!/bin/sh
# perf_analyzer {version} from the tritonclient {version} wheel, written by
# benchmarks/perf_analyzer_tool.py: its libraries (libb64, libcudart.so.12) live in lib/.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
    exec "$here/bin/perf_analyzer" "$@"
"""


class InstallError(RuntimeError):
    """perf_analyzer could not be installed; the message says what to do."""


def version_of(executable: Path | str) -> str | None:
    """'2.51.0' from `perf_analyzer --version`, or None when it does not run."""
    try:
        done = subprocess.run(
            [str(executable), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for word in (done.stdout + done.stderr).split():
        if word[:1].isdigit() and word.count(".") == 2:
            return word
    return None


def find_perf_analyzer() -> Path | None:
    """A perf_analyzer that runs here: $PERF_ANALYZER, ours in .tools, or one on PATH."""
    candidates = [os.environ.get("PERF_ANALYZER"), str(TOOLS / WRAPPER_NAME)]
    candidates.append(shutil.which("perf_analyzer"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and version_of(candidate):
            return Path(candidate)
    return None


def _run(cmd: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"{what} failed: {exc}") from None


def _system_has_libb64() -> bool:
    found = _run(["/sbin/ldconfig", "-p"], "ldconfig") if Path("/sbin/ldconfig").exists() else None
    return found is not None and LIBB64 in found.stdout


def _libb64_from_debian(workdir: Path, lib: Path) -> None:
    """Debian's libb64-0d, unpacked beside the binary (the system stays as it is)."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise InstallError(
            f"perf_analyzer needs {LIBB64} (Debian's libb64-0d) and this system has no apt-get: "
            "install libb64 with the system's package manager, then run `make perf-analyzer`"
        )
    download = ["apt-get", "download", "libb64-0d"]
    got = subprocess.run(download, cwd=workdir, capture_output=True, text=True, timeout=600)
    if got.returncode != 0 and os.geteuid() == 0:  # empty package lists: refresh them once
        _run(["apt-get", "update", "-q"], "apt-get update")
        got = subprocess.run(download, cwd=workdir, capture_output=True, text=True, timeout=600)
    debs = sorted(workdir.glob("libb64-0d_*.deb"))
    if got.returncode != 0 or not debs:
        raise InstallError(
            f"cannot download Debian's libb64-0d ({got.stderr.strip()[-300:]}): run "
            "`sudo apt-get update` (or `sudo apt-get install libb64-0d`), then "
            "`make perf-analyzer`"
        )
    unpacked = workdir / "libb64"
    _run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], "dpkg-deb -x")
    found = sorted(unpacked.rglob(LIBB64))
    if not found:
        raise InstallError(f"{debs[0].name} holds no {LIBB64}")
    shutil.copy2(found[0], lib / LIBB64)


def _member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(suffix)]
        if not names:
            raise InstallError(f"{wheel.name} holds no {suffix}")
        return archive.read(names[0])


def install(target: Path = TOOLS, python: str = sys.executable, *, force: bool = False) -> Path:
    """perf_analyzer in `target` (the wrapper's path); nothing happens when it already runs."""
    wrapper = target / WRAPPER_NAME
    if not force and wrapper.is_file() and version_of(wrapper) == VERSION:
        return wrapper
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        workdir = Path(tmp)
        pip = [python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        got = _run([*pip, "--dest", str(workdir), WHEEL, CUDART_WHEEL], "pip download")
        if got.returncode != 0:
            raise InstallError(
                f"pip could not download {WHEEL} and {CUDART_WHEEL} (is the package index "
                f"reachable?):\n{got.stderr.strip()[-1500:]}"
            )
        (triton_wheel,) = workdir.glob("tritonclient-*.whl")
        (cudart_wheel,) = workdir.glob("nvidia_cuda_runtime_cu12-*.whl")
        staging = workdir / "perf_analyzer"
        (staging / "bin").mkdir(parents=True)
        (staging / "lib").mkdir()
        binary = staging / "bin" / "perf_analyzer"
        binary.write_bytes(_member(triton_wheel, "/bin/perf_analyzer"))
        binary.chmod(0o755)
        (staging / "lib" / "libcudart.so.12").write_bytes(
            _member(cudart_wheel, "/lib/libcudart.so.12")
        )
        if not _system_has_libb64():
            _libb64_from_debian(workdir, staging / "lib")
        (staging / WRAPPER_NAME).write_text(WRAPPER.format(version=VERSION))
        (staging / WRAPPER_NAME).chmod(0o755)
        if version_of(staging / WRAPPER_NAME) != VERSION:
            missing = _run(["ldd", str(binary)], "ldd").stdout if shutil.which("ldd") else ""
            raise InstallError(
                "the unpacked perf_analyzer does not run: "
                + (
                    "; ".join(line.strip() for line in missing.splitlines() if "not found" in line)
                    or "see `ldd`"
                )
            )
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(target))
    return wrapper


# -- running it ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finished:
    """One perf_analyzer run: its exit code, output, CPU seconds and the CSV's rows."""

    returncode: int
    output: str
    cpu_s: float
    wall_s: float
    rows: list[dict[str, str]]


def read_csv(path: Path) -> list[dict[str, str]]:
    """perf_analyzer's `-f` CSV as rows keyed by its column names (times in usec). Without
    --verbose-csv it may append a blank line and client-side metrics after the table."""
    with open(path, newline="") as fh:
        rows = []
        for row in csv.DictReader(fh):
            if not any((v or "").strip() for v in row.values()):
                break
            rows.append({k: (v or "").strip() for k, v in row.items() if k})
        return rows


PASS_LINE = re.compile(r"Pass \[\d+\] throughput: ([\d.]+) infer/sec\. Avg latency: (\d+) usec")


def unstable_figures(output: str) -> tuple[float, float, int] | None:
    """(infer/s, average latency in usec, windows) from a run whose windows never agreed
    (perf_analyzer then writes no CSV): the mean of its last three windows, read from its
    output; None when it did not end so or measured fewer than three."""
    passes = [(float(t), float(a)) for t, a in PASS_LINE.findall(output)]
    if "Failed to obtain stable measurement" not in output or len(passes) < 3:
        return None
    last = passes[-3:]
    return sum(t for t, _ in last) / 3, sum(a for _, a in last) / 3, len(passes)


def run_perf_analyzer(
    executable: Path, args: Sequence[str], csv_path: Path, *, timeout_s: float = 600
) -> Finished:
    """Run perf_analyzer with `args` plus `-f csv_path`; its CPU (user + system) comes from
    wait4: the wrapper execs the binary, so the child is perf_analyzer itself."""
    with tempfile.TemporaryFile("w+") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            [str(executable), *args, "-f", str(csv_path)], stdout=log, stderr=subprocess.STDOUT
        )
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    if proc.returncode < 0:
        raise RuntimeError(f"perf_analyzer was killed after {wall:.0f} s:\n{output[-3000:]}")
    rows = read_csv(csv_path) if proc.returncode == 0 and csv_path.exists() else []
    return Finished(proc.returncode, output, usage.ru_utime + usage.ru_stime, wall, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say where it is")
    parser.add_argument("--force", action="store_true", help="reinstall")
    args = parser.parse_args()
    if args.check:
        found = find_perf_analyzer()
        print(f"perf_analyzer {version_of(found)}: {found}" if found else MISSING)
        return 0 if found else 1
    try:
        wrapper = install(force=args.force)
    except InstallError as exc:
        print(f"perf_analyzer: {exc}", file=sys.stderr)
        return 1
    print(f"perf_analyzer {version_of(wrapper)}: {wrapper.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
