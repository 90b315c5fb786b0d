"""tritonclient's HTTP client for the control calls (metadata, config, statistics, shared
memory registration), one per thread.

Its geventhttpclient connections belong to the gevent hub of the thread that made them: used
from another thread while a call waits, they raise "cannot switch to a different thread". A
TritonClient handed to a thread pool (or to pytest-xdist's worker threads) makes its own there,
on first use, so that one TritonClient serves every thread, as its requests already do.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any


class WithHeaders:
    """Stands in for a tritonclient client: every call but close() gets the client's extra
    headers (tritonclient takes them per call)."""

    def __init__(self, client: Any, headers: Mapping[str, str]) -> None:
        self._inner = client
        self._headers = dict(headers)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name == "close" or not callable(attribute):
            return attribute
        return functools.partial(attribute, headers=self._headers)


class PerThreadControl:
    """Stands in for a tritonclient.http.InferenceServerClient: attribute access reaches the
    calling thread's own client."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._local = threading.local()
        self._made: list[Any] = []
        self._lock = threading.Lock()
        self._generation = 0  # close() starts a new one: threads' clients made before are closed

    def _mine(self) -> Any:
        local = self._local
        if getattr(local, "generation", None) != self._generation:
            client = self._make()
            with self._lock:
                self._made.append(client)
            local.client, local.generation = client, self._generation
        return local.client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mine(), name)

    def close(self) -> None:
        """Close every thread's client (a thread's next call makes a new one); idempotent."""
        with self._lock:
            made, self._made = self._made, []
            self._generation += 1
        for client in made:
            with contextlib.suppress(Exception):  # a client of a thread that has ended
                client.close()
