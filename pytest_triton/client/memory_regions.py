"""Shared memory as a transport for one client: its regions, made on first use and sized
from the model's signature, and requests whose tensors lie in them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from pytest_triton.base.errors import InferenceError
from pytest_triton.client.control import Control, Tensors
from pytest_triton.client.wire.request import (
    PreparedRequest,
    build_request,
    output_bytes,
    reserve,
)
from pytest_triton.client.wire.shm import SharedMemory


class MemoryRegions:
    """The client's shared-memory regions (perf_analyzer's --shared-memory system|cuda),
    registered through its control client; `output_size` is the bytes an output gets when
    the model's metadata does not fix its size."""

    def __init__(self, control: Control, output_size: int) -> None:
        self._control = control
        self.output_size = output_size
        self._memory: SharedMemory | None = None
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        """Names of the regions held registered (none before the first request over shared
        memory and after close())."""
        memory = self._memory
        return memory.region_names if memory is not None else []

    def _regions(self) -> SharedMemory:
        endpoint = self._control.endpoint
        with self._lock:
            if self._memory is None:
                kwargs = (
                    {"client_timeout": endpoint.timeout_s} if endpoint.protocol == "grpc" else {}
                )
                self._memory = SharedMemory(
                    endpoint.shared_memory, self._control.tritonclient, **kwargs
                )
            return self._memory

    def _output_sizes(
        self, model: str, version: str, names: Sequence[str], inputs: Tensors
    ) -> dict[str, int]:
        outputs, batched = self._control.signature(model, version)
        batch = next(iter(inputs.values())).shape[0] if batched and inputs else None
        sizes = output_bytes(outputs, batch, self.output_size)
        missing = [n for n in names if n not in sizes]
        if missing:
            raise InferenceError(
                model,
                self._control.endpoint.protocol,
                f"model {model!r} has no output(s) {missing}; it has {sorted(sizes)}",
            )
        return {n: sizes[n] for n in names}

    def prepare(
        self, model: str, batches: Sequence[Tensors], outputs: Sequence[str] | None, version: str
    ) -> list[PreparedRequest]:
        """Requests whose tensors lie in the regions (one region shared by their blocks)."""
        control = self._control
        names = list(outputs) if outputs is not None else control.output_names(model, version)
        memory = self._regions()
        sizes = [self._output_sizes(model, version, names, b) for b in batches]
        reserve(memory, batches, sizes[0] if sizes else None)
        endpoint = control.endpoint
        built: list[PreparedRequest] = []
        try:
            for batch, size in zip(batches, sizes, strict=True):
                built.append(
                    build_request(
                        endpoint.protocol,
                        endpoint.url,
                        model,
                        batch,
                        names,
                        version,
                        memory=memory,
                        output_sizes=size,
                        headers=endpoint.headers,
                    )
                )
        except BaseException:
            for request in built:
                request.release()
            raise
        return built

    def close(self) -> None:
        """Unregister and unlink the regions; idempotent."""
        with self._lock:
            memory, self._memory = self._memory, None
        if memory is not None:
            memory.close()
