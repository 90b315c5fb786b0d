"""Shared memory as a transport for one client: its regions, made on first use and sized
from the model's signature, and requests whose tensors lie in them."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_triton.base.errors import (
    InferenceError,
)
from pytest_triton.client.control import Control, Tensors
from pytest_triton.client.wire.request import (
    PreparedRequest,
    build_request,
    output_bytes,
    reserve,
)
from pytest_triton.client.wire.shm import (
    SharedMemory,
)


class MemoryRegions(Control):
    """The client's shared-memory regions (perf_analyzer's --shared-memory system|cuda)."""

    @property
    def shared_memory_regions(self) -> list[str]:
        """Names of the regions this client holds registered (none before its first request
        over shared memory and after close())."""
        memory = self._memory
        return memory.region_names if memory is not None else []

    def _shared_memory(self) -> SharedMemory:
        with self._lock:
            if self._memory is None:
                kwargs = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
                self._memory = SharedMemory(self.shared_memory, self._conns.control, **kwargs)
            return self._memory

    def _output_sizes(
        self, model: str, version: str, names: Sequence[str], inputs: Tensors
    ) -> dict[str, int]:
        outputs, batched = self._signature(model, version)
        batch = next(iter(inputs.values())).shape[0] if batched and inputs else None
        sizes = output_bytes(outputs, batch, self.output_shared_memory_size)
        missing = [n for n in names if n not in sizes]
        if missing:
            raise InferenceError(
                model,
                self.protocol,
                f"model {model!r} has no output(s) {missing}; it has {sorted(sizes)}",
            )
        return {n: sizes[n] for n in names}

    def _prepare_in_memory(
        self, model: str, batches: Sequence[Tensors], outputs: Sequence[str] | None, version: str
    ) -> list[PreparedRequest]:
        names = list(outputs) if outputs is not None else self.output_names(model, version)
        memory = self._shared_memory()
        sizes = [self._output_sizes(model, version, names, b) for b in batches]
        reserve(memory, batches, sizes[0] if sizes else None)
        built: list[PreparedRequest] = []
        try:
            for batch, size in zip(batches, sizes, strict=True):
                built.append(
                    build_request(
                        self.protocol,
                        self.url,
                        model,
                        batch,
                        names,
                        version,
                        memory=memory,
                        output_sizes=size,
                        headers=self._headers,
                    )
                )
        except BaseException:
            for request in built:
                request.release()
            raise
        return built
