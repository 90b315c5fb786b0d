"""Shared memory as a transport (perf_analyzer's --shared-memory system|cuda): tensors lie in
regions the server maps, and requests and answers only say where.

Regions are made, registered, written and read with tritonclient's own
`tritonclient.utils.shared_memory` and `tritonclient.utils.cuda_shared_memory`. A region's name
is `pytest_triton_<pid>_c<client>_<n>`: what a process killed outright left in /dev/shm is
reaped by the next one (the owner pid is dead), and a live process unregisters and unlinks
its regions at close(), at interpreter exit and when a registration fails.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tritonclient.utils import InferenceServerException
from tritonclient.utils import shared_memory as system_shm

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError, SharedMemoryError
from pytest_triton.base.processes import reap_orphaned
from pytest_triton.base.urls import is_loopback

Transport = Literal["none", "system", "cuda"]
TRANSPORTS: tuple[Transport, ...] = ("none", "system", "cuda")
ID_SUFFIX: dict[str, str] = {"none": "", "system": "-shm", "cuda": "-cuda-shm"}
"""Test ids: `http` for none (as before shared memory existed), `http-shm`, `http-cuda-shm`."""
PREFIX = "pytest_triton_"  # then the owner's pid, as processes.reap_orphaned expects
SHM_ROOT = Path("/dev/shm")
ALIGNMENT = 64
MIN_REGION_BYTES = 64 * 1024
DEFAULT_OUTPUT_BYTES = 100 * 1024  # perf_analyzer's --output-shared-memory-size default
CUDA_MODULE = "tritonclient.utils.cuda_shared_memory"
RELEASE_WAIT_S = 10.0
"""How long close() waits for the server to finish requests still using a region (a Locust
user stopped mid-request leaves one in flight); then the region is left for the next reaper."""
_numbers = itertools.count()


# -- where shared memory can be offered --------------------------------------------------------
def refusal(
    transport: str, url: str, *, host_memory: bool | None = None, server_gpu: bool | None = None
) -> str | None:
    """Why `transport` cannot carry tensors to the server at `url`, or None when it can.

    host_memory: whether the server maps this machine's /dev/shm (local server: yes; a
    container: only with /dev/shm mounted; None: unknown, an external server). server_gpu:
    whether the server has a GPU (None: unknown)."""
    if transport == "none":
        return None
    if transport not in TRANSPORTS:
        return f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}"
    if not is_loopback(url):
        return (
            f"shared memory needs the server on this machine, and {url} is not a "
            "loopback address; use --triton-shared-memory none for a remote server"
        )
    if transport == "system" and host_memory is False:
        return (
            "the server runs in a container that does not map this machine's /dev/shm; "
            "let pytest-triton start it with --triton-shared-memory system (the container "
            "launcher then mounts /dev/shm), or run it with -v /dev/shm:/dev/shm"
        )
    if transport == "cuda":
        if server_gpu is False:
            return (
                "the server has no GPU to map CUDA memory on (start it with --triton-gpu), "
                "or use --triton-shared-memory system"
            )
        return cuda_problem()
    return None


def cuda_problem(
    devices: Path = Path("/dev"), load: Callable[[str], Any] = importlib.import_module
) -> str | None:
    """What this machine lacks for CUDA shared memory: a GPU, then cuda-python."""
    if not any(devices.glob("nvidia[0-9]*")):
        return (
            f"CUDA shared memory needs an NVIDIA GPU on this machine, and there is none "
            f"(no {devices}/nvidia0); use --triton-shared-memory system"
        )
    try:
        load(CUDA_MODULE)
    except (ImportError, RuntimeError) as exc:
        return (
            f"tritonclient's CUDA shared memory needs cuda-python: pip install "
            f"'tritonclient[cuda]' ({exc})"
        )
    return None


def check_offered(
    transport: str, url: str, *, host_memory: bool | None = None, server_gpu: bool | None = None
) -> None:
    reason = refusal(transport, url, host_memory=host_memory, server_gpu=server_gpu)
    if reason is not None:
        raise ConfigError(f"--triton-shared-memory {transport}: {reason}")


def reap_orphaned_regions() -> list[Path]:
    """Regions of processes that died without cleaning up (SIGKILL skips every exit path)."""
    return reap_orphaned(SHM_ROOT, PREFIX, "_")


def our_regions(pid: int | None = None) -> list[str]:
    """Names of this process's regions in /dev/shm (what a test checks is gone)."""
    return sorted(p.name for p in SHM_ROOT.glob(f"{PREFIX}{pid or os.getpid()}_c*"))


