"""Opening the place of message objects: a folder or an fsspec URL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from protocol import errors
from protocol.object_store import LocationUnavailable, open_location


def test_a_folder_and_its_file_url_open_on_the_local_filesystem(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_bytes(b"{}")
    for url in (str(tmp_path), f"file://{tmp_path}/"):
        fs, root = open_location(url, {})
        assert root == str(tmp_path)
        assert fs.cat_file(f"{root}/manifest.json") == b"{}"


def test_an_unknown_protocol_is_refused_naming_the_url() -> None:
    with pytest.raises(LocationUnavailable, match="cannot open 'nosuchfs://x'") as caught:
        open_location("nosuchfs://x", {})
    assert caught.value.code is errors.BAD_REQUEST


def test_without_fsspec_the_refusal_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    with pytest.raises(LocationUnavailable, match=r"need fsspec \(pip install"):
        open_location("/tmp", {})
