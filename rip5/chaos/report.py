"""A chaos run's report: the history and verdict as files, a table, a chart.

Files written into the run's output folder:

- ``history.jsonl``: every send, delivery and fault (read back with
  :func:`rip5.chaos.history.from_lines`, so a verdict can be re-checked);
- ``verdict.json``: every figure of :class:`rip5.chaos.checkers.Verdict`;
- ``chart.png``: acked sends per second and send latency p50/p99 over the
  run, each fault window shaded and named.

SHELL: files, the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rip5.chaos.checkers import Verdict
from rip5.chaos.history import History, to_lines


def write_files(
    out_dir: Path, history: History, verdict: Verdict, extra: dict[str, object]
) -> None:
    """history.jsonl and verdict.json (``extra``: the run's options, seed, cluster)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "history.jsonl", "w") as handle:
        for line in to_lines(history):
            handle.write(line + "\n")
    (out_dir / "verdict.json").write_text(
        json.dumps({**extra, "verdict": verdict.as_dict()}, indent=2) + "\n"
    )


def chart(path: Path, history: History, verdict: Verdict) -> None:
    """Throughput and latency over time with the faults marked, as a PNG."""
    # Imported here, not at the top: every rip5 process loads this package with the
    # CLI, and matplotlib takes a large share of a second to import.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    seconds = [p.second for p in verdict.series]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    top.step(seconds, [p.acked for p in verdict.series], where="post", label="acked sends/s")
    top.step(seconds, [p.failed for p in verdict.series], where="post", label="failed or unknown/s")
    top.set_ylabel("messages per second")
    bottom.step(seconds, [p.latency_p50_ms for p in verdict.series], where="post", label="send p50")
    bottom.step(seconds, [p.latency_p99_ms for p in verdict.series], where="post", label="send p99")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("seconds since start")
    for fault in history.faults:
        begin = (fault.start_ms - history.start_ms) / 1000
        end = (fault.end_ms - history.start_ms) / 1000
        for axes in (top, bottom):
            axes.axvspan(begin, max(end, begin + 0.2), color="red", alpha=0.15)
        top.annotate(
            f"{fault.fault} {fault.target}", (begin, 1.0), xycoords=("data", "axes fraction"),
            fontsize=7, rotation=90, va="top",
        )  # fmt: skip
    top.legend(loc="lower right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    top.set_title(f"rip5 chaos: model {history.model}")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def table(console: Console, verdict: Verdict, start_ms: int) -> None:
    """The verdict as a table, then one line per fault (times from ``start_ms``, the run's
    start) with its recovery time."""
    counts = Table(title=f"rip5 chaos: model {verdict.model} ({'OK' if verdict.ok else 'FAILED'})")
    for name in ("figure", "value"):
        counts.add_column(name)
    shown = verdict.as_dict()
    for name in (
        "invoked", "acked", "failed", "unknown", "unknown_stored", "consumed", "lost",
        "duplicated", "redelivered", "out_of_order", "committed_visible",
        "rolled_back_visible", "early", "unexpected", "lateness_p99_ms",
    ):  # fmt: skip
        counts.add_row(name, str(shown[name]))
    for name, latency in (("send", verdict.send_latency_ms), ("e2e", verdict.e2e_latency_ms)):
        counts.add_row(f"{name} latency ms", " ".join(f"{k} {v:.0f}" for k, v in latency.items()))
    console.print(counts)
    if verdict.recoveries:
        faults = Table(title="faults")
        for name in ("fault", "target", "start s", "held s", "recovery ms", "slowest send ms"):
            faults.add_column(name)
        for r in verdict.recoveries:
            faults.add_row(
                r.fault,
                r.target,
                f"{(r.start_ms - start_ms) / 1000:.1f}",
                f"{(r.end_ms - r.start_ms) / 1000:.1f}",
                "never" if r.recovery_ms is None else str(r.recovery_ms),
                str(r.slowest_send_ms),
            )
        console.print(faults)
    for name, ids in verdict.samples.items():
        console.print(f"{name}: {', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}")


MATRIX_COLUMNS = (
    "fault", "model", "acked", "lost", "duplicated", "out of order", "unknown, stored",
    "recovery ms", "slowest send ms", "verdict",
)  # fmt: skip


def matrix_row(fault: str, seed: int, verdict: Verdict) -> list[str]:
    """One (fault, model) run as a row of the reliability table: the worst recovery
    time of its faults, and the seed that replays a failed run."""
    times = [r.recovery_ms for r in verdict.recoveries]
    if any(t is None for t in times):
        recovery = "never"
    else:
        recovery = str(max((t for t in times if t is not None), default=0)) if times else "-"
    slowest = max((r.slowest_send_ms for r in verdict.recoveries), default=0)
    shown = "OK" if verdict.ok else f"FAILED (seed {seed}: {', '.join(findings(verdict))})"
    return [
        fault, verdict.model, str(verdict.acked), str(verdict.lost), str(verdict.duplicated),
        str(verdict.out_of_order), str(verdict.unknown_stored), recovery, str(slowest), shown,
    ]  # fmt: skip


def findings(verdict: Verdict) -> list[str]:
    """What failed a verdict, as counts (``["104 early"]``)."""
    counts = (
        ("lost", verdict.lost),
        ("duplicated", verdict.duplicated),
        ("out of order", verdict.out_of_order),
        ("rolled back visible", verdict.rolled_back_visible),
        ("early", verdict.early),
        ("unexpected", verdict.unexpected),
    )
    return [f"{count} {name}" for name, count in counts if count]


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` under :data:`MATRIX_COLUMNS` as a Markdown table."""
    lines = ["| " + " | ".join(MATRIX_COLUMNS) + " |", "|" + "---|" * len(MATRIX_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
