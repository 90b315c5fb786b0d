"""torch's TorchScript deprecation, shown once a process with what to use instead.

torch 2.13 warns on every torch.jit.script, trace, save and load ("`torch.jit.save` is
deprecated. Please switch to `torch.export`."): a gate that exports the zoo in both
TorchScript formats printed it once an export. Here each TorchScript call's warnings are held
back, torch's deprecation among them is turned into one TorchScriptDeprecated warning the
first time a process meets it (pytest lists it once in its warnings summary), and the rest
go on as they were.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterable, Iterator

from pytest_triton.base.errors import TritonTestError

_DEPRECATION = re.compile(r"`?torch\.jit\.\w+`? is (deprecated|not supported in Python)")
_shown: set[str] = set()  # the notices this process has shown (one kind today)

ADVICE = (
    "torch deprecates TorchScript ({torch_says}). The torchscript-script and "
    "torchscript-trace formats still serve (Triton's PyTorch backend runs TorchScript), but "
    "PyTorch's own deployment path is torch.export: serve --triton-formats torch-export (the "
    "ExportedProgram, .pt2) or aoti (AOTInductor's compiled package) beside them and let "
    "parity say whether they answer alike (docs/formats.md). Shown once a session."
)


class TorchScriptDeprecated(TritonTestError, FutureWarning):
    """torch's TorchScript deprecation, said once with the formats to move to (a warning; a
    package error class too, so that `-W error::pytest_triton.TritonTestError` covers it)."""


def is_torchscript_deprecation(caught: warnings.WarningMessage) -> bool:
    return _DEPRECATION.search(str(caught.message)) is not None


def announce(
    caught: Iterable[warnings.WarningMessage], stacklevel: int = 3
) -> list[warnings.WarningMessage]:
    """Show TorchScriptDeprecated for the first deprecation among `caught` in this process
    (`stacklevel`: by default the caller's caller); returns the other warnings, for the caller
    to re-emit or drop."""
    caught = list(caught)
    deprecations = [w for w in caught if is_torchscript_deprecation(w)]
    if deprecations and "torchscript" not in _shown:
        _shown.add("torchscript")
        torch_says = str(deprecations[0].message).strip().rstrip(".")
        warnings.warn(
            ADVICE.format(torch_says=torch_says), TorchScriptDeprecated, stacklevel=stacklevel
        )
    return [w for w in caught if not is_torchscript_deprecation(w)]


@contextlib.contextmanager
def torchscript_calls() -> Iterator[None]:
    """Around TorchScript calls: torch's deprecation said once a process, other warnings
    re-emitted as they came."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for other in announce(caught, stacklevel=5):  # the caller's caller, past contextlib
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
