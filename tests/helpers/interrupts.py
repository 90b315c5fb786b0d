"""Children that a test interrupts with Ctrl-C start as from a shell: SIGINT handled by
default and not blocked, whatever the test process inherited. In the full suite's xdist
workers, children started late in a session were seen to ignore SIGINT (a child idle in
time.sleep 60 s after the signal, in three runs out of three, never in the same test run
alone); where the workers' state comes from is not found yet."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A `preexec_fn`: the child's SIGINT as a shell would give it (default, unblocked)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
