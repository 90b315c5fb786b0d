"""Text streams in the vLLM layout, per tokenizer scheme (WordLevel, byte-level BPE, Metaspace
BPE, trained by tests/helpers/text_tokenizers.py): how many streams were checked as text and
agreed, and how the output token counts agree. Three counts per stream: the reference's
(the greedy ids), the server's (`num_output_tokens`, summed over responses) and the whole
streamed text encoded once (what a client without the server's count, e.g. AIPerf, counts).

    python benchmarks/text_stream_counts.py --prompts 24 --tokens 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_triton.client.streaming import GrpcStreams
from pytest_triton.parity.text_match import first_text_difference
from pytest_triton.repository.stream import expected_text, write_stream_model
from pytest_triton.server import LocalLauncher, ServerArgs
from tests.helpers.text_tokenizers import CORPUS, PROMPTS, SCHEMES, text_spec


def prompts(count: int) -> list[str]:
    """Text prompts: the tests' own, then the corpus's sentences cut at each word."""
    words = [" ".join(line.split()[:n]) for line in CORPUS for n in (2, 3, 5)]
    pool = [*PROMPTS, *words]
    return [pool[i % len(pool)] for i in range(count)]


def measure(url: str, scheme: str, texts: list[str], tokens: int) -> dict[str, int]:
    spec = text_spec(scheme)
    module = spec.module()
    with GrpcStreams(url, interface=spec.interface, codec=spec.tokenizer) as streams:
        answers = streams.generate_many(spec.name, texts, tokens)
    row = {"streams": 0, "agreed": 0, "server_equal": 0, "retokenized_equal": 0}
    row |= {"reference_tokens": 0, "server_tokens": 0, "retokenized_tokens": 0}
    for text, streamed in zip(texts, answers, strict=True):
        ref = expected_text(spec, module, text, tokens)
        row["streams"] += 1
        row["agreed"] += first_text_difference(streamed.text or "", ref) is None
        row["server_equal"] += streamed.server_tokens == len(ref.ids)
        row["retokenized_equal"] += len(streamed.tokens) == len(ref.ids)
        row["reference_tokens"] += len(ref.ids)
        row["server_tokens"] += streamed.server_tokens or 0
        row["retokenized_tokens"] += len(streamed.tokens)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    texts = prompts(args.prompts)
    with tempfile.TemporaryDirectory() as root:
        for scheme in SCHEMES:
            write_stream_model(Path(root), text_spec(scheme))
        with LocalLauncher().start(ServerArgs(Path(root), model_control_mode="none")) as server:
            rows = {s: measure(server.endpoints.grpc, s, texts, args.tokens) for s in SCHEMES}
    print(
        "| scheme | streams checked as text (agreed) | server count = reference's | "
        "whole text re-encoded = reference's | tokens: reference / server / re-encoded |"
    )
    print("|---|---|---|---|---|")
    for scheme, r in rows.items():
        print(
            f"| {scheme} | {r['streams']} ({r['agreed']}) | {r['server_equal']} of "
            f"{r['streams']} | {r['retokenized_equal']} of {r['streams']} | "
            f"{r['reference_tokens']} / {r['server_tokens']} / {r['retokenized_tokens']} |"
        )


if __name__ == "__main__":
    main()
