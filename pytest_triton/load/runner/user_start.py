"""What every pytest-triton user class does in `on_start`, written once (StartingUser): its
number in the run, the host it sends to and the run's settings (a run without a host is
refused, and so is a host the loopback rule forbids), then its own set-up; and how a user that
cannot start is refused: one log line per run, the master told (which ends the run), the user
stopped."""

from __future__ import annotations

import collections
import logging
from typing import Any, ClassVar, NoReturn

from locust import User, constant
from locust.exception import StopUser

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.errors import ConfigError
from pytest_triton.load.runner.distributed import tell_master_refused
from pytest_triton.load.runner.options import run_config
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.load.runner.user_settings import check_load_allowed

log = logging.getLogger("pytest_triton.load")
USER_NUMBERS = StateKey[collections.Counter[str]]("user numbers")
"""Users started so far in this run, by kind: a user's number seeds its inputs, spreads the
protocols and offsets its samples."""
REFUSALS_SAID = StateKey[set[str]]("refusals said")
"""Refusals logged in this run: said once, not once per user."""


def user_number(environment: Any, kind: str) -> int:
    """The next number of a `kind` of user in this run (0, 1, ...)."""
    numbers = run_state(environment).setdefault(USER_NUMBERS, collections.Counter)
    number = numbers[kind]
    numbers[kind] += 1
    return number


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
    """A user that cannot start: its reason logged once per run and sent to the master
    (which ends the run with it); the user stops."""
    reason = str(exc)
    said = run_state(environment).setdefault(REFUSALS_SAID, set)
    if reason not in said:
        said.add(reason)
        log.error("pytest-triton: %s", reason)
        tell_master_refused(environment, reason)
    raise StopUser() from None


class StartingUser(User):
    """The start every pytest-triton user shares; a kind of user writes only `set_up`.

    `_user_kind` counts its users apart from other kinds', `_served_kind` names what its
    `served` attribute holds (for the message of a run without a host), `_refusals` the errors
    of `set_up` that refuse the user with their message instead of failing it.
    """

    abstract = True
    wait_time = constant(0)
    _user_kind: ClassVar[str] = "user"
    _served_kind: ClassVar[str] = "model"
    _refusals: ClassVar[tuple[type[Exception], ...]] = (ConfigError,)

    def on_start(self) -> None:
        number = user_number(self.environment, self._user_kind)
        try:
            host, config = user_host_and_config(self, self._served_kind)
            self.set_up(host, config, number)
        except self._refusals as exc:
            refuse_user(self.environment, exc)

    def set_up(self, host: str, config: TritonConfig, number: int) -> None:
        """This kind's own start: its client, inputs and checks, for `host`."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it starts")