# -- the two kinds of memory, through tritonclient's utilities ----------------------------------
class _SystemMemory:
    """POSIX shared memory in /dev/shm; blocks share a region at offsets."""

    kind = "system"
    shares_regions = True

    def create(self, name: str, size: int) -> Any:
        return system_shm.create_shared_memory_region(name, "/" + name, size, create_only=True)

    def register(self, control: Any, name: str, handle: Any, size: int, **kw: Any) -> None:
        control.register_system_shared_memory(name, "/" + name, size, **kw)

    def unregister(self, control: Any, name: str, **kw: Any) -> None:
        control.unregister_system_shared_memory(name, **kw)

    def write(self, handle: Any, data: Array, offset: int) -> None:
        system_shm.set_shared_memory_region(handle, [data], offset=offset)

    def read(self, handle: Any, dtype: Any, shape: list[int], offset: int) -> Array:
        # A copy: the block is written again by the next answer.
        return np.array(system_shm.get_contents_as_numpy(handle, dtype, shape, offset=offset))

    def destroy(self, handle: Any) -> None:
        system_shm.destroy_shared_memory_region(handle)


class _CudaMemory:
    """CUDA memory on GPU `device`, shared through CUDA IPC; tritonclient's CUDA utilities
    read and write at offset 0 only, so every block is a region of its own."""

    kind = "cuda"
    shares_regions = False

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self.cuda: Any = importlib.import_module(CUDA_MODULE)

    def create(self, name: str, size: int) -> Any:
        return self.cuda.create_shared_memory_region(name, size, self.device)

    def register(self, control: Any, name: str, handle: Any, size: int, **kw: Any) -> None:
        control.register_cuda_shared_memory(
            name, self.cuda.get_raw_handle(handle), self.device, size, **kw
        )

    def unregister(self, control: Any, name: str, **kw: Any) -> None:
        control.unregister_cuda_shared_memory(name, **kw)

    def write(self, handle: Any, data: Array, offset: int) -> None:
        assert offset == 0, "CUDA blocks are regions of their own"
        self.cuda.set_shared_memory_region(handle, [data])

    def read(self, handle: Any, dtype: Any, shape: list[int], offset: int) -> Array:
        return np.array(self.cuda.get_contents_as_numpy(handle, dtype, shape))

    def destroy(self, handle: Any) -> None:
        self.cuda.destroy_shared_memory_region(handle)


# -- one client's regions ------------------------------------------------------------------------
@dataclass(eq=False)
class Region:
    name: str
    handle: Any
    size: int
    used: int = 0  # bytes handed out from the start
    live: int = 0  # blocks not yet released


@dataclass(frozen=True)
class Block:
    """Where one tensor lies: `size` bytes at `offset` of a registered region."""

    region: Region
    offset: int
    size: int

    @property
    def name(self) -> str:
        return self.region.name


