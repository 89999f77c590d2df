"""Requests out: every path in (chat, async, rollouts, resubmits) produces through `Publisher`."""

from __future__ import annotations

from collections.abc import Callable

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.ingest_auth import ServiceSigner
from shared.runtime.stage import Emit, out_record

from .errors import refuse_oversized


class Publisher:
    """To sy.requests, or to `topic` when the gateway prepared the request itself."""

    def __init__(
        self,
        settings: Settings,
        producer: Producer,
        wake: Callable[[], None],
        reply_to: Callable[[], str] = lambda: "",
    ) -> None:
        # wake: the reply reader's (Follower.wake); an answer is coming, no idle fetch wait.
        # reply_to: where this replica reads its replies (reply_lease.py); "" = by request id.
        self.settings, self.producer, self.wake, self.reply_to = settings, producer, wake, reply_to
        self.signer = ServiceSigner(settings)
        self.requests_topic = settings.topic("requests")

    async def submit(self, env: Envelope, topic: str | None = None) -> None:
        refuse_oversized(env, self.settings.max_record_bytes)  # every path in: chat, async, rollouts
        env.reply_to = self.reply_to()  # a resubmit is answered where this replica reads
        rec: OutRecord = out_record(Emit(topic or self.requests_topic, env))
        await self.producer.send(self.signer.sign(rec))  # signed: preprocess may require it (issue 33)
        self.wake()  # an answer is coming: no idle fetch wait on the reply reader
