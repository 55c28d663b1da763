"""``rip5 dev``'s plan: storage children agree on their peers and group count."""

from __future__ import annotations

from pathlib import Path

from rip5.dev import DevLayout, plan


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_storage_children_share_peers_and_groups(tmp_path: Path) -> None:
    specs, _notices = plan(DevLayout(tmp_path, storage=3, storage_port=7801, storage_groups=32))
    storage = [spec for spec in specs if spec.name.startswith("storage-")]
    assert [spec.name for spec in storage] == ["storage-1", "storage-2", "storage-3"]
    peers = "1=127.0.0.1:7801,2=127.0.0.1:7802,3=127.0.0.1:7803"
    for i, spec in enumerate(storage, start=1):
        assert _flag(spec.argv, "--peers") == peers
        assert _flag(spec.argv, "--groups") == "32"
        assert _flag(spec.argv, "--node-id") == str(i)
        assert _flag(spec.argv, "--listen") == f"127.0.0.1:{7800 + i}"
