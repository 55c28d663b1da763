"""Reading the ``<prefix>_stats.csv`` a headless Locust run writes.

PURE: parses text handed in; the caller reads the file.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass


@dataclass(frozen=True)
class StatsRow:
    """One request name's line of the stats CSV (``Aggregated`` for the total)."""

    request_type: str
    name: str
    requests: int
    failures: int
    median_ms: float
    p99_ms: float
    requests_per_s: float
    average_bytes: float


def _number(text: str) -> float:
    return float(text) if text not in ("", "N/A") else 0.0


def parse_stats(text: str) -> list[StatsRow]:
    """Every row of a stats CSV, the ``Aggregated`` row last."""
    rows = []
    for record in csv.DictReader(io.StringIO(text)):
        rows.append(
            StatsRow(
                request_type=record["Type"],
                name=record["Name"],
                requests=int(record["Request Count"]),
                failures=int(record["Failure Count"]),
                median_ms=_number(record["Median Response Time"]),
                p99_ms=_number(record["99%"]),
                requests_per_s=_number(record["Requests/s"]),
                average_bytes=_number(record["Average Content Size"]),
            )
        )
    return rows


def parse_failures(text: str) -> dict[str, int]:
    """``<prefix>_failures.csv``: "request name: error" -> occurrences."""
    failures: dict[str, int] = {}
    for record in csv.DictReader(io.StringIO(text)):
        key = f"{record['Name']}: {record['Error']}"
        failures[key] = failures.get(key, 0) + int(record["Occurrences"])
    return failures
