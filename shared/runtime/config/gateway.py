"""The Gateway section of the settings; shared.runtime.config.Settings holds every section."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from shared.runtime.config.base import Section


class GatewaySettings(Section):
    """The OpenAI-compatible front door: body size, deadlines, streaming, async requests."""

    title: ClassVar[str] = "Gateway"

    gateway_max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Larger request bodies get 413"
    )
    gateway_stream_write_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A streaming client that accepts no data for this long is cut off and its slots freed",
    )
    gateway_prepare_text: bool = Field(
        default=True,
        description="The gateway prepares text-only chat/completion requests itself (tokens, context check) "
        "and sends them past preprocess: one Kafka hop fewer. Needs the model's tokenizer.json under "
        "SY_MODELS_DIR; without it, or when false, every request goes through sy.requests",
    )
    gateway_max_in_flight: int = Field(
        default=1024, ge=1, description="Requests waiting for a reply in one replica (503 past it)"
    )
    gateway_resubmit_after_s: float = Field(
        default=120.0,
        gt=0,
        description="An async request with no answer this long after its send is sent again",
    )
    gateway_resubmit_max: int = Field(
        default=3, ge=1, description="Sends of an async request before it is reported failed (reason: lost)"
    )
    gateway_resubmit_interval_s: float = Field(
        default=5.0, gt=0, description="How often the gateway looks for unanswered async requests"
    )
    gateway_timeout_s: float = Field(
        default=120.0, gt=0, description="Deadline of a request; past it the reply is 504"
    )
    gateway_state_url: str = Field(
        default="",
        description="Redis holding async requests, idempotency keys and results, shared by every gateway "
        "replica (redis://host:6379/1; `make run` points it at the embedded Redis); unset = a SQLite file "
        "per replica, for a single gateway only",
    )
    gateway_results_ttl_s: float = Field(
        default=24 * 3600, gt=0, description="How long async results are kept"
    )
