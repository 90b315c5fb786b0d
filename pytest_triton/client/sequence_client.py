"""Requests of a sequence: tritonclient's infer() with its sequence_id, sequence_start and
sequence_end, over HTTP or gRPC. The sequence batcher routes on these request parameters, so
sequences go through tritonclient's own request builders rather than the prepared-bytes path
of TritonClient (whose requests carry no sequence parameters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import InferenceError
from pytest_triton.client.wire.request import Protocol


class SequenceClient:
    """One protocol's client for the requests of sequences; not shared between threads
    (make one per thread or greenlet)."""

    def __init__(self, url: str, protocol: Protocol = "http", *, timeout_s: float = 60.0) -> None:
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        self.url = url
        self.protocol: Protocol = protocol
        self.timeout_s = timeout_s
        self._lib: Any = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self._client = grpcclient.InferenceServerClient(url)

    def step(
        self,
        model: str,
        inputs: Mapping[str, Array],
        sequence_id: int,
        *,
        start: bool,
        end: bool,
        step: int = 0,
    ) -> dict[str, Array]:
        """One request of sequence `sequence_id` (its `step`-th, for the error message); every
        output by name. A rejection raises InferenceError naming the sequence and step."""
        tensors = []
        for name, value in inputs.items():
            array = np.ascontiguousarray(value)
            tensor = self._lib.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        extra = {"client_timeout": self.timeout_s} if self.protocol == "grpc" else {}
        try:
            result = self._client.infer(
                model,
                tensors,
                sequence_id=sequence_id,
                sequence_start=start,
                sequence_end=end,
                **extra,
            )
        except InferenceServerException as exc:
            raise InferenceError(
                model,
                self.protocol,
                f"sequence {sequence_id}, step {step}: {exc.message()}",
                exc.status(),
            ) from None
        response = result.get_response()
        names = (
            [o["name"] for o in response.get("outputs", [])]
            if self.protocol == "http"
            else [o.name for o in response.outputs]
        )
        return {name: result.as_numpy(name) for name in names}

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SequenceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
