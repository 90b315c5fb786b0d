"""The report's pictures: parity headroom per variant, latency against throughput of the load
runs. PNGs next to report.md (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_triton.gate.markdown import PLOTS

FLOOR_PCT = 1e-4  # a log axis cannot show 0: exact matches are drawn at this floor


def write_plots(
    document: Mapping[str, Any], directory: Path, headroom_limit_pct: float | None = None
) -> tuple[list[str], str | None]:
    """The plots this document has data for; their names, or why none could be drawn."""
    try:
        import matplotlib
    except ImportError:
        return [], (
            "plots need matplotlib: pip install 'pytest-triton[load]' (or matplotlib itself)"
        )
    matplotlib.use("Agg")
    written = []
    if document["parity"]:
        parity_headroom(document["parity"], directory / PLOTS["parity"], headroom_limit_pct)
        written.append(PLOTS["parity"])
    if any(run["points"] for run in document["load"]):
        load_latency(document["load"], directory / PLOTS["load"])
        written.append(PLOTS["load"])
    return written, None


def parity_headroom(
    rows: Sequence[Mapping[str, Any]], path: Path, limit_pct: float | None = None
) -> None:
    import matplotlib.pyplot as plt

    labels = [
        f"{r['variant']} / {r['protocol']}"
        + ("" if r["transport"] == "none" else f" / {r['transport']}")
        for r in rows
    ]
    values = [
        100.0 * (r["headroom_used"] if r["headroom_used"] is not None else 10.0) for r in rows
    ]
    colors = [
        "tab:red"
        if v >= 100
        else "tab:orange"
        if limit_pct is not None and v > limit_pct
        else "tab:green"
        for v in values
    ]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6))
    ax.barh(labels, [max(v, FLOOR_PCT) for v in values], color=colors)
    ax.set_xscale("log")
    ax.axvline(100, color="tab:red", linestyle="--", label="tolerance (100%)")
    if limit_pct is not None:
        ax.axvline(
            limit_pct, color="tab:orange", linestyle=":", label=f"baseline limit ({limit_pct:g}%)"
        )
    for y, (row, value) in enumerate(zip(rows, values, strict=True)):
        text = (
            "not comparable"
            if row["headroom_used"] is None
            else "0% (exact)"
            if value == 0
            else f"{value:.3g}%"
        )
        ax.annotate(
            text,
            (max(value, FLOOR_PCT), y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.set_xlim(FLOOR_PCT, max(1000.0, max(values, default=0) * 3))
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("headroom used: max |served - native| / (atol + rtol |native|), % (log)")
    ax.set_title("Parity headroom per variant and protocol")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    _save(fig, path)


def load_latency(runs: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        points = [p for p in run["points"] if p["throughput"] is not None]
        if not points:
            continue
        if run["kind"] == "triton-perf":
            for batch in sorted({p["batch_size"] for p in points}):
                line = sorted(
                    (p for p in points if p["batch_size"] == batch),
                    key=lambda p: (p.get("request_rate_asked") or 0, p["concurrency"]),
                )
                xs = [p["throughput"] for p in line]
                drawn = ax.plot(
                    xs,
                    [p["p99_ms"] for p in line],
                    marker="o",
                    label=f"{run['name']} batch {batch} p99",
                )[0]
                ax.plot(
                    xs,
                    [p["p50_ms"] for p in line],
                    marker=".",
                    linestyle="--",
                    color=drawn.get_color(),
                    label=f"{run['name']} batch {batch} p50",
                )
            continue
        for p in points:
            for metric, marker in (("p50_ms", "o"), ("p95_ms", "s"), ("p99_ms", "^")):
                if p[metric] is not None:
                    ax.scatter(
                        [p["throughput"]],
                        [p[metric]],
                        marker=marker,
                        label=f"{run['name']} {metric[:3]}",
                    )
                    ax.annotate(
                        f"{p[metric]:.3g} ms",
                        (p["throughput"], p[metric]),
                        xytext=(5, 0),
                        textcoords="offset points",
                        fontsize=7,
                        va="center",
                    )
        for check in run["checks"]:
            if check.get("limit") is None:
                continue
            if check["name"] == "perf_latency_p99":
                ax.axhline(
                    check["limit"],
                    color="tab:red",
                    linestyle=":",
                    label=f"{run['name']} p99 target <= {check['limit']:g} ms",
                )
            elif check["name"] == "perf_throughput":
                ax.axvline(
                    check["limit"],
                    color="tab:purple",
                    linestyle=":",
                    label=f"{run['name']} throughput target >= {check['limit']:,.0f}",
                )
    ax.set_yscale("log")  # targets sit far from typical latencies; a log axis shows both
    ax.set_xlim(left=0)
    ax.set_xlabel("throughput (samples/s)")
    ax.set_ylabel("latency (ms, log)")
    ax.set_title("Load: latency vs throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
