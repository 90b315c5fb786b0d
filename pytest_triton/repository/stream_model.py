"""Decoupled python-backend model serving any causal generator in any declared layout (the
interface's JSON, a config parameter: tensor names, datatypes and shapes, as
client/stream_interface.py declares them; a text layout through tokenizer.json beside it):
greedy generation of its exported TorchScript artifact (stream_greedy.py, copied beside
this file, holds the loop the reference runs too), one response per token through the
request's response sender, then the final flag.

A text layout (vLLM's) is served as Triton's vLLM backend serves it: the prompt's text is
encoded with the tokenizer (special tokens added or not, the `add_special_tokens` parameter),
and each response's text is the new text of an incremental detokenizer (tokenizers'
DecodeStream, primed with the end of the prompt as vLLM primes it): the text of zero, one or
several tokens, an incomplete UTF-8 character held back, a stop token's text left out. No
prompt text goes out (the backend excludes the input when streaming), and each response
carries `num_output_tokens` (its tokens: one) when the request asks.

Copied into a stream model's version directory as model.py; it runs inside Triton's python
stub, so it imports nothing from pytest_triton. A bad request gets one error response with the
final flag: the stream ends with a reason and the instance serves the next one. Subclasses (in
tests) override `token` or `finish` to prove that the checks catch a wrong token or a stream
without its final flag.

Two schedules (the `batching` config parameter): "none" generates each request's stream to
its end inside execute(), one stream at a time per instance; "iteration" (iteration-level
scheduling, as LLM servers do) hands each request to the instance's generation thread and
returns at once (decoupled mode lets execute() return before the responses are sent): the
thread advances every active stream by one token per iteration, a new stream joins between
iterations and a finished one leaves. Within an iteration, the streams whose next forward
reads as many positions share one forward over their stacked rows (stream_greedy.py's
`step_group`; no padding), where the module batches them exactly, as checked at load on probe
sequences (`fusing_problem`): a stateless module (`forward(tokens [B, T]) -> logits [B, V]`)
exactly in tokens (a row too close to call through the batch's rounding is recomputed
alone); a state-carrying one bit for bit, and only where it declares its state's batch
dimension (`state_batch_dim`). Any other module, or the `fuse` parameter "0", runs one
forward per stream; the log says which and why. Each stream's tokens are those it gets alone.
"""

import contextlib
import importlib.util
import json
import os
import queue
import threading

import numpy as np
import torch

NUMPY = {"INT32": np.int32, "INT64": np.int64, "UINT32": np.uint32, "BOOL": np.bool_}
HELD_BACK = "\ufffd"  # a decoder's replacement for an incomplete UTF-8 sequence
PRIMING = (4, 24)  # vLLM primes its detokenizer with 4 to 23 prompt tokens that decode whole

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton's stub (a syntax check)
    pb_utils = None


class Detokenizer:
    """One stream's incremental detokenizer, as vLLM's: the new text each token adds in the
    context of the prompt ("" while a character is incomplete)."""

    def __init__(self, tokenizer, prompt_ids):
        from tokenizers.decoders import DecodeStream

        self.tokenizer = tokenizer
        self.stream = DecodeStream(skip_special_tokens=True)
        for token in self._priming(list(prompt_ids)):
            self.stream.step(tokenizer, token)  # the prompt's own text is not sent

    def _priming(self, ids):
        low, high = PRIMING
        for length in range(low, min(len(ids), high - 1) + 1):
            if HELD_BACK not in self.tokenizer.decode(ids[-length:]):
                return ids[-length:]
        return ids

    def step(self, token):
        return self.stream.step(self.tokenizer, int(token)) or ""


class Stream:
    """One request being generated: its sender, prompt ids, budget, stop token, detokenizer
    (a text layout's) and whether it asked for token counts."""

    def __init__(self, request, sender, ids, stop, text, counts):
        self.request, self.sender, self.ids, self.stop = request, sender, ids, stop
        self.text, self.counts = text, counts
        self.decoding = None


