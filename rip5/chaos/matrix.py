"""``rip5 chaos matrix``: every fault against every model, one run each, as docs/reliability.md.

Each (fault, model) pair gets its own cluster and one fault, so a loss is
the fault's own. The page it writes says how it was made (the command, the
seed, the date and the machine's load): figures measured on a shared
machine are indicative only.

SHELL.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console

from rip5.chaos import report
from rip5.chaos.run import RunOptions, run_and_report
from rip5.chaos.schedule import KINDS
from rip5.chaos.workload import MODELS

WARMUP_S = 3.0
HOLD_S = 4.0

PAGE_HEAD = """# Reliability: every fault against every model

This page is written by `{command}`; do not edit it by hand.
Each row is one run of `rip5 chaos run` (see `rip5/chaos/`): a fresh cluster
of real processes (1 nameserver, 3 storage nodes, 1 broker, each server
behind a fault proxy), producers and consumers over the RocketMQ gRPC v2
protocol for {duration:.0f} s, and ONE fault injected after {warmup:.0f} s and
healed {hold:.0f} s later; then the consumers drain and the checker reads the
history.

- **acked**: sends the broker answered OK (retries of a failed send reuse
  its message ids);
- **lost**: acked (for txn: committed) and never delivered;
- **duplicated**: delivered again after a delivery whose ack succeeded;
- **out of order**: fifo only, a message delivered after a later one of its
  message group;
- **unknown, stored**: a send whose answer was lost but whose message was
  stored (OpenChaos counts these as duplicates; here they are neither);
- **recovery ms**: from the first failed send after the fault began to the
  first acked send started after it (0: no send failed);
- **slowest send ms**: the longest a send started after the fault began
  took (retries included): a fault that stalls sends without failing them
  shows here.

Faults: {faults}.

Run {started} UTC, seed {seed}, on {cpus} cores with load average {load}
at the start: a shared machine, so times are indicative only.

"""


def page(
    rows: Sequence[Sequence[str]],
    *,
    command: str,
    duration_s: float,
    seed: int,
    started: str,
    load: str,
) -> str:
    """The whole docs/reliability.md text."""
    faults = "; ".join(f"`{kind}` {what}" for kind, what in KINDS.items())
    head = PAGE_HEAD.format(
        command=command, duration=duration_s, warmup=WARMUP_S, hold=HOLD_S, faults=faults,
        started=started, seed=seed, cpus=os.cpu_count(), load=load,
    )  # fmt: skip
    failed = [row for row in rows if row[-1] != "OK"]
    tail = (
        "\n\nEvery run: nothing lost, duplicated or reordered.\n"
        if not failed
        else "\n\nOpen defects, each with the command that replays it:\n\n"
        + "\n".join(
            f"- {row[0]} x {row[1]}: {row[-1]}: `rip5 chaos run --model {row[1]} "
            f"--fault {row[0]} --seed {seed} --duration {duration_s:g} "
            f"--interval {duration_s:g} --hold {HOLD_S:g}`"
            for row in failed
        )
        + "\n"
    )
    return head + report.markdown_table(rows) + tail


def _command(models: tuple[str, ...], faults: tuple[str, ...], duration: float, seed: int) -> str:
    """The command that writes this page again: the options that shape the runs, never
    where the runs' folders or the page went (those name one machine's paths)."""
    words = ["rip5 chaos matrix", f"--duration {duration:g}"]
    if seed != 1:
        words.append(f"--seed {seed}")
    words += [f"--model {model}" for model in models]
    words += [f"--fault {fault}" for fault in faults]
    return " ".join(words)


@click.command("matrix")
@click.option("--model", "models", multiple=True, type=click.Choice(sorted(MODELS)))
@click.option("--fault", "faults", multiple=True, type=click.Choice(sorted(KINDS)))
@click.option("--duration", type=float, default=12.0, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--out", type=click.Path(path_type=Path), default=Path("chaos-matrix"), show_default=True
)
@click.option(
    "--doc", type=click.Path(path_type=Path), default=Path("docs/reliability.md"),
    show_default=True, help="the page to write",
)  # fmt: skip
def matrix_command(
    models: tuple[str, ...],
    faults: tuple[str, ...],
    duration: float,
    seed: int,
    out: Path,
    doc: Path,
) -> None:
    """Run every fault against every model (or those given) and write the reliability page."""
    console = Console()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    rows: list[list[str]] = []
    for fault in faults or tuple(KINDS):
        for model in models or ("queue", "fifo", "txn", "timer"):
            console.rule(f"{fault} x {model}")
            options = RunOptions(
                model=model, faults=(fault,), duration_s=duration, interval_s=duration,
                hold_s=HOLD_S, warmup_s=WARMUP_S, seed=seed, out_dir=out / f"{fault}-{model}",
            )  # fmt: skip
            verdict = run_and_report(options, console)
            rows.append(report.matrix_row(fault, seed, verdict))
    command = _command(models, faults, duration, seed)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(
        page(
            rows,
            command=command,
            duration_s=duration,
            seed=seed,
            started=started,
            load=load,
        )
    )
    console.print(f"wrote {doc}")
