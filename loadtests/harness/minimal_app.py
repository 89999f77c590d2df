"""The smallest FastAPI endpoint that accepts what `POST /v1/requests` accepts: the capacity
scenario's yardstick for the async accept rate (same host, same client, one uvicorn worker).

It validates the body with pydantic and answers 202 with an id, and does nothing else: no auth,
no store, no broker. Run: `python -m uvicorn loadtests.harness.minimal_app:app --port N`.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()


class Submitted(BaseModel):
    endpoint: str = "/v1/chat/completions"
    body: dict[str, Any]


class Accepted(BaseModel):
    id: str
    status: str


@app.post("/v1/requests", status_code=202)
async def submit(req: Submitted) -> Accepted:
    return Accepted(id=uuid.uuid4().hex, status="queued")


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
