"""Closed-loop users' requests driven from one greenlet per process: the least CPU per request.

With a greenlet per user, every answer costs gevent a wake-up of its own (a switch to the
hub, a watcher started and stopped, a switch back): with Locust's task loop, CPU per request
that is taken from the server being measured (benchmarks/loadgen_vs_wrk.py measures it).
Here each user hands its lane (wire/lane.py: a connection of its own, one request in flight)
to this process's Multiplexer. One greenlet waits on every lane's socket with one epoll,
reads what arrived, sends that user's next request at once and then fires the user's Locust
request events (answers of one batch come together: the last one's next request does not wait
for the others' events). The user greenlets only wait until Locust stops them. Timeouts are
the client's: an answer later than timeout_s fails as a timeout, and one that never comes
fails within EXPIRY_CHECK_S of it.

While the driver waits in epoll the gevent hub does not run, so it waits at most POLL_S and
yields to the hub at least every YIELD_S: Locust's own greenlets (statistics, the web UI,
spawning and stopping users, pytest-triton's run monitor) wait no longer than that.
Over plain HTTP the steady state runs in C where the pump is built (client/wire/_http_pump.c,
an optional extension): one call per wake reads every ready connection, and for a whole 200
answer sends that user's next request; the rest (errors, timeouts, new connections) stays
here. That takes the Python glue around the two system calls of a request out of the loop.
On a shared gRPC connection the lanes of one read hold their next requests and the
connection sends them in one write, as a gRPC client batches a connection's writes.

Requests larger than MAX_REQUEST_BYTES keep a greenlet of their own (users.py): their sends
take turns with the server's reads, and one driver would send them one after another. Up to
that size (a DLRM batch of 256 is 67 kB) a request goes out in one send once the server's
HTTP/2 windows have grown (before that, what does not fit waits in its connection and the
driver's reads send it: a send never reads), and the driver's way matters: the next
requests after one batch's answers reach the server together, as perf_analyzer's do, where
greenlets each woken by its own answer spread them out (at concurrency 4 the server formed
smaller batches: 6-11% fewer inferences/s, half as much time again in its queue).
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
from gevent import monkey

from pytest_triton.client.wire.lane import HttpLane, Lane
from pytest_triton.client.wire.request import PreparedRequest, RawAnswer
from pytest_triton.load.runner.run_state import StateKey, run_state

try:
    from pytest_triton.client.wire import _http_pump
except ImportError:  # built without a C compiler: every answer is read in Python
    _http_pump = None  # type: ignore[assignment]

POLL_S = 0.002  # longest wait in epoll, with the hub stopped
YIELD_S = 0.002  # longest time between turns of the hub
EXPIRY_CHECK_S = 0.1  # how often requests in flight are checked against their timeout, and
# lanes whose send failed (a refused connection) try again
MAX_REQUEST_BYTES = 1024 * 1024  # larger requests keep a greenlet per user
Answered = tuple[PreparedRequest, RawAnswer]
Done = list[tuple["_Slot", float, int, "Exception | None", "Answered | None"]]
"""Answers read in one turn, reported after every next request went out."""
Record = Callable[[float, int, "Exception | None", "Answered | None"], None]
"""Reports one request: (its latency in seconds, its answer's size, its failure, and the
request with its answer as it came back, not decoded: for a user that checks answers)."""


def multiplexer_available() -> bool:
    """Whether this platform has epoll (Linux); elsewhere users keep a greenlet each."""
    return _original_epoll() is not None


def _original_epoll() -> type | None:
    """select.epoll as it was before gevent's monkey patching took it out."""
    try:
        epoll: type = monkey.get_original("select", "epoll")
        return epoll
    except (AttributeError, ImportError):
        return None


def pump_available() -> bool:
    """Whether plain HTTP lanes are read by the C pump (the extension was built)."""
    return _http_pump is not None


@dataclass(eq=False)
class _Slot:
    lane: Lane[Any]
    requests: Iterator[PreparedRequest]
    record: Record
    timeout_s: float
    answers: bool = True  # whether record() wants each answer (a user checking them)
    started: float = 0.0
    in_flight: bool = False
    sending: bool = False
    active: bool = True
    fd: int = -1
    pump: Any = None  # _http_pump.Pump reading this plain HTTP lane's answers


@dataclass
class _Failed:
    error: Exception | None = None
    event: gevent.event.Event = field(default_factory=gevent.event.Event)


