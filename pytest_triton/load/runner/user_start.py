"""What every pytest-triton user class does first in `on_start`, written once: the host it
sends to and the run's settings (a run without a host is refused, and so is a host the
loopback rule forbids), and how a user that cannot start is refused: one log line per
process, the master told (which ends the run), the user stopped."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from locust.exception import StopUser

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.runner.distributed import tell_master_refused
from pytest_triton.load.runner.options import run_config
from pytest_triton.load.runner.user_settings import check_load_allowed

log = logging.getLogger("pytest_triton.load")
_refused: set[str] = set()  # said once per process, not once per user


def user_host_and_config(user: Any, served: str = "model") -> tuple[str, TritonConfig]:
    """The user's host (its class's, else Locust's --host) and the run's settings; a
    ConfigError when there is no host (`served` names what the class would serve instead)
    or when load may not go there."""
    environment = user.environment
    host = user.host or environment.host
    config = run_config(environment)
    if not host:
        raise ConfigError(
            "no host to send load to: pass --host URL, or give the user class a "
            f"`served` {served} so an embedded server starts"
        )
    options = environment.parsed_options
    check_load_allowed(host, config, getattr(options, "master_host", None))
    return host, config


def refuse_user(environment: Any, exc: Exception) -> NoReturn:
    """A user that cannot start: its reason logged once per process and sent to the master
    (which ends the run with it); the user stops."""
    reason = str(exc)
    if reason not in _refused:
        _refused.add(reason)
        log.error("pytest-triton: %s", reason)
        tell_master_refused(environment, reason)
    raise StopUser() from None