def _load_greedy():
    """stream_greedy.py from this model's version directory (not put on sys.path: two
    stream models in one server would share the first one's module)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_greedy.py")
    spec = importlib.util.spec_from_file_location(f"stream_greedy_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        torch.set_num_threads(1)  # tiny steps: threads cost more than they give
        path = os.path.join(args["model_repository"], args["model_version"], params["artifact"])
        self.module = torch.jit.load(path).eval()
        self.greedy = _load_greedy()
        self.vocab = int(params["vocab"])
        self.context = int(params["context"]) if params.get("context") else None
        self.interface = json.loads(params["interface"])
        self.tokenizer = None
        here = os.path.join(args["model_repository"], args["model_version"], "tokenizer.json")
        if os.path.exists(here):
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(here)
        self.add_special = params.get("add_special_tokens", "1") == "1"
        self.batching = params.get("batching") or "none"
        self.fuse, self.state_dim = False, self.greedy.state_batch_dim(self.module)
        if self.batching == "iteration":
            self.fuse = self._fuses(params.get("fuse", "1") == "1")
        self.arrivals = queue.Queue()
        self.thread = None
        if self.batching == "iteration":
            self.thread = threading.Thread(target=self._iterate, daemon=True)
            self.thread.start()

    def _fuses(self, asked):
        """Whether an iteration shares forwards between streams (logged with the reason)."""
        if not asked:
            reason = "fuse is 0: one forward per stream"
        else:
            problem = self.greedy.fusing_problem(self.module, self.vocab)
            reason = (
                f"one forward per stream: {problem}"
                if problem
                else "one forward per group of streams at the same position"
            )
            asked = problem is None
        logger = getattr(pb_utils, "Logger", None)
        if logger is not None:
            logger.log_info(f"iteration-level batching: {reason}")
        return asked

    def finalize(self):
        if self.thread is not None:
            self.arrivals.put(None)  # the generation thread ends its streams and returns
            self.thread.join(timeout=10)

    def token(self, request, position, token):
        """The token sent at `position` (a test's subclass corrupts one)."""
        return token

    def counted(self, request, position):
        """The tokens the response at `position` says it carries (a test's subclass
        miscounts one)."""
        return 1

    def finish(self, request, sender):
        """Send the final flag (a test's subclass withholds it)."""
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if self.thread is not None:
                self.arrivals.put((request, sender))  # joins the active streams between steps
                continue
            try:
                self._generate(request, sender)
            except Exception as exc:  # one error response ends this stream, not the model
                self._fail(sender, exc, request)
        return None

    def _fail(self, sender, exc, request):
        """One error response with the final flag. Its message starts with the request's id
        as Triton's own errors do (`[request id: 7] ...`): several streams in flight on one
        gRPC stream, the client gives the error to its stream alone."""
        message = f"{type(exc).__name__}: {exc}"
        if request.request_id():
            message = f"[request id: {request.request_id()}] {message}"
        error = pb_utils.TritonError(message)
        sender.send(
            pb_utils.InferenceResponse(error=error),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def _input(self, request, role):
        """The request's array for an interface role (None: not declared or not sent)."""
        tensor = self.interface.get(role)
        if tensor is None:
            return None
        found = pb_utils.get_input_tensor_by_name(request, tensor["name"])
        return None if found is None else found.as_numpy()

    def _text(self, array):
        value = array.reshape(-1)[0]
        return value.decode() if isinstance(value, bytes) else str(value)

    def _request(self, request):
        """The prompt's ids, the budget and the stop token, read in the interface's layout."""
        prompt = self._input(request, "prompt")
        if self.tokenizer is not None:
            encoded = self.tokenizer.encode(self._text(prompt), add_special_tokens=self.add_special)
            ids = np.array(encoded.ids, np.int64)
        else:
            ids = prompt.reshape(-1).astype(np.int64)
        length = self._input(request, "prompt_length")
        if length is not None and int(length.reshape(-1)[0]) != len(ids):
            raise ValueError(
                f"{self.interface['prompt_length']['name']} is {int(length.reshape(-1)[0])} "
                f"but the prompt has {len(ids)} tokens"
            )
        streaming = self._input(request, "streaming")
        if streaming is not None and not bool(streaming.reshape(-1)[0]):
            raise ValueError(
                f"{self.interface['streaming']['name']} is false: this model only streams"
            )
        budget, stop = self._input(request, "max_tokens"), self._input(request, "stop")
        max_tokens = None if budget is None else int(budget.reshape(-1)[0])
        stop_token = -1 if stop is None else int(stop.reshape(-1)[0])
        sampling = self._input(request, "sampling")
        if sampling is not None:
            max_tokens, stop_token = self._sampling(
                json.loads(self._text(sampling)), max_tokens, stop_token
            )
        if max_tokens is None:
            raise ValueError(
                f"the request gives no token budget ({self.interface['sampling_keys'][0]})"
            )
        return ids, max_tokens, stop_token

    def _sampling(self, fields, max_tokens, stop_token):
        """The budget and stop token from the sampling parameters; greedy only."""
        budget_key, stop_key = self.interface["sampling_keys"]
        unknown = sorted(set(fields) - {budget_key, stop_key, "temperature"})
        if unknown:
            raise ValueError(
                f"sampling parameter(s) {unknown} not supported: this model takes "
                f"{[budget_key, stop_key, 'temperature']}"
            )
        if float(fields.get("temperature", 0.0)) != 0.0:
            raise ValueError(
                f"temperature {fields['temperature']}: this model generates greedily, send 0"
            )
        if budget_key in fields:
            max_tokens = int(fields[budget_key])
        if fields.get(stop_key):
            stop_token = int(fields[stop_key][0])
        return max_tokens, stop_token

    def _tensor(self, role, values):
        tensor = self.interface[role]
        shape = [len(values) if d == -1 else d for d in tensor["shape"]]
        if tensor["datatype"] == "BYTES":
            array = np.array([str(v).encode() for v in values], dtype=np.object_)
        else:
            array = np.array(values, dtype=NUMPY[tensor["datatype"]])
        return pb_utils.Tensor(tensor["name"], array.reshape(shape))

    def _checked(self, request):
        """The request's prompt ids, budget and stop token (a refusal raises)."""
        ids, max_tokens, stop_token = self._request(request)
        problem = self.greedy.problem_of(ids, max_tokens, self.vocab, self.context)
        if problem:
            raise ValueError(problem)
        return ids, max_tokens, stop_token

    def _flag(self, request, role):
        """A BOOL input's value (None: not declared or not sent)."""
        value = self._input(request, role)
        return None if value is None else bool(value.reshape(-1)[0])

    def _stream(self, request, sender):
        """The request as a Stream, its budget and stop token (a refusal raises)."""
        ids, max_tokens, stop_token = self._checked(request)
        text = Detokenizer(self.tokenizer, ids) if self.tokenizer is not None else None
        # no prompt text goes out: the vLLM backend excludes the input whenever it streams,
        # whatever exclude_input_in_output says (accepted, as it accepts it)
        asks = self._flag(request, "return_count")
        counts = self.interface.get("count") is not None and asks is not False
        stream = Stream(request, sender, ids, stop_token, text, counts)
        return stream, max_tokens

    def _send(self, stream, position, token):
        sent = self.token(stream.request, position, token)
        if stream.text is not None:  # the stop token's text is not sent; it counts
            sent = "" if sent == stream.stop else stream.text.step(sent)
        outputs = [self._tensor("output", [sent])]
        if self.interface.get("position") is not None:
            outputs.append(self._tensor("position", [position]))
        if self.interface.get("length") is not None:
            outputs.append(self._tensor("length", [len(stream.ids) + position + 1]))
        if stream.counts:
            outputs.append(self._tensor("count", [self.counted(stream.request, position)]))
        stream.sender.send(pb_utils.InferenceResponse(output_tensors=outputs))

    def _generate(self, request, sender):
        stream, max_tokens = self._stream(request, sender)
        tokens = self.greedy.greedy_tokens(
            self.module, stream.ids, max_tokens, stream.stop, self.vocab
        )
        for position, token in enumerate(tokens):
            self._send(stream, position, token)
            if request.is_cancelled():
                tokens.close()
                break  # the client went away: stop generating for it
        self.finish(request, sender)

    def _iterate(self):
        """The generation thread: one token of every active stream per iteration; arrivals
        join between iterations (waiting only when no stream is active). Whatever one
        stream raises ends that stream with an error response; the thread goes on."""
        active = []  # Streams
        while True:
            arrived = self._arrivals(block=not active)
            if None in arrived:  # finalize(): end what is in flight and stop
                for stream in active:
                    self._end(stream, RuntimeError("the model is being unloaded"))
                return
            for request, sender in arrived:
                try:
                    stream, budget = self._stream(request, sender)
                    stream.decoding = self.greedy.Decoding(
                        self.module, stream.ids, budget, stream.stop, self.vocab
                    )
                    active.append(stream)
                except Exception as exc:
                    self._end(Stream(request, sender, None, -1, None, False), exc)
            try:
                active = self._iteration(active)
            except Exception as exc:  # not one stream's: end them all, serve the next ones
                for stream in active:
                    self._end(stream, exc)
                active = []

    def _end(self, stream, exc):
        """End a stream with its error; a sender that cannot send any more ends it too."""
        with contextlib.suppress(Exception):
            self._fail(stream.sender, exc, stream.request)

    def _arrivals(self, block):
        """The requests that arrived since the last iteration (None: finalize())."""
        arrived = []
        try:
            arrived.append(self.arrivals.get(block=block))
            while True:
                arrived.append(self.arrivals.get_nowait())
        except queue.Empty:
            pass
        return arrived

    def forward(self, decodings):
        """One forward for a group of streams at the same position: their next tokens (a
        test's subclass records the group sizes)."""
        return self.greedy.step_group(self.module, decodings, self.state_dim)

    def _iteration(self, active):
        """Advance every active stream by one token, one forward per group; the streams
        that go on, in their order."""
        going_on = set()
        for group in self.greedy.groups([stream.decoding for stream in active], self.fuse):
            streams = [active[i] for i in group]
            try:
                tokens = self.forward([stream.decoding for stream in streams])
            except Exception as exc:  # these streams end with the error; the others go on
                for stream in streams:
                    self._end(stream, exc)
                continue
            for i, token in zip(group, tokens, strict=True):
                if self._emit(active[i], token):
                    going_on.add(i)
        return [stream for i, stream in enumerate(active) if i in going_on]

    def _emit(self, stream, token):
        """Send a stream's new token; False when it has ended (its final flag sent with its
        last token's step, as the one-stream schedule sends it, or its error)."""
        try:
            self._send(stream, stream.decoding.generated - 1, token)
            if stream.decoding.done or stream.request.is_cancelled():
                # done, or the client went away: stop generating for it
                self.finish(stream.request, stream.sender)
                return False
        except Exception as exc:  # this stream ends with its error; the others go on
            self._end(stream, exc)
            return False
        return True
