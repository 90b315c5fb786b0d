"""Child processes that never outlive this one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
from pathlib import Path

PR_SET_PDEATHSIG = 1


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


def reap_orphaned(root: str | Path, prefix: str, separator: str) -> list[Path]:
    """Remove entries of `root` named `<prefix><pid><separator>...` whose owner process is
    gone: what a process killed outright (SIGKILL skips every cleanup) left behind."""
    removed = []
    for path in Path(root).glob(f"{prefix}*"):
        owner = path.name[len(prefix):].split(separator, 1)[0]
        if not owner.isdigit() or process_alive(int(owner)):
            continue
        with contextlib.suppress(OSError):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed
