"""One batch job from validating to a final status, resumable from storage at any point.

Everything a job knows survives in object storage (shared/batches/store.py): the validated
lines, how many were sent, and the answers the collector stored. A job whose worker was killed
is started again (by the batch service's sweep, or by the broker redelivering it) and goes on
from there: lines sent before are not lost (the collector still stores their answers), and a
line sent twice is answered under the same request id and kept once.

Only the holder of the job's lease writes its batch object; the lease is renewed while the
job runs and expires when its worker dies.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from shared.batches.store import TERMINAL, BatchObject, BatchStore, RequestCounts, jsonl, read_jsonl
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope
from shared.runtime.telemetry import get_logger

from .lines import KnownModel, LineError, envelope_for, error_line, line_of, output_line, validate_lines

log = get_logger(__name__)

Publish = Callable[[list[Envelope]], Awaitable[None]]
TICK_S = 0.1
COMPACT_CHUNKS = 32  # merge stored answer chunks past this many
REFRESH_S = 0.2  # how often stored answers are listed (a listing stats every chunk)


class LeaseLost(RuntimeError):
    """Another worker took the job over (this one was presumed dead): stop writing."""


SAVE_EVERY_S = 0.5


class Results:
    """The answers stored so far for one job, read incrementally (first answer per line wins)."""

    def __init__(self, store: BatchStore, batch_id: str, tenant: str) -> None:
        self.store, self.batch_id, self.tenant = store, batch_id, tenant
        self.by_line: dict[int, dict[str, Any]] = {}
        self._read: set[str] = set()
        self.duplicates = 0

    async def refresh(self) -> int:
        new = 0
        for key in await self.store.result_chunks(self.batch_id):
            if key in self._read:
                continue
            self._read.add(key)
            for row in read_jsonl(await self.store.read_key(key)):
                line = line_of(self.batch_id, row.get("request_id", ""))
                if line is None or row.get("tenant") != self.tenant:
                    continue
                if line in self.by_line:
                    self.duplicates += 1
                    continue
                self.by_line[line] = row
                new += 1
        if len(self._read) > COMPACT_CHUNKS:
            await self._compact()
        return new

    async def _compact(self) -> None:
        """Merge the chunks read so far into one, so listings stay short on long jobs.

        Only the lease holder does this; a crash between the write and the deletes leaves
        duplicates, which the first-answer-wins rule absorbs.
        """
        name = f"merged-{time.time_ns()}"
        merged = await self.store.add_results(self.batch_id, name, list(self.by_line.values()))
        for key in self._read:
            await self.store.delete_key(key)
        self._read = {merged}


class BatchJob:
    def __init__(
        self,
        settings: Settings,
        store: BatchStore,
        publish: Publish,
        known_model: KnownModel,
        owner: str | None = None,
    ) -> None:
        self.s = settings
        self.store = store
        self.publish = publish
        self.known_model = known_model
        self.owner = owner or f"{settings.instance_id}-{uuid.uuid4().hex[:8]}"

    # ---------------------------------------------------------------- lease
    async def _acquire(self, batch_id: str) -> bool:
        held = await self.store.lease(batch_id)
        if held and held.get("owner") != self.owner and held.get("until", 0) > time.time():
            return False
        await self.store.write_lease(batch_id, self.owner, self.s.batch_lease_s)
        await asyncio.sleep(0.05)  # two takers at once: the last write wins, the other backs off
        held = await self.store.lease(batch_id)
        return bool(held and held.get("owner") == self.owner)

    async def _renew(self, batch_id: str, lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.s.batch_lease_s / 3)
            held = await self.store.lease(batch_id)
            if held and held.get("owner") != self.owner:
                lost.set()  # taken over (we were presumed dead): stop writing
                return
            await self.store.write_lease(batch_id, self.owner, self.s.batch_lease_s)

    # ---------------------------------------------------------------- run
    async def run(self, tenant: str, batch_id: str) -> str:
        """Drive the job until a final status; returns the status it left the job in."""
        batch = await self.store.get_batch(tenant, batch_id)
        if batch is None:
            return "missing"
        if batch.status in TERMINAL:
            await self.store.put_batch(tenant, batch)  # clears a stale active marker
            return batch.status
        if not await self._acquire(batch_id):
            log.info("batch job runs elsewhere", batch_id=batch_id)
            return "busy"
        lost = asyncio.Event()
        renew = asyncio.create_task(self._renew(batch_id, lost))
        try:
            log.info("batch job started", batch_id=batch_id, status=batch.status, owner=self.owner)
            return await self._drive(tenant, batch, lost)
        except LeaseLost:
            log.warning("batch job taken over by another worker", batch_id=batch_id)
            return "lost"
        finally:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
            if not lost.is_set():
                await self.store.release_lease(batch_id, self.owner)

    async def _save(self, tenant: str, batch: BatchObject, lost: asyncio.Event) -> None:
        if lost.is_set():
            raise LeaseLost(batch.id)
        await self.store.put_batch(tenant, batch)

    async def _validate(
        self, tenant: str, batch: BatchObject
    ) -> tuple[list[dict[str, Any]], list[LineError]]:
        stored = await self.store.get_work(batch.id, "lines.jsonl")
        if stored is not None:
            invalid = [
                LineError(**e)
                for e in read_jsonl(await self.store.get_work(batch.id, "invalid.jsonl") or b"")
            ]
            return read_jsonl(stored), invalid
        data = await self.store.file_content(tenant, batch.input_file_id)
        if data is None:
            return [], [LineError(0, None, "input_file_missing", f"input file {batch.input_file_id} is gone")]
        valid, invalid = await validate_lines(
            data, batch.endpoint, tenant, self.s.batch_line_max_bytes, self.known_model
        )
        await self.store.put_work(batch.id, "invalid.jsonl", jsonl([asdict(e) for e in invalid]))
        await self.store.put_work(
            batch.id, "lines.jsonl", jsonl(valid)
        )  # written last: marks validation done
        return valid, invalid

    async def _drive(self, tenant: str, batch: BatchObject, lost: asyncio.Event) -> str:
        bid = batch.id
        valid, invalid = await self._validate(tenant, batch)
        now = int(time.time())
        if not valid:
            batch.errors = {
                "object": "list",
                "data": [
                    {"code": e.code, "message": e.message, "param": None, "line": e.line}
                    for e in invalid[:1000]
                ],
            }
            batch.request_counts = RequestCounts(total=len(invalid), failed=len(invalid))
            await self._finalize(
                tenant, batch, valid, invalid, Results(self.store, bid, tenant), "failed", lost
            )
            return batch.status
        if batch.status == "validating":
            batch.status, batch.in_progress_at = "in_progress", now
        batch.request_counts.total = len(valid) + len(invalid)
        await self._save(tenant, batch, lost)

        results = Results(self.store, bid, tenant)
        progress = json.loads(await self.store.get_work(bid, "progress.json") or b'{"sent": 0}')
        sent = int(progress["sent"])
        deadline_ms = (batch.expires_at or 0) * 1000
        rate = self.s.batch_rate_per_s
        started, sent_at_start = time.monotonic(), sent
        last_save, last_counts, last_refresh = 0.0, None, 0.0
        cancel_at: int | None = None
        while not lost.is_set():
            if time.monotonic() - last_refresh >= REFRESH_S:
                last_refresh = time.monotonic()
                await results.refresh()
            done = results.by_line
            failed_now = sum(1 for r in done.values() if r["status_code"] != 200)
            batch.request_counts = RequestCounts(
                total=len(valid) + len(invalid),
                completed=len(done) - failed_now,
                failed=len(invalid) + failed_now,
            )
            if len(done) >= len(valid):
                await self._finalize(tenant, batch, valid, invalid, results, "completed", lost)
                return batch.status
            if cancel_at is None:
                cancel_at = await self.store.cancel_requested(bid)
                if cancel_at is not None:
                    batch.status, batch.cancelling_at = "cancelling", cancel_at
                    await self._save(tenant, batch, lost)
                    log.info("batch cancelling", batch_id=bid, sent=sent, done=len(done))
            if cancel_at is not None:
                in_flight = sum(1 for ln in valid[:sent] if ln["line"] not in done)
                if in_flight == 0 or time.time() - cancel_at >= self.s.batch_cancel_grace_s:
                    await self._finalize(tenant, batch, valid, invalid, results, "cancelled", lost)
                    return batch.status
            elif batch.expires_at and time.time() >= batch.expires_at:
                await self._finalize(tenant, batch, valid, invalid, results, "expired", lost)
                return batch.status
            elif sent < len(valid):
                # Backpressure: at most batch_max_in_flight lines of this job unanswered, and the rate.
                in_flight = sum(1 for ln in valid[:sent] if ln["line"] not in done)
                room = self.s.batch_max_in_flight - in_flight
                if rate > 0:
                    allowed = int((time.monotonic() - started) * rate) + 1 - (sent - sent_at_start)
                    room = min(room, allowed)
                if room > 0:
                    chunk = [ln for ln in valid[sent : sent + room] if ln["line"] not in done]
                    envs = [envelope_for(ln, batch.endpoint, bid, tenant, deadline_ms) for ln in chunk]
                    if envs:
                        await self.publish(envs)
                    sent = min(len(valid), sent + room)
                    await self.store.put_work(bid, "progress.json", json.dumps({"sent": sent}).encode())
            counts = batch.request_counts.model_dump()
            if counts != last_counts and time.monotonic() - last_save >= SAVE_EVERY_S:
                last_save, last_counts = time.monotonic(), counts
                await self._save(tenant, batch, lost)
            await asyncio.sleep(TICK_S)
        return "lost"

    async def _finalize(
        self,
        tenant: str,
        batch: BatchObject,
        valid: list[dict[str, Any]],
        invalid: list[LineError],
        results: Results,
        status: str,
        lost: asyncio.Event,
    ) -> None:
        """Write the output and error files, then the final status (safe to repeat)."""
        now = int(time.time())
        if status == "completed":
            batch.status, batch.finalizing_at = "finalizing", now
            await self._save(tenant, batch, lost)
        done = results.by_line
        out_rows, err_rows = [], [error_line(batch.id, e) for e in invalid]
        for ln in valid:
            r = done.get(ln["line"])
            if r is None:
                if status == "expired":
                    err_rows.append(
                        error_line(
                            batch.id,
                            LineError(
                                ln["line"],
                                ln["custom_id"],
                                "batch_expired",
                                "This request could not be executed before the completion window expired.",
                            ),
                        )
                    )
                continue
            row = output_line(batch.id, ln["line"], ln["custom_id"], r)
            (out_rows if r["status_code"] == 200 else err_rows).append(row)
        err_rows.sort(key=lambda row: row["error"]["line"])
        if out_rows:
            f = await self.store.put_file(
                tenant, f"{batch.id}_output.jsonl", "batch_output", jsonl(out_rows), f"file-{batch.id}-output"
            )
            batch.output_file_id = f.id
        if err_rows:
            f = await self.store.put_file(
                tenant, f"{batch.id}_error.jsonl", "batch_output", jsonl(err_rows), f"file-{batch.id}-error"
            )
            batch.error_file_id = f.id
        batch.request_counts = RequestCounts(
            total=len(valid) + len(invalid), completed=len(out_rows), failed=len(err_rows)
        )
        batch.status = status  # type: ignore[assignment]
        setattr(batch, f"{status}_at", int(time.time()))
        await self._save(tenant, batch, lost)
        log.info(
            "batch finished",
            batch_id=batch.id,
            status=status,
            completed=len(out_rows),
            failed=len(err_rows),
            duplicates=results.duplicates,
        )
