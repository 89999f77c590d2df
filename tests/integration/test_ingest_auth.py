"""Kafka ingest with SY_KAFKA_INGEST_AUTH=required, through the preprocess service process and
the real embedded broker: unsigned, forged and tampered records are dead-lettered once as
`unauthenticated` with no reply on sy.responses (their ids are a stranger's claim), while records
signed by the tenant's own secret or by the services' key go on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from switchyard.v1.envelope_pb2 import ChatMessage, Request, SamplingParams
from switchyard.v1.events_pb2 import DeadLetter

from shared.runtime.bus import header
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Kind, decode, encode
from shared.runtime.ingest_auth import ServiceSigner, sign
from tests.helpers.kafka import collect, produce, service_env, services

ACME_SECRET = "acme-ingest-secret-0123456789"
TOKEN = "internal-token-for-this-test-0123"


def chat(rid: str, tenant: str) -> bytes:
    return encode(
        Envelope(
            request_id=rid,
            tenant=tenant,
            kind=Kind.KIND_CHAT,
            model="sy-tiny",
            request=Request(
                messages=[ChatMessage(role="user", content=f"hello {rid}")],
                sampling=SamplingParams(temperature=0, max_tokens=4),
            ),
        )
    )


async def test_only_records_that_prove_their_tenant_pass_preprocess(broker, topics, var_dir: Path) -> None:
    env = service_env(
        broker.bootstrap,
        topics,
        var_dir,
        SY_KAFKA_INGEST_AUTH="required",
        SY_INGEST_SECRETS=json.dumps({"acme": ACME_SECRET}),
        SY_INTERNAL_TOKEN=TOKEN,
    )
    secret = ACME_SECRET.encode()
    signed, by_service = chat("r-signed", "acme"), chat("r-service", "globex")
    unsigned, forged = chat("r-unsigned", "acme"), chat("r-forged", "globex")
    wrong_secret, tampered = chat("r-wrong", "acme"), chat("r-tampered", "acme")
    service_header = ServiceSigner(Settings(env="dev", internal_token=TOKEN)).header(by_service)
    records = [
        (signed, [sign(signed, "acme", secret)]),
        (by_service, [service_header]),
        (unsigned, []),
        (forged, [sign(forged, "acme", secret)]),  # acme's key, globex's tenant
        (wrong_secret, [sign(wrong_secret, "acme", b"a guess of the secret")]),
        (tampered, [sign(chat("r-tampered", "globex"), "acme", secret)]),  # signed other bytes
    ]
    with services(["preprocess"], env, var_dir):
        for value, headers in records:
            await produce(broker.bootstrap, f"{topics}requests", [value], headers=headers)
        prepared, dead = await asyncio.gather(
            collect(broker.bootstrap, f"{topics}prepared", 2),
            collect(broker.bootstrap, f"{topics}dlq", 4),
        )
        await asyncio.sleep(1.0)  # anything more would have come by now
        replies = await collect(broker.bootstrap, f"{topics}responses", 1, timeout_s=1.0)
        dead_again = await collect(broker.bootstrap, f"{topics}dlq", 5, timeout_s=1.0)
    assert sorted(decode(r.value).request_id for r in prepared) == ["r-service", "r-signed"]
    letters = [DeadLetter.FromString(r.value) for r in dead_again]
    assert len(letters) == 4  # each once
    by_id = {decode(dl.original_value).request_id: dl for dl in letters}
    assert sorted(by_id) == ["r-forged", "r-tampered", "r-unsigned", "r-wrong"]
    assert {dl.error_code for dl in letters} == {"unauthenticated"}
    assert "no sy-signature" in by_id["r-unsigned"].reason
    assert "not the record's tenant" in by_id["r-forged"].reason
    assert [header(r.headers, "sy-error-code") for r in dead_again] == ["unauthenticated"] * 4
    assert replies == []  # nobody is told anything in the name of an unproven tenant
