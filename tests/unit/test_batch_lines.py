"""Batch input validation and the output line format (services/batch/lines.py), no services."""

from __future__ import annotations

import json

from services.batch.lines import (
    LineError,
    envelope_for,
    error_line,
    line_of,
    output_line,
    request_id,
    validate_lines,
)
from services.gateway.batches.serving import window_seconds
from shared.runtime.envelope import Priority

CHAT = "/v1/chat/completions"


async def known(tenant: str, model: str) -> bool:
    return model == "sy-tiny" or (tenant == "acme" and model == "acme-lora")


def row(cid: object, url: str = CHAT, model: str = "sy-tiny", **body: object) -> bytes:
    b = {"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": b}).encode()


async def test_every_bad_line_is_reported_with_its_number() -> None:
    data = b"\n".join(
        [
            row("a"),  # 1
            b"{nope",  # 2
            row("b", url="/v1/completions"),  # 3
            row("c", model="gpt-4"),  # 4
            row("d", pad="x" * 600),  # 5: oversized (limit 512)
            b"",  # 6: blank
            row("a"),  # 7: repeated custom_id
            row(None),  # 8
            b"[1, 2]",  # 9
            row("e", temperature=9),  # 10
            row("f", stream=True),  # 11
            row("g", model="acme-lora"),  # 12: another tenant's adapter
            row("h"),  # 13
        ]
    )
    valid, errors = await validate_lines(data, CHAT, "tenant-b", 512, known)
    assert [(v["line"], v["custom_id"]) for v in valid] == [(1, "a"), (13, "h")]
    got = {e.line: e.code for e in errors}
    assert got == {
        2: "invalid_json",
        3: "mismatched_endpoint",
        4: "model_not_found",
        5: "line_too_large",
        7: "duplicate_custom_id",
        8: "missing_custom_id",
        9: "invalid_request",
        10: "invalid_request",
        11: "invalid_request",
        12: "model_not_found",
    }
    assert all(f"line {e.line}" in e.message for e in errors)
    assert "temperature" in next(e.message for e in errors if e.line == 10)
    valid, errors = await validate_lines(row("g", model="acme-lora"), CHAT, "acme", 512, known)
    assert len(valid) == 1 and not errors


def test_line_envelope_and_formats() -> None:
    env = envelope_for(
        {"line": 7, "custom_id": "x", "body": json.loads(row("x", max_tokens=3))["body"]},
        CHAT,
        "batch_1",
        "t",
        99,
    )
    assert env.request_id == request_id("batch_1", 7) and line_of("batch_1", env.request_id) == 7
    assert line_of("batch_2", env.request_id) is None
    assert env.priority == Priority.PRIORITY_BATCH and env.batch_id == "batch_1"
    assert env.deadline_unix_ms == 99 and env.request.sampling.max_tokens == 3
    ok = output_line("batch_1", 7, "x", {"status_code": 200, "body": {"object": "chat.completion"}})
    assert ok["custom_id"] == "x" and ok["error"] is None and ok["response"]["status_code"] == 200
    failed = output_line(
        "batch_1", 7, "x", {"status_code": 404, "body": {}, "error": {"code": "no_pool", "message": "m"}}
    )
    assert failed["error"] == {"code": "no_pool", "message": "m", "line": 7}
    bad = error_line("batch_1", LineError(3, None, "invalid_json", "line 3 is not valid JSON"))
    assert bad["response"] is None and bad["error"]["line"] == 3


def test_completion_window() -> None:
    assert window_seconds("24h") == 86400 and window_seconds("90s") == 90
    assert window_seconds("0h") is None and window_seconds("8d") is None and window_seconds("200h") is None