class Multiplexer:
    """One process's driver: serve() hands it a lane until the calling greenlet is killed."""

    def __init__(self) -> None:
        epoll = _original_epoll()
        if epoll is None:
            raise RuntimeError("the multiplexer needs select.epoll (Linux)")
        self._epoll = epoll()
        self._by_fd: dict[int, list[_Slot]] = {}  # lanes of a shared connection share its fd
        self._pumps: dict[int, Any] = {}  # fd -> the C pump of a plain HTTP lane
        self.use_pump = pump_available()  # (a test compares both ways)
        self.pumped = 0  # answers the pumps read
        self._slots: list[_Slot] = []
        self._driver: gevent.Greenlet | None = None
        self._failed = _Failed()

    @property
    def lanes(self) -> int:
        return len(self._slots)

    def serve(
        self,
        lane: Lane[Any],
        requests: Iterator[PreparedRequest],
        record: Record,
        timeout_s: float,
        answers: bool = True,
    ) -> None:
        """Keep one of `requests` in flight on `lane` after another, reporting each to
        `record`, until the calling greenlet is killed (Locust stopping its user). Raises
        what stopped the driver if it failed. `answers=False`: record() gets None for the
        answer of a success (a user that does not check them)."""
        slot = _Slot(lane, requests, record, timeout_s, answers)
        self._slots.append(slot)
        try:
            if self._driver is None or self._driver.dead:
                self._failed = _Failed()
                self._driver = gevent.spawn(self._drive)
                # What exists before the load (imported modules, the users' prepared
                # requests) lives to the end: out of the cyclic collector's way, its full
                # collections no longer walk it (they took about a tenth of the CPU).
                gc.freeze()
            failed = self._failed
            self._send(slot)
            failed.event.wait()
            if failed.error is not None:
                raise failed.error
        finally:
            self._remove(slot)

    # -- the driver ----------------------------------------------------------------------
    def _drive(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug here must not leave every user waiting
            self._failed.error = exc if isinstance(exc, Exception) else None
            raise
        finally:
            self._failed.event.set()

    def _loop(self) -> None:
        clock = time.perf_counter
        turn = check = clock()
        done: Done = []
        pumped: list[Any] = []
        while self._slots:
            events = self._epoll.poll(POLL_S)
            if self._pumps:  # the pumps' answers read in C; the other fds here
                ready = _http_pump.turn(events, self._pumps, pumped)
                if pumped:
                    self.pumped += len(pumped)
                    self._pumped(pumped, done)
            else:
                ready = [fd for fd, _ in events]
            for fd in ready:
                on_fd = self._by_fd.get(fd)
                if not on_fd:
                    continue
                # the lanes of a shared connection: one read, and their next requests in one
                # send once every answer of that read is taken
                release = on_fd[0].lane.hold() if len(on_fd) > 1 else None
                read = True  # once per event
                for slot in list(on_fd):  # a send may watch a new fd
                    if not slot.in_flight or not (read or slot.lane.ready()):
                        continue
                    if self._readable(slot, done, read):
                        read = False
                if release is not None:
                    release()
            # Answers of one batch arrive together: every next request is out before the
            # first answer is reported, so the last one's send does not wait for the events.
            _report(done)
            now = clock()
            if now >= check:
                check = now + EXPIRY_CHECK_S
                self._expire(now)
            if now - turn >= YIELD_S:
                # Not sleep(0): a greenlet that yields so in a loop keeps gevent running
                # callbacks, and timers (Locust's own greenlets) wait far past their time.
                # idle() lets the hub finish its turn.
                gevent.idle()
                turn = clock()

    def _readable(
        self,
        slot: _Slot,
        done: Done,
        read: bool = True,
    ) -> bool:
        """Read what arrived (with `read`; else take what another lane of its connection
        read); once the answer is whole, send the next request and add the answer to `done`.
        Whether the socket was read."""
        if time.perf_counter() - slot.started > slot.timeout_s:  # answered too late
            self._time_out(slot)
            return False
        try:
            size = slot.lane.readable(read)
        except Exception as exc:  # the client's own error: a failed request
            error: Exception | None = exc
            size = 0
        else:
            if size is None:
                return read
            error = None
        slot.in_flight = False
        answer = slot.lane.answered if error is None else None  # before the next send
        done.append((slot, time.perf_counter() - slot.started, size, error, answer))
        if slot.active:  # (reading may have waited in gevent, and its user been stopped)
            self._send(slot)
        return read

    def _pumped(self, pumped: list[Any], done: Done) -> None:
        """The pumps' whole answers: a 200 whose next request the pump sent (`sent` >= 0:
        its bytes, the rest sent here) is a success; anything else is read as
        _readable() reads it, and the next request sent from here."""
        for slot, latency_s, head, body, request, sent, failure in pumped:
            if sent >= 0:
                wire = slot.pump.request.wire
                if sent < len(wire):  # the socket's buffer was full
                    slot.lane.send_rest(wire, sent)
                answer = (request, slot.lane.take(request, head, body)) if slot.answers else None
                done.append((slot, latency_s, len(body), None, answer))
                continue
            slot.in_flight = False
            if latency_s > slot.timeout_s:  # answered too late
                self._time_out(slot)
                continue
            error: Exception | None = None
            answer = None
            if failure is not None:
                error = slot.lane.fail(request, OSError(*failure))
            else:
                try:
                    answer = (request, slot.lane.take(request, head, body))
                except Exception as exc:  # the client's own error: a failed request
                    error = exc
            done.append((slot, latency_s, len(body) if error is None else 0, error, answer))
            if slot.active:
                self._send(slot)
        pumped.clear()

    def _send(self, slot: _Slot) -> None:
        # A new connection's connect() waits in gevent: meanwhile no other send on this slot.
        slot.sending = True
        slot.started = time.perf_counter()
        request = next(slot.requests)
        try:
            fresh = slot.lane.send(request)
        except Exception as exc:  # refused or dropped at once: fails, tried at the next check
            slot.record(time.perf_counter() - slot.started, 0, exc, None)
            return
        finally:
            slot.sending = False
        if not slot.active:  # its user was stopped while a new connection was made
            slot.lane.close()
            return
        slot.in_flight = True
        if fresh:
            self._watch(slot, slot.lane.fileno())
        if slot.pump is not None:
            slot.pump.arm(request)

    def _watch(self, slot: _Slot, fd: int) -> None:
        """A lane's new connection (perhaps one other lanes share); its old one was closed,
        which took it out of epoll."""
        self._unwatch(slot, unregister=False)  # a closed socket left epoll by itself
        slot.fd = fd
        self._by_fd.setdefault(fd, []).append(slot)
        if self.use_pump and isinstance(slot.lane, HttpLane):
            slot.pump = self._pumps[fd] = _http_pump.Pump(fd, slot)
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:
            self._epoll.modify(fd, select.EPOLLIN)

    def _unwatch(self, slot: _Slot, unregister: bool) -> None:
        """The slot's fd no longer read for it; with `unregister`, out of epoll once no lane
        is on it (a shared connection's fd stays while another lane uses it)."""
        pump, slot.pump = slot.pump, None
        if pump is not None:
            pump.disarm()
            if self._pumps.get(slot.fd) is pump:  # (a closed fd's number may be reused)
                del self._pumps[slot.fd]
        on_fd = self._by_fd.get(slot.fd)
        if on_fd is None or slot not in on_fd:
            return
        on_fd.remove(slot)
        if not on_fd:
            del self._by_fd[slot.fd]
            if unregister:
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(slot.fd)

    def _expire(self, now: float) -> None:
        """Fail requests past their timeout, and send again where a send failed."""
        for slot in list(self._slots):
            if slot.in_flight and slot.lane.broken:  # another lane read its failure
                done: Done = []
                self._readable(slot, done)
                _report(done)
            elif slot.in_flight and now - slot.started > slot.timeout_s:
                self._time_out(slot)
            elif not slot.in_flight and not slot.sending and slot.active:
                self._send(slot)

    def _time_out(self, slot: _Slot) -> None:
        """As a blocking send's socket timeout: a failure, and the connection dropped."""
        slot.in_flight = False
        if slot.pump is not None:
            slot.pump.disarm()
        slot.record(time.perf_counter() - slot.started, 0, slot.lane.expire(), None)
        if slot.active:  # record() may have stopped the run, and this user with it
            self._send(slot)

    def _remove(self, slot: _Slot) -> None:
        slot.active = False
        with contextlib.suppress(ValueError):
            self._slots.remove(slot)
        self._unwatch(slot, unregister=True)
        slot.lane.close()


def _report(done: Done) -> None:
    """Each answer to its user, and the list emptied for the next turn."""
    for slot, latency_s, size, error, answer in done:
        slot.record(latency_s, size, error, answer)
    done.clear()


MULTIPLEXER = StateKey[tuple[int, Multiplexer]]("multiplexer")
"""The run's multiplexer and the process that made it."""


def multiplexer(environment: Any) -> Multiplexer:
    """The run's, in this process (a forked Locust worker makes its own: an epoll is not
    shared)."""
    state = run_state(environment)
    found = state.get(MULTIPLEXER)
    if found is None or found[0] != os.getpid():
        found = (os.getpid(), Multiplexer())
        state[MULTIPLEXER] = found
    return found[1]
