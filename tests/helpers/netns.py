"""Hosts for tests of what crosses a network: network namespaces on this machine, each with
one address on a bridge that lives in a namespace of its own (nothing reaches the machine's
own network). Load in these tests goes only to addresses inside namespaces made here.

Needs root and iproute2. Namespace names carry the owner's pid, so a run killed before its
clean-up is reaped by the next one; deleting a namespace removes its veth ends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from glob import glob

import psutil

SUBNET = "10.77.0"
_numbers = itertools.count(1)
_OURS = re.compile(r"^pt(\d+)x\d+-")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def problem() -> str | None:
    """Why hosts cannot be built here (None when they can)."""
    if os.geteuid() != 0:
        return (
            "builds its hosts as network namespaces, which needs root (CI's .ci/run runs as "
            "root; run the suite as root or under sudo to run it here)"
        )
    if shutil.which("ip") is None:
        return "builds its hosts as network namespaces with iproute2's `ip`, not installed"
    probe = f"pt{os.getpid()}x0-probe"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except RuntimeError as exc:
        return f"this machine refuses network namespaces ({exc}): needs CAP_SYS_ADMIN"
    return None


FAKETIME_LIBRARY = next(iter(sorted(glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
FAKETIME_MISSING = (
    "injects a clock offset with Debian's libfaketime, not installed (make test-deps installs "
    "the faketime package)"
)


def skewed_clock(offset_s: int) -> dict[str, str]:
    """Environment that shifts a process's wall clock by `offset_s` (its monotonic clock, which
    gevent's loop uses, stays true)."""
    assert FAKETIME_LIBRARY is not None, FAKETIME_MISSING
    return {
        "LD_PRELOAD": FAKETIME_LIBRARY,
        "FAKETIME": f"{offset_s:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
    }


def faketime_leftovers(pid: int) -> list[str]:
    """The /dev/shm region and semaphore libfaketime made for process `pid`."""
    return sorted(glob(f"/dev/shm/*faketime_s*_{pid}"))


def remove_faketime_leftovers(pid: int) -> None:
    """libfaketime leaves a /dev/shm/faketime_shm_<pid> region and a sem.faketime_sem_<pid>
    semaphore behind for the process it was preloaded into (FAKETIME_DISABLE_SHM does not stop
    it, Debian's 0.9.10). Removed by pid, once that process is gone: tests on other xdist workers
    may be running a skewed process of their own meanwhile."""
    for leftover in faketime_leftovers(pid):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    address: str

    def command(self, *cmd: str) -> list[str]:
        """`cmd` run on this host (its own network stack; files and processes are shared)."""
        return ["ip", "netns", "exec", self.netns, *cmd]


def ours() -> list[str]:
    return [
        line.split()[0] for line in _ip("netns", "list").splitlines() if _OURS.match(line.strip())
    ]


def reap() -> None:
    """Remove the namespaces of test runs that are gone."""
    for name in ours():
        match = _OURS.match(name)
        if match and not psutil.pid_exists(int(match.group(1))):
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", name)


@contextlib.contextmanager
def hosts(*names: str) -> Iterator[dict[str, Host]]:
    """One namespace per name, addresses 10.77.0.1, .2, ... in that order, all on one bridge.
    Everything is removed on exit, also when building fails half-way."""
    reap()
    tag = f"pt{os.getpid()}x{next(_numbers)}"
    made: list[str] = []
    try:
        bridge = f"{tag}-br"
        _ip("netns", "add", bridge)
        made.append(bridge)
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        built: dict[str, Host] = {}
        for i, name in enumerate(names, start=1):
            netns = f"{tag}-{name}"
            _ip("netns", "add", netns)
            made.append(netns)
            inside, outside = f"{tag}a{i}", f"{tag}b{i}"
            _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
            _ip("link", "set", inside, "netns", netns)
            _ip("link", "set", outside, "netns", bridge)
            _ip("-n", netns, "addr", "add", f"{SUBNET}.{i}/24", "dev", inside)
            _ip("-n", netns, "link", "set", inside, "up")
            _ip("-n", netns, "link", "set", "lo", "up")
            _ip("-n", bridge, "link", "set", outside, "master", "br0", "up")
            built[name] = Host(name, netns, f"{SUBNET}.{i}")
        yield built
    finally:
        for netns in reversed(made):
            with contextlib.suppress(RuntimeError):
                _ip("netns", "del", netns)
