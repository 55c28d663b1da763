"""Sizes, durations and ages for people: ``64 MiB``, ``3 d``, ``1 h 30 min``, ``3 s ago``.

What the admin tables and the dashboard show; ``--json`` keeps the raw
numbers (bytes, milliseconds) for machines.

PURE.
"""

from __future__ import annotations

_SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
_DURATION_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def size_text(size_bytes: int) -> str:
    """``size_bytes`` in binary units with one decimal below 10 (``1.5 KiB``,
    ``64 MiB``); plain bytes below 1 KiB (``512 B``)."""
    if size_bytes < 0:
        raise ValueError(f"a size cannot be negative, got {size_bytes}")
    if size_bytes < 1024:
        return f"{size_bytes} B"
    value = size_bytes / 1024
    step = 0
    while value >= 1024 and step < len(_SIZE_UNITS) - 1:
        value /= 1024
        step += 1
    unit = _SIZE_UNITS[step]
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def duration_text(duration_ms: int) -> str:
    """``duration_ms`` in its two largest whole units (``3 d``, ``1 h 30 min``,
    ``2 min 5 s``); milliseconds below a second (``250 ms``)."""
    if duration_ms < 0:
        raise ValueError(f"a duration cannot be negative, got {duration_ms}")
    if duration_ms < 1_000:
        return f"{duration_ms} ms"
    parts: list[str] = []
    rest = duration_ms
    for unit, size in _DURATION_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {unit}")
        elif parts:
            break  # "1 d 5 min" would skip a unit: stop at the first empty one
        if len(parts) == 2:
            break
    return " ".join(parts)


def ago(then_ms: int, now_ms: int) -> str:
    """How long before ``now_ms`` ``then_ms`` was, for people ("3 s ago"; "-" if never)."""
    if then_ms < 0:
        return "-"
    seconds = max(0, now_ms - then_ms) // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


__all__ = ["ago", "duration_text", "size_text"]
