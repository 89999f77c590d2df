"""POST /v1/rollouts, GET /v1/rollouts/{id} (the logic: serving.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse

from ..deps import Tenant, ready_after_body, state_of
from .protocol import Rollout, RolloutRequest
from .serving import RolloutServing

router = APIRouter()


def serving_of(request: Request) -> RolloutServing:
    return state_of(request, "rollouts", RolloutServing)


@router.post("/v1/rollouts", status_code=202, response_model=Rollout)
async def create_rollout(
    admitted: Annotated[tuple[RolloutRequest, str], Depends(ready_after_body(RolloutRequest))],
    request: Request,
    idempotency_key: str | None = Header(default=None),
) -> JSONResponse:
    """Start a rollout job: n samples per prompt from the policy, scored by the reward spec."""
    body, tenant = admitted
    return JSONResponse(await serving_of(request).create(body, tenant, idempotency_key), status_code=202)


@router.get("/v1/rollouts/{rollout_id}", response_model=Rollout)
async def get_rollout(
    rollout_id: str,
    request: Request,
    tenant: Tenant,
    samples: bool = True,
    wait: float = Query(
        default=0.0, ge=0, le=60, description="seconds to hold the reply until the rollout is done"
    ),
) -> JSONResponse:
    """Status, counts, throughput, and (samples=true) every group with its samples and rewards.

    `wait`: long poll; the reply comes when the rollout completed or failed, or after `wait`
    seconds with the status as it is then."""
    return JSONResponse(await serving_of(request).get(tenant, rollout_id, samples, wait))
