"""What a pytest-triton process can leave behind, found by its owner's pid: tritonserver and
python-stub processes, server work directories, temporary repositories, /dev/shm regions.

Every such name carries the pid of the process that made it (that is how the next session
reaps what a killed one left), so the checks here see only what one process made, not the
servers of other sessions running on the same machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from pytest_triton.repository.builder import TEMPORARY_PREFIX
from pytest_triton.server.local import SHM_PREFIX, WORKDIR_PREFIX

SHM = Path("/dev/shm")


def markers(pid: int) -> tuple[str, ...]:
    return (f"{SHM_PREFIX}{pid}_", f"{WORKDIR_PREFIX}{pid}-", f"{TEMPORARY_PREFIX}{pid}-")


@dataclass(frozen=True)
class Leftovers:
    processes: tuple[str, ...]  # "pid name" of live tritonservers and stubs
    paths: tuple[Path, ...]  # work directories, repositories, shared-memory regions

    def __bool__(self) -> bool:
        return bool(self.processes or self.paths)

    def __str__(self) -> str:
        return "\n".join([*self.processes, *map(described, self.paths)]) or "nothing"


def described(path: Path, most: int = 20) -> str:
    """A path, and what a directory holds (what was written there tells who wrote it)."""
    inside = sorted(path.rglob("*")) if path.is_dir() else []
    lines = [f"  {p.relative_to(path)} ({size_of(p)})" for p in inside[:most]]
    more = [f"  ... and {len(inside) - most} more"] if len(inside) > most else []
    return "\n".join([f"{path}, holding:" if inside else str(path), *lines, *more])


def size_of(path: Path) -> str:
    try:
        return "a directory" if path.is_dir() else f"{path.stat().st_size} bytes"
    except OSError:  # gone since it was listed
        return "gone"


def processes_of(pid: int) -> list[psutil.Process]:
    """Live tritonservers and python stubs whose command line names this owner."""
    found = []
    signs = markers(pid)
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            if process.info["status"] != psutil.STATUS_ZOMBIE and any(s in cmdline for s in signs):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def left_by(pid: int, tmpdir: Path) -> Leftovers:
    procs = tuple(f"{p.pid} {' '.join(p.info['cmdline'] or ())[:160]}" for p in processes_of(pid))
    shm_prefix, workdir_prefix, repo_prefix = markers(pid)
    paths = [
        *SHM.glob(f"{shm_prefix}*"),
        *tmpdir.glob(f"{workdir_prefix}*"),
        *tmpdir.glob(f"{repo_prefix}*"),
    ]
    return Leftovers(procs, tuple(sorted(paths)))


def wait_for_no_processes(pid: int, timeout_s: float) -> list[psutil.Process]:
    """Servers outliving a killed owner end by PDEATHSIG (a graceful stop): give them time."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = processes_of(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)
