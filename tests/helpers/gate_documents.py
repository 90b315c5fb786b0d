"""Gate documents built from recorded checks, as the plugin builds them at a session's end
(a fixed environment: the tests look at the rows, not at the versions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_triton.gate import document as gd


def document_of(
    parity: Sequence[Mapping[str, Any]], load_runs: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The decided gate document of a session that recorded `parity` and `load_runs`."""
    document = gd.build_document(
        gd.Collected(parity=[dict(r) for r in parity]),
        environment={"python": "3", "platform": "p", "packages": {}},
        load_runs=load_runs,
        problems=[],
        exit_status=0,
        duration_s=1.0,
        junit=None,
    )
    return gd.decide(document)
