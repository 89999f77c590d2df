"""Batch input lines in, envelopes out; answers back into OpenAI's output/error line format.

Plain functions: no Kafka, no storage. Every rejected line keeps its 1-based line number.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.openai.errors import error_body, error_type
from shared.openai.format import response_body, to_envelope
from shared.openai.protocol import ChatCompletionRequest, CompletionRequest
from shared.runtime.envelope import Envelope, Priority

# known_model(tenant, model) -> whether the tenant may use it (a base model or a visible adapter)
KnownModel = Callable[[str, str], Awaitable[bool]]


@dataclass(slots=True)
class LineError:
    line: int
    custom_id: str | None
    code: str
    message: str
    status: int = 400


def request_id(batch_id: str, line: int) -> str:
    """Deterministic per line, so a line sent twice (a resumed job) is answered under one id."""
    return f"{batch_id}-{line}"


def line_of(batch_id: str, rid: str) -> int | None:
    head, _, tail = rid.rpartition("-")
    return int(tail) if head == batch_id and tail.isdigit() else None


def _model_cls(endpoint: str) -> type[ChatCompletionRequest] | type[CompletionRequest]:
    return ChatCompletionRequest if endpoint == "/v1/chat/completions" else CompletionRequest


async def validate_lines(
    data: bytes, endpoint: str, tenant: str, max_line_bytes: int, known_model: KnownModel
) -> tuple[list[dict[str, Any]], list[LineError]]:
    """Split an input file into valid lines ({line, custom_id, body}) and line errors."""
    valid: list[dict[str, Any]] = []
    errors: list[LineError] = []
    seen: set[str] = set()
    models: dict[str, bool] = {}
    cls = _model_cls(endpoint)
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue  # blank lines (and the final newline) are not requests
        if len(raw) > max_line_bytes:
            errors.append(
                LineError(
                    n, None, "line_too_large", f"line {n} is {len(raw)} bytes, limit {max_line_bytes}", 413
                )
            )
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            errors.append(LineError(n, None, "invalid_json", f"line {n} is not valid JSON: {exc}"))
            continue
        if not isinstance(obj, dict):
            errors.append(LineError(n, None, "invalid_request", f"line {n} is not a JSON object"))
            continue
        cid = obj.get("custom_id")
        if not isinstance(cid, str) or not cid or len(cid) > 512:
            errors.append(
                LineError(n, None, "missing_custom_id", f"line {n}: custom_id must be a non-empty string")
            )
            continue
        if cid in seen:
            errors.append(
                LineError(n, cid, "duplicate_custom_id", f"line {n}: custom_id {cid!r} is repeated")
            )
            continue
        seen.add(cid)
        if obj.get("method", "POST") != "POST":
            errors.append(LineError(n, cid, "invalid_method", f"line {n}: method must be POST"))
            continue
        if obj.get("url") != endpoint:
            errors.append(
                LineError(
                    n,
                    cid,
                    "mismatched_endpoint",
                    f"line {n}: url {str(obj.get('url'))[:80]!r} differs from the batch endpoint {endpoint!r}",
                )
            )
            continue
        body = obj.get("body")
        if not isinstance(body, dict):
            errors.append(LineError(n, cid, "invalid_request", f"line {n}: body must be a JSON object"))
            continue
        try:
            req = cls(**body)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(x) for x in e["loc"])
            errors.append(LineError(n, cid, "invalid_request", f"line {n}: body.{loc}: {e['msg']}"))
            continue
        if req.stream:
            errors.append(
                LineError(n, cid, "invalid_request", f"line {n}: stream is not available in a batch")
            )
            continue
        if req.model not in models:
            models[req.model] = await known_model(tenant, req.model)
        if not models[req.model]:
            errors.append(
                LineError(n, cid, "model_not_found", f"line {n}: the model '{req.model}' does not exist", 404)
            )
            continue
        valid.append({"line": n, "custom_id": cid, "body": body})
    return valid, errors


def envelope_for(
    line: dict[str, Any], endpoint: str, batch_id: str, tenant: str, deadline_unix_ms: int
) -> Envelope:
    req = _model_cls(endpoint)(**line["body"])
    env = to_envelope(
        req, request_id=request_id(batch_id, line["line"]), tenant=tenant, deadline_unix_ms=deadline_unix_ms
    )
    env.priority = Priority.PRIORITY_BATCH
    env.batch_id = batch_id
    env.metadata["custom_id"] = line["custom_id"]
    return env


def result_of(env: Envelope, created: int) -> dict[str, Any]:
    """What the collector keeps of an answer: the OpenAI body, or the error."""
    row: dict[str, Any] = {"request_id": env.request_id, "tenant": env.tenant}
    if env.error.code:
        status = env.error.http_status or 500
        row.update(
            status_code=status,
            error={"code": env.error.code, "message": env.error.message},
            body=error_body(env.error.message, error_type(status), env.error.code),
        )
    else:
        body = response_body(env, created)
        body.pop("switchyard", None)  # per-stage timings: not part of the output line format
        row.update(status_code=200, body=body)
    return row


def output_line(batch_id: str, line: int, custom_id: str, result: dict[str, Any]) -> dict[str, Any]:
    rid = request_id(batch_id, line)
    out: dict[str, Any] = {
        "id": f"batch_req_{rid}",
        "custom_id": custom_id,
        "response": {"status_code": result["status_code"], "request_id": rid, "body": result["body"]},
        "error": None,
    }
    if result["status_code"] != 200:
        out["error"] = {**result.get("error", {}), "line": line}
    return out


def error_line(batch_id: str, err: LineError) -> dict[str, Any]:
    return {
        "id": f"batch_req_{request_id(batch_id, err.line)}",
        "custom_id": err.custom_id,
        "response": None,
        "error": {"code": err.code, "message": err.message, "line": err.line},
    }
