"""Generate the protobuf Python code from proto/ (what `make proto` runs).

The generated files are committed so the services need no protoc at run time; a unit
test regenerates them into a temp dir and fails when the committed copies are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto"


def proto_files() -> list[Path]:
    return sorted((PROTO_DIR / "switchyard").rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (bundled with grpcio-tools) on every .proto; return the files written."""
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    out_dir.mkdir(parents=True, exist_ok=True)
    files = [str(p.relative_to(PROTO_DIR)) for p in proto_files()]
    args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *files]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    return sorted(p for p in out_dir.rglob("*_pb2.py*"))


def main() -> None:
    written = generate(PROTO_DIR)
    for p in written:
        print(p.relative_to(ROOT))


if __name__ == "__main__":
    sys.exit(main())
