"""Which answers a load test checks, and against what: the wiring of parity/answers.py into
the Locust users (no locust import here).

A user whose class has a reference (its `reference` attribute: inputs -> outputs, or else
its `served` model's PyTorch module) checks every answer's outputs for shape and dtype, and
every N-th answer's values with the parity tolerances (--triton-check-every N). By default
that is every 100th on the server a locustfile starts itself, whose model was exported from
that very spec; against --host nothing is checked unless --triton-check-every is given,
since a locustfile's weights (a zoo model's are random) need not be the deployed model's.

With --triton-min-agreement (a reduced-precision variant: INT8, fp16) the compared answers
are judged by top-1 agreement with the reference instead of the tolerances (agreement.py),
and checked by default against --host too: the target says the reference is the deployed
model's fp32 PyTorch.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.dtypes import Array
from pytest_triton.base.errors import ConfigError
from pytest_triton.base.importing import load_object
from pytest_triton.base.urls import parse_url
from pytest_triton.client.triton_client import PreparedRequest
from pytest_triton.load.runner.agreement import top1_agreement
from pytest_triton.load.runner.embedded import EmbeddedModel
from pytest_triton.load.runner.run_state import StateKey, run_state
from pytest_triton.load.runner.user_settings import embedded_endpoints
from pytest_triton.parity.answers import AnswerCheck, WrongSoFar

if TYPE_CHECKING:  # the repository layer imports torch: only --triton-update-to needs it
    from pytest_triton.repository.spec import ModelSpec

log = logging.getLogger("pytest_triton.load")
DEFAULT_CHECK_EVERY = 100
"""Values compared on every 100th answer of each user: checking then costs the load
generator under 10% of its CPU on the cheapest requests (docs/load.md has the figures)."""
Reference = Callable[[Mapping[str, Array]], Mapping[str, Array]]
SAID = StateKey[set[str]]("answer checks said")
"""What this run said about its answer checks: each line once, not once per user."""
WRONG_SO_FAR = StateKey[WrongSoFar]("wrong answers so far")
"""The run's wrong answers by model and output, shared by its users' checks: the first
DETAILED of each name the difference, whichever user got them."""


def _once(environment: Any, message: str, *args: Any) -> None:
    text = message % args
    said = run_state(environment).setdefault(SAID, set)
    if text not in said:
        said.add(text)
        log.info("pytest-triton: %s", text)


def on_embedded_server(host: str, config: TritonConfig) -> bool:
    """Whether `host` is the server this run started itself (from the users' own specs)."""
    known = embedded_endpoints(config)
    return known is not None and parse_url(host)[1] in (known.http, known.grpc)


def answers_every(config: TritonConfig, host: str) -> int:
    """Every how many answers values are compared; 0: answers are not checked. A model
    update under load compares every answer unless told otherwise (which version answered
    is the question)."""
    if config.load.check_every is not None:
        return config.load.check_every
    if on_embedded_server(host, config):
        return 1 if config.load.update_to else DEFAULT_CHECK_EVERY
    # --triton-min-agreement says the reference is the deployed model's fp32 PyTorch
    return DEFAULT_CHECK_EVERY if config.gate.answer_agreement is not None else 0


@functools.lru_cache(maxsize=4)
def _next_version(target: str) -> ModelSpec:
    from pytest_triton.repository.spec import ModelSpec

    made = load_object(target)()
    if not isinstance(made, ModelSpec):
        raise ConfigError(
            f"--triton-update-to {target} returned {type(made).__name__}, not a ModelSpec"
        )
    return made


def next_version_spec(config: TritonConfig) -> ModelSpec:
    """--triton-update-to's ModelSpec (made once per process)."""
    assert config.load.update_to is not None
    return _next_version(config.load.update_to)


def version_label(version: int) -> str:
    return f"version {version}"


def update_label(config: TritonConfig) -> str | None:
    """The label of the answers a model update makes right after it (None without one)."""
    if not config.load.update_to:
        return None
    return version_label(next_version_spec(config).version)


def user_reference(user_class: Any) -> tuple[Reference | None, str]:
    """The user's reference and the export format its tolerances are for ("" unknown)."""
    own: Reference | None = getattr(user_class, "reference", None)
    served: EmbeddedModel | None = getattr(user_class, "served", None)
    if own is not None:
        return own, served.format if served is not None else ""
    if served is not None:
        return served.reference, served.format
    return None, ""


def user_answer_check(
    environment: Any,
    user_class: Any,
    config: TritonConfig,
    host: str,
    model: str,
    batches: Sequence[Mapping[str, Array]],
    prepared: Sequence[PreparedRequest],
    *,
    number: int = 0,
    context: str = "",
) -> AnswerCheck | None:
    """The check of one user's answers, or None where they are not checked."""
    every = answers_every(config, host)
    if not every:
        if config.load.check_every is None:
            _once(
                environment,
                "answers are not checked against a server given with --host (the locustfile's "
                "model need not be the one deployed); pass --triton-check-every N to check them",
            )
        return None
    reference, fmt = user_reference(user_class)
    if reference is None and config.load.check_every:
        raise ConfigError(
            f"--triton-check-every {config.load.check_every}: the answers of "
            f"{user_class.__name__} cannot be checked, it has no `reference` (inputs -> the "
            "outputs a right answer has) and no `served` model (a ModelSpec whose PyTorch "
            "module computes them): give the user class one of them, or leave out "
            "--triton-check-every"
        )
    if reference is None:
        _once(
            environment,
            "answers of %s are not checked: it has no `reference` and no `served` model",
            user_class.__name__,
        )
        return None
    # Elsewhere what the server runs is not known: torch.testing's tolerances.
    fmt = (config.serving.format or fmt) if on_embedded_server(host, config) else ""
    references: dict[str, Reference] = {"reference": reference}
    served: EmbeddedModel | None = getattr(user_class, "served", None)
    if config.load.update_to and served is not None:  # either version may answer
        upcoming = next_version_spec(config)
        references = {
            version_label(served.spec.version): reference,
            version_label(upcoming.version): EmbeddedModel(upcoming, served.fmt).reference,
        }
    expected = [
        (request, {label: dict(ref(batch)) for label, ref in references.items()})
        for request, batch in zip(prepared, batches, strict=True)
    ]
    target = config.gate.answer_agreement
    first = next(iter(expected[0][1].values()))  # one reference's outputs: their shapes
    agreement = top1_agreement(first) if target is not None else None
    _once(
        environment,
        "answers checked against PyTorch: every answer's shapes and dtypes, and the values "
        "of %s (--triton-check-every)%s",
        "every answer" if every == 1 else f"one answer in {every} of each user",
        f", judged by top-1 agreement (target >= {target:g}, --triton-min-agreement)"
        if agreement is not None
        else "",
    )
    return AnswerCheck(
        model,
        expected,
        every=every,
        fmt=fmt,
        offset=number,
        context=context,
        wrong_so_far=run_state(environment).setdefault(WRONG_SO_FAR, WrongSoFar),
        agreement=agreement,
    )
