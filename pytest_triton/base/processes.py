"""Child processes that never outlive this one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

PR_SET_PDEATHSIG = 1
GROUP_EXIT_WAIT_S = 5.0  # a killed process still frees its memory before it is gone


def die_with_parent() -> None:
    """A Popen preexec_fn: the child gets SIGTERM if this process dies without cleaning up.

    A parent killed between the fork and the prctl would never signal: the child then finds
    itself adopted (its parent is no longer the process that forked it) and ends at once.
    """
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != _forked_by:
        os._exit(128 + signal.SIGTERM)


_forked_by = os.getpid()


def _note_forking_process() -> None:
    """Runs in the parent just before every fork (Popen with a preexec_fn included), so the
    child knows which process forked it."""
    global _forked_by
    _forked_by = os.getpid()


os.register_at_fork(before=_note_forking_process)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Live (not yet zombie) processes of a process group, read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def kill_group(pgid: int, wait_s: float = GROUP_EXIT_WAIT_S) -> list[int]:
    """SIGKILL a process group and wait until its members are gone; returns any still there.

    SIGKILL only starts an exit: a python backend stub with torch loaded takes a while to
    unmap its memory, and until then it is a live member of the group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def reap_orphaned(root: str | Path, prefix: str, separator: str) -> list[Path]:
    """Remove entries of `root` named `<prefix><pid><separator>...` whose owner process is
    gone: what a process killed outright (SIGKILL skips every cleanup) left behind."""
    removed = []
    for path in Path(root).glob(f"{prefix}*"):
        owner = path.name[len(prefix) :].split(separator, 1)[0]
        if not owner.isdigit() or process_alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) waits until the block is done, then acts as it would have: cleanup
    that must not stop half-way (a stopped server's work directory and shared-memory
    regions) finishes first. Only the main thread receives signals; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)
