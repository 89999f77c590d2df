"""Ask the cache for an answer before (and while) the request runs the pipeline.

A cached answer is the cheapest there is, yet through the pipeline it pays three Kafka hops
(gateway -> preprocess -> cache -> gateway) before the client sees it. So the gateway first sends
each text request the cache could answer straight to the cache service's lookup over HTTP (exact
tier, then the semantic tier and the verifier: the lookup the cache stage would do) and holds the
request up to `SY_CACHE_PEEK_HOLD_MS` (50 ms) for it. A hit within the hold is answered and the
request is never produced (no pipeline run, no broker record). A miss is produced with its lookup
done: the cache stage takes the peek's outcome instead of looking again, so the hold costs a miss
only the HTTP round trip to the cache. Past the hold (a slow lookup) the record is produced and the
peek goes on as a hedged read: whichever answer arrives first is sent (`ReplyRouter` drops the
other), and the stage waits for the peek's lookup rather than repeat it. The cache service keeps
all the rules (policy, live model versions, expiry): the gateway only pre-filters with the shared
rule.
"""

from __future__ import annotations

import httpx

from shared.cache_rules import cache_may_answer, has_media
from shared.runtime.config import Settings
from shared.runtime.envelope import CONTENT_TYPE_PROTOBUF, Envelope
from shared.runtime.telemetry import get_logger

log = get_logger(__name__)


def worth_peeking(env: Envelope, settings: Settings) -> bool:
    """Text-only requests the cache could answer (media hashes exist only after preprocess)."""
    return not has_media(env) and cache_may_answer(env, settings)


class CachePeek:
    def __init__(self, settings: Settings) -> None:
        assert settings.cache_peek_url
        self.url = settings.cache_peek_url.rstrip("/") + "/v1/cache/peek"
        self._http = httpx.AsyncClient(
            timeout=settings.cache_peek_timeout_s,
            headers={
                "authorization": f"Bearer {settings.internal_token.get_secret_value()}",
                "content-type": CONTENT_TYPE_PROTOBUF,
            },
        )

    async def __call__(self, request: bytes, request_id: str, tenant: str) -> Envelope | None:
        """The answered envelope on a hit; None on a miss or any failure (never raises).
        `request`: the serialised envelope of that request id and tenant."""
        try:
            r = await self._http.post(self.url, content=request)
        except httpx.HTTPError as exc:
            log.debug("cache peek failed", error=repr(exc))
            return None
        if r.status_code != 200:
            if r.status_code != 204:
                log.warning("cache peek refused", status=r.status_code, body=r.text[:200])
            return None
        try:
            hit = Envelope.FromString(r.content)
        except Exception:  # noqa: BLE001 - a bad body is a miss
            return None
        if hit.request_id != request_id or hit.tenant != tenant or not hit.cache.hit:
            return None
        return hit

    async def close(self) -> None:
        await self._http.aclose()
