"""The one way to open where message objects rest: a folder or an fsspec URL.

Snapshots (the storage nodes write them, ``rip5 admin snapshot`` lists and
deletes them) and the Spark reader name the place of their objects and
manifests (``protocol.message_objects``) by a URL: a local folder,
``file://``, ``s3://`` (through s3fs) or any other fsspec protocol, with
fsspec storage options (an endpoint, credentials). :func:`open_location`
turns such a URL into a filesystem and the root path inside it; callers
read and write through that filesystem.

fsspec is optional (the ``tiered`` extra): it is imported on first use, and
its absence is a clear :class:`LocationUnavailable`, as is a URL fsspec
cannot open (an unknown protocol, a missing driver, a bad option).

PURE: opening builds the filesystem object only; fsspec reads or writes
nothing until a caller asks it to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import errors
from protocol.errors import ErrorCode


class LocationUnavailable(ValueError):
    """A URL of message objects that cannot be opened here; the message says why."""

    code: ErrorCode = errors.BAD_REQUEST


def open_location(url: str, storage_options: Mapping[str, str]) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` (a folder path or any fsspec URL) and the root
    path inside it, without a trailing slash.

    ``storage_options`` go to fsspec as they are. Raises
    :class:`LocationUnavailable` when fsspec is not installed or cannot open
    such a URL.
    """
    try:
        import fsspec  # noqa: PLC0415 - optional: only snapshots and the tier need it
    except ImportError as exc:
        raise LocationUnavailable(
            "message objects need fsspec (pip install 'rip5[tiered]')"
        ) from exc
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
    except (ValueError, ImportError, TypeError) as exc:
        raise LocationUnavailable(f"cannot open {url!r}: {exc}") from exc
    return fs, str(root).rstrip("/")
