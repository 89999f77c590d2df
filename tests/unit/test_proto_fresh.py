"""The committed generated code must equal what `make proto` produces from proto/."""

from __future__ import annotations

from pathlib import Path

from shared.devstack.protogen import PROTO_DIR, generate


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in generate(tmp_path)}
    committed = {p.relative_to(PROTO_DIR): p.read_bytes() for p in PROTO_DIR.rglob("*_pb2.py*")}
    assert fresh, "protoc produced nothing"
    assert set(fresh) == set(committed), "generated files differ in name: run `make proto`"
    stale = [str(k) for k in fresh if fresh[k] != committed[k]]
    assert not stale, f"stale generated code {stale}: run `make proto` and commit"


def test_asyncapi_document_is_fresh() -> None:
    from shared.devstack.asyncapi import OUTPUT, render
    from shared.runtime.config import Settings

    assert OUTPUT.read_text() == render(Settings()), "stale proto/asyncapi.json: run `make proto` and commit"


def test_asyncapi_schema_matches_json_mapping() -> None:
    """The JSON schema in the document accepts what the codec writes and names every field."""
    from switchyard.v1.envelope_pb2 import Envelope

    from shared.devstack.asyncapi import document
    from shared.runtime.config import Settings

    doc = document(Settings())
    env_schema = doc["components"]["schemas"]["switchyard.v1.Envelope"]
    assert set(env_schema["properties"]) == {f.name for f in Envelope.DESCRIPTOR.fields}
    assert doc["channels"]["requests"]["address"] == "sy.requests"
    assert doc["operations"]["send_requests"]["action"] == "send"
    assert "infer_vllm" in doc["channels"]
