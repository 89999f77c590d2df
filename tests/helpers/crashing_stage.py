"""A stage process whose handler kills its process on the record b"die" (tests of issue 32).

Run as `python -m tests.helpers.crashing_stage` with SY_* settings in the environment; every
other record is copied to <prefix>prepared.
"""

from __future__ import annotations

import asyncio
import os

from aiokafka.structs import ConsumerRecord

from shared.runtime.bus import OutRecord, Producer
from shared.runtime.config import load_settings
from shared.runtime.consumer import StageConsumer


async def main() -> None:
    s = load_settings()
    producer = Producer(s)
    await producer.start()

    async def handler(rec: ConsumerRecord) -> list[OutRecord]:
        if rec.value == b"die":
            os._exit(1)  # what a segfault, an OOM kill or SIGKILL leave: no exception, no cleanup
        await asyncio.sleep(0.05)
        return [OutRecord(s.topic("prepared"), rec.value or b"")]

    consumer = StageConsumer(
        stage="crashy",
        topics=[s.topic("requests")],
        group_id=f"{s.topic_prefix}crashy",
        handler=handler,
        producer=producer,
        settings=s,
        dlq_topic=s.topic("dlq"),
    )
    await consumer.run()


if __name__ == "__main__":
    asyncio.run(main())
