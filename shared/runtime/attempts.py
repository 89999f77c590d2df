"""What a stage makes of one record: its outputs, after retries, or its dead letter.

The rules (DESIGN §3, shared.runtime.consumer): a record over SY_MAX_RECORD_BYTES, a `Rejected`
(poison) record and a record whose handler failed SY_STAGE_MAX_ATTEMPTS times each end in ONE
dead letter; `DependencyUnavailable` is waited out, never counted; a record whose process died
more than SY_STAGE_MAX_DELIVERIES times is dead-lettered unhandled. Producing the outputs is the
consumer's part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import OutRecord, backoff_s
from shared.runtime.config import Settings
from shared.runtime.dead_letters import DeadHook, bounded, dead_letter, dlq_record, record_size
from shared.runtime.envelope import DependencyUnavailable, ErrorCode, Rejected
from shared.runtime.telemetry import DEAD_LETTERS, DEPENDENCY_WAITS, ERRORS, get_logger

log = get_logger(__name__)

Handler = Callable[[ConsumerRecord], Awaitable[Sequence[OutRecord]]]


@dataclass(slots=True)
class Outcome:
    """The outputs to produce for a record, "ok" or "dlq", and the handler attempts it took."""

    outputs: Sequence[OutRecord]
    outcome: str
    attempts: int


class RecordAttempts:
    """Run a stage's handler on records under the retry and dead-letter rules."""

    def __init__(
        self,
        *,
        stage: str,
        handler: Handler,
        settings: Settings,
        dlq_topic: str,
        topics: Sequence[str],
        on_dead: DeadHook | None,
        stopping: asyncio.Event,
    ) -> None:
        self.stage, self._handler, self._s = stage, handler, settings
        self._dlq_topic, self._topics, self._on_dead = dlq_topic, list(topics), on_dead
        self._stopping = stopping

    async def run(self, rec: ConsumerRecord, delivery: int = 1) -> Outcome | None:
        """The record's outcome; None when the stage stopped while a dependency was down (the
        record stays uncommitted: the next start, or another replica, handles it)."""
        if delivery > self._s.stage_max_deliveries:
            reason = (
                f"the process handling this record died {delivery - 1} times "
                f"(SY_STAGE_MAX_DELIVERIES={self._s.stage_max_deliveries})"
            )
            return Outcome(
                self.dead_outputs(rec, ErrorCode.DELIVERIES_EXHAUSTED, reason, delivery - 1), "dlq", 0
            )
        attempt = waits = 0
        while True:
            attempt += 1
            try:
                return Outcome(await self._attempt(rec), "ok", attempt)
            except asyncio.CancelledError:
                raise
            except Rejected as exc:
                return Outcome(self.dead_outputs(rec, exc.code, exc.reason, attempt), "dlq", attempt)
            except DependencyUnavailable as exc:
                # Not the record's fault: wait for the dependency, however long, unless stopping.
                attempt -= 1
                waits += 1
                if not await self._wait_for_dependency(exc, waits):
                    return None
            except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then DLQ'd
                ERRORS.labels(self.stage, type(exc).__name__).inc()
                if attempt >= self._s.stage_max_attempts:
                    return Outcome(self._given_up(rec, exc, attempt), "dlq", attempt)
                log.warning(
                    "handler failed; retrying",
                    stage=self.stage,
                    attempt=attempt,
                    error=bounded(repr(exc), 300),
                    cause=bounded(repr(exc.__cause__), 300) if exc.__cause__ else None,
                )
                await asyncio.sleep(
                    backoff_s(attempt, self._s.stage_retry_backoff_ms, self._s.stage_retry_backoff_max_ms)
                )

    async def _attempt(self, rec: ConsumerRecord) -> Sequence[OutRecord]:
        """One handler attempt: the input's size first, then the handler within its time limit,
        then the size of everything it would write."""
        limit = self._s.max_record_bytes
        if rec.value is not None and len(rec.value) > limit:
            raise Rejected(
                ErrorCode.RECORD_TOO_LARGE,
                f"record is {len(rec.value)} bytes, limit SY_MAX_RECORD_BYTES={limit} (send media by reference)",
                http_status=413,
            )
        try:
            outputs = await asyncio.wait_for(self._handler(rec), timeout=self._s.stage_handler_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"handler took over SY_STAGE_HANDLER_TIMEOUT_S={self._s.stage_handler_timeout_s:g}s"
            ) from None
        for r in outputs:
            if record_size(r) > limit:
                raise Rejected(
                    ErrorCode.OUTPUT_TOO_LARGE,
                    f"the stage's output to {r.topic} would be {record_size(r)} bytes, over "
                    f"SY_MAX_RECORD_BYTES={limit}",
                    http_status=413,
                )
        return outputs

    async def _wait_for_dependency(self, exc: DependencyUnavailable, waits: int) -> bool:
        """Back off before the next attempt; False when the stage is stopping instead."""
        DEPENDENCY_WAITS.labels(self.stage, exc.dependency).inc()
        if waits == 1 or waits % 20 == 0:
            log.warning(
                "dependency unavailable; waiting", stage=self.stage, dependency=exc.dependency, error=str(exc)
            )
        if self._stopping.is_set():
            return False
        delay = backoff_s(min(waits, 10), self._s.stage_retry_backoff_ms, self._s.stage_retry_backoff_max_ms)
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        except TimeoutError:
            pass
        return True

    def _given_up(self, rec: ConsumerRecord, exc: Exception, attempt: int) -> list[OutRecord]:
        cause = f" (caused by {exc.__cause__!r})" if exc.__cause__ else ""
        reason = f"failed {attempt} times, last: {type(exc).__name__}: {exc}{cause}"
        outputs = self.dead_outputs(rec, ErrorCode.RETRIES_EXHAUSTED, reason, attempt)
        log.error("giving up on record", stage=self.stage, offset=rec.offset, error=bounded(str(exc), 300))
        return outputs

    def dead_outputs(self, rec: ConsumerRecord, code: str, reason: str, attempts: int) -> list[OutRecord]:
        """The dead letter of `rec`, and whatever the stage's on_dead hook adds to it."""
        ERRORS.labels(self.stage, code).inc()
        DEAD_LETTERS.labels(self.stage, code).inc()
        log.warning(
            "record to DLQ",
            stage=self.stage,
            code=code,
            reason=bounded(reason, 300),
            topic=rec.topic,
            offset=rec.offset,
        )
        dl = dead_letter(rec, self.stage, code, reason, attempts, self._s.dlq_max_original_bytes)
        extra: list[OutRecord] = []
        if self._on_dead is not None:
            try:
                extra = list(self._on_dead(rec, dl))
            except Exception as exc:  # noqa: BLE001 - the DLQ record matters more than the reply
                log.warning("on_dead hook failed", error=str(exc))
        # A reply onto a topic this stage reads would come back to it (and to every other reader):
        # a dead letter is final, so such replies are dropped. An oversized one is dropped too.
        extra = [
            r for r in extra if r.topic not in self._topics and record_size(r) <= self._s.max_record_bytes
        ]
        return [dlq_record(self._dlq_topic, rec, dl), *extra]
