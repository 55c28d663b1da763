"""Regenerate the checked-in protobuf and gRPC code from the .proto files here.

Usage: ``python -m protocol.rocketmq.v2.generate [OUT_ROOT]`` (default: the
repository root, i.e. overwrite the checked-in files). grpcio-tools is pinned
in pyproject.toml, so the same inputs always give the same output; a test
regenerates into a temporary folder and compares.

This is a build script, not part of the pure protocol: it is never imported
by the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTOS = ("definition.proto", "service.proto")
ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent.relative_to(ROOT)


def generate(out_root: Path) -> list[Path]:
    """Run protoc over our .proto files, writing under ``out_root``; returns the files."""
    import grpc_tools  # noqa: PLC0415 - a build-time dependency only
    from grpc_tools import protoc  # noqa: PLC0415

    includes = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{includes}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(HERE / name) for name in PROTOS),
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    stems = [name.removesuffix(".proto") for name in PROTOS]
    return sorted(
        out_root / HERE / f"{stem}{suffix}"
        for stem in stems
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
    )


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    for path in generate(target):
        print(path)
