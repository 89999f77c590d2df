"""Delivery counts that survive the death of the process handling a record.

A record whose handler kills its process (`os._exit`, SIGKILL, the kernel's OOM killer) leaves
no exception for the bus to count: after the restart the group redelivers it, and without a
count kept outside the process it would kill every restart for good. So before a fetched batch
is handled, each record's delivery is counted in SQLite under SY_STATE_DIR (one small
transaction per fetch; rows go once their offsets are committed). The file is shared by every
process of the stage on the host, so a record redelivered to a sibling replica is counted too;
in Kubernetes SY_STATE_DIR is a volume that outlives the container.

A row keys a record by topic, partition and offset, and keeps a fingerprint of the record (CRC32
of its value, its timestamp): an embedded broker restarts with empty logs, and the new record
at an old offset must not inherit the old record's count.
"""

from __future__ import annotations

import sqlite3
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from shared.runtime.telemetry import get_logger

log = get_logger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    part INTEGER NOT NULL,
    off INTEGER NOT NULL,
    fingerprint INTEGER NOT NULL,
    count INTEGER NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (grp, topic, part, off)
)
"""
# Rows of records never committed (a partition moved away, a broker reset its logs) age out.
_MAX_AGE_S = 7 * 24 * 3600


def fingerprint(rec: ConsumerRecord) -> int:
    """Tells a record from another at the same offset of a restarted log."""
    return (zlib.crc32(rec.value or b"") ^ (int(rec.timestamp or 0) << 1)) & 0x7FFFFFFFFFFFFFFF


class DeliveryLog:
    """Per-record delivery counts of one consumer group, persisted in SQLite."""

    def __init__(self, path: Path, group: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.group = path, group
        # autocommit off, one transaction per call; WAL lets sibling processes share the file.
        self._db = sqlite3.connect(str(path), timeout=10.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # The file must outlive the process, not the machine: the OS keeps written pages when a
        # process dies, so no fsync per fetch.
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(_SCHEMA)
        self._db.execute("DELETE FROM deliveries WHERE updated < ?", (time.time() - _MAX_AGE_S,))

    def begin(self, records: Iterable[ConsumerRecord]) -> dict[tuple[str, int, int], int]:
        """Return each record's deliveries before this one, counting a first delivery at once.

        A record delivered before is counted only by `again`, right before it runs (alone): a
        batch fetched after a crash may hold records the crash kept from ever running.
        """
        recs = list(records)
        if not recs:
            return {}
        prior: dict[tuple[str, int, int], int] = {}
        now = time.time()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            rows = []
            for rec in recs:
                fp = fingerprint(rec)
                row = db.execute(
                    "SELECT fingerprint, count FROM deliveries WHERE grp=? AND topic=? AND part=? AND off=?",
                    (self.group, rec.topic, rec.partition, rec.offset),
                ).fetchone()
                before = row[1] if row is not None and row[0] == fp else 0
                prior[(rec.topic, rec.partition, rec.offset)] = before
                if before == 0:
                    rows.append((self.group, rec.topic, rec.partition, rec.offset, fp, 1, now))
            db.executemany("INSERT OR REPLACE INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return prior

    def again(self, rec: ConsumerRecord, count: int) -> None:
        """Count a redelivered record's delivery as `count`, before it runs."""
        self._db.execute(
            "INSERT OR REPLACE INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.group, rec.topic, rec.partition, rec.offset, fingerprint(rec), count, time.time()),
        )

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        """Offsets below these are done for good: forget their counts."""
        if not offsets:
            return
        try:
            self._db.executemany(
                "DELETE FROM deliveries WHERE grp=? AND topic=? AND part=? AND off<?",
                [(self.group, tp.topic, tp.partition, pos) for tp, pos in offsets.items()],
            )
        except sqlite3.Error as exc:  # a leftover row only ages out; never worth a failed commit
            log.warning("delivery log cleanup failed", error=str(exc))

    def close(self) -> None:
        self._db.close()
