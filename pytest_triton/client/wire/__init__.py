"""Below TritonClient: how one inference request is built and travels.

`request` builds a request once into the bytes that go on the wire and reads answers back;
`http_conn` and `grpc_call` carry those bytes; `shm` places tensors in shared memory regions
the server maps instead of in the request.
"""
