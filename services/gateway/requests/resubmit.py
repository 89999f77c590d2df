"""Async requests that lost their answer go again (the accepted log is in `ResultStore`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, decode
from shared.runtime.telemetry import get_logger

from .store import ResultStore

log = get_logger(__name__)


class Resubmitter:
    """Async requests without an answer long after their last send go again (at-least-once:
    the first answer wins, so a client sees one); after SY_GATEWAY_RESUBMIT_MAX sends they
    are reported failed with the reason."""

    def __init__(
        self,
        settings: Settings,
        store: ResultStore,
        submit: Callable[[Envelope], Awaitable[None]],
        ready: Callable[[], bool],
    ) -> None:
        self.settings, self.store, self.submit, self.ready = settings, store, submit, ready

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.settings.gateway_resubmit_interval_s)
            except TimeoutError:
                pass
            if stop.is_set() or not self.ready():
                continue
            await self.sweep()

    async def sweep(self) -> None:
        """Each stale request is claimed by one replica (the store counts its send), then sent."""
        s, store = self.settings, self.store
        for st in await store.claim_stale(s.gateway_resubmit_after_s):
            if st.payload is None or st.sends >= s.gateway_resubmit_max:
                reason = f"no answer after {st.sends} submissions of the request"
                await store.finish(
                    st.request_id, st.tenant, "failed", {"error": {"code": "lost", "message": reason}}
                )
                log.warning("async request given up", request_id=st.request_id, attempts=st.sends)
                continue
            try:
                await self.submit(decode(st.payload))
                log.info("async request resubmitted", request_id=st.request_id, attempt=st.sends + 1)
            except Exception as exc:  # noqa: BLE001 - the broker may be down: claimed again next round
                log.warning("resubmit failed", request_id=st.request_id, error=repr(exc))
                break