def _aligned(size: int) -> int:
    return max(ALIGNMENT, -(-size // ALIGNMENT) * ALIGNMENT)


class SharedMemory:
    """The regions of one client on one server.

    System memory: one current region hands out blocks one after the other; it starts again
    from its beginning once every block is released, and is replaced by one twice as large
    (registered once) when a request does not fit. A replaced region goes as soon as its
    last block is released. CUDA memory: a region per block.
    """

    def __init__(self, transport: Transport, control: Any, **control_kwargs: Any) -> None:
        if transport == "none":
            raise ValueError("no shared memory for transport 'none'")
        self.transport = transport
        self.memory: _SystemMemory | _CudaMemory = (
            _SystemMemory() if transport == "system" else _CudaMemory()
        )
        self.control = control
        self.control_kwargs = control_kwargs  # e.g. a gRPC client_timeout
        self.owner = os.getpid()
        self.tag = f"{PREFIX}{self.owner}_c{next(_numbers)}_"
        self._regions: list[Region] = []
        self._current: Region | None = None
        self._counter = itertools.count()
        self._lock = threading.RLock()
        self.closed = False
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"SharedMemory({self.transport}, {self.tag}*, {len(self._regions)} regions)"

    @property
    def region_names(self) -> list[str]:
        return [r.name for r in self._regions]

    # -- blocks ----------------------------------------------------------------------------
    def reserve(self, nbytes: int) -> None:
        """Make room for `nbytes` of blocks at once, so that they share one registration."""
        if not self.memory.shares_regions:
            return
        with self._lock:
            region = self._current
            free = 0 if region is None else region.size - (0 if region.live == 0 else region.used)
            if free < nbytes:
                self._replace_current(nbytes)

    def alloc(self, nbytes: int) -> Block:
        size = _aligned(nbytes)
        with self._lock:
            self._check_open()
            if not self.memory.shares_regions:
                region = self._new_region(size)
                region.used, region.live = size, 1
                return Block(region, 0, nbytes)
            current = self._current
            if current is not None and current.live == 0:
                current.used = 0
            if current is None or current.used + size > current.size:
                current = self._replace_current(size)
            region = current
            block = Block(region, region.used, nbytes)
            region.used += size
            region.live += 1
            return block

    def release(self, block: Block) -> None:
        with self._lock:
            region = block.region
            region.live -= 1
            if region.live <= 0 and region is not self._current and region in self._regions:
                self._destroy(region)

    def write(self, block: Block, data: Array) -> None:
        self.memory.write(block.region.handle, data, block.offset)

    def read(self, block: Block, dtype: Any, shape: list[int]) -> Array:
        return self.memory.read(block.region.handle, dtype, shape, block.offset)

    # -- regions ---------------------------------------------------------------------------
    def _replace_current(self, size: int) -> Region:
        old = self._current
        grown = max(size, MIN_REGION_BYTES, 2 * old.size if old is not None else 0)
        self._current = self._new_region(_aligned(grown))
        if old is not None and old.live == 0:
            self._destroy(old)
        return self._current

    def _new_region(self, size: int) -> Region:
        if not self._regions and self.memory.kind == "system":
            reap_orphaned_regions()
        name = f"{self.tag}{next(self._counter)}"
        try:
            handle = self.memory.create(name, size)
        except Exception as exc:
            raise SharedMemoryError(
                f"could not create {self.memory.kind} shared memory region {name!r} of "
                f"{size:,} bytes: {exc.__cause__ or exc}"
            ) from None
        region = Region(name, handle, size)
        try:
            self.memory.register(self.control, name, handle, size, **self.control_kwargs)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.memory.destroy(handle)
            if isinstance(exc, InferenceServerException):
                raise SharedMemoryError(
                    f"the server could not map {self.memory.kind} shared memory region "
                    f"{name!r}: {exc.message()}. {_HINTS[self.memory.kind]}"
                ) from None
            raise
        self._regions.append(region)
        return region

    def _destroy(self, region: Region) -> None:
        """Unregister (if the server still answers), then unlink; never raises."""
        if region in self._regions:
            self._regions.remove(region)
        if region is self._current:
            self._current = None
        with contextlib.suppress(Exception):
            self._unregister(region.name)
        with contextlib.suppress(Exception):
            self.memory.destroy(region.handle)

    def _unregister(self, name: str) -> None:
        """The server refuses to unregister a region a request in flight still uses: ask
        again until that request is done (any other error is final)."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        while True:
            try:
                self.memory.unregister(self.control, name, **self.control_kwargs)
                return
            except InferenceServerException as exc:
                if "in use" not in str(exc.message()) or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def _check_open(self) -> None:
        if self.closed:
            raise SharedMemoryError(f"{self!r} is closed")

    def close(self) -> None:
        """Unregister and unlink every region; idempotent. In a forked child the regions are
        the parent's: they are left to it."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if os.getpid() == self.owner:
                for region in list(self._regions):
                    self._destroy(region)
            self._regions.clear()
            self._current = None
        _LIVE.discard(self)


_HINTS = {
    "system": "Does the server see this machine's /dev/shm (same host; a container needs "
    "-v /dev/shm:/dev/shm) and may it open files owned by this user?",
    "cuda": "Does the server run on this machine with a GPU and CUDA IPC (same host, "
    "--triton-gpu; a container needs --ipc=host)?",
}


class _LiveMemories:
    """Every SharedMemory of this process that is still open: closed at interpreter exit
    (before the local launcher stops its servers: atexit runs last-registered first)."""

    def __init__(self) -> None:
        self._items: set[SharedMemory] = set()
        self._lock = threading.Lock()
        self._registered = False

    def add(self, memory: SharedMemory) -> None:
        with self._lock:
            self._items.add(memory)
            if not self._registered:
                atexit.register(self.close_all)
                self._registered = True

    def discard(self, memory: SharedMemory) -> None:
        with self._lock:
            self._items.discard(memory)

    def close_all(self) -> None:
        with self._lock:
            items = list(self._items)
        for memory in items:
            memory.close()


_LIVE = _LiveMemories()
