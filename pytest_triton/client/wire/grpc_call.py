"""Prepared gRPC requests: ModelInfer through a channel's unary_unary with identity
(de)serializers.

The ModelInferRequest is serialized once, when the request is prepared; each send hands its
bytes to gRPC and gets the ModelInferResponse's bytes back, parsed only when outputs are
read. Failures keep tritonclient's form: InferenceServerException(details, "StatusCode.X").
"""

from __future__ import annotations

from typing import Any

import grpc
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.utils import InferenceServerException

from pytest_triton.base.security import PLAIN, Security

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def rpc_error(error: grpc.RpcError) -> InferenceServerException:
    """tritonclient's own translation of a gRPC status."""
    call: Any = error
    return InferenceServerException(
        msg=call.details(), status=str(call.code()), debug_details=call.debug_error_string()
    )


class GrpcInfer:
    """One channel to one server for prepared ModelInfer requests."""

    def __init__(self, hostport: str, security: Security = PLAIN) -> None:
        self.hostport = hostport
        options = [
            ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ]
        if security.tls:
            if security.server_name:
                options.append(("grpc.ssl_target_name_override", security.server_name))
            ca, key, cert = security.pem()
            credentials = grpc.ssl_channel_credentials(ca, key, cert)
            self.channel = grpc.secure_channel(hostport, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(hostport, options=options)
        self.metadata = tuple((k.lower(), v) for k, v in security.header_values().items())
        # No serializers: the request is bytes already and the answer stays bytes.
        self._infer = self.channel.unary_unary(MODEL_INFER, _registered_method=True)
        self.closed = False

    def exchange(self, message: bytes, timeout_s: float | None) -> bytes:
        try:
            answer: bytes = self._infer(message, timeout=timeout_s, metadata=self.metadata)
            return answer
        except grpc.RpcError as exc:
            raise rpc_error(exc) from None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.channel.close()
