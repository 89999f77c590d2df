"""The committed generated code must equal what `make proto` produces from proto/."""

from __future__ import annotations

from pathlib import Path

from shared.protogen import PROTO_DIR, generate


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in generate(tmp_path)}
    committed = {p.relative_to(PROTO_DIR): p.read_bytes() for p in PROTO_DIR.rglob("*_pb2.py*")}
    assert fresh, "protoc produced nothing"
    assert set(fresh) == set(committed), "generated files differ in name: run `make proto`"
    stale = [str(k) for k in fresh if fresh[k] != committed[k]]
    assert not stale, f"stale generated code {stale}: run `make proto` and commit"
