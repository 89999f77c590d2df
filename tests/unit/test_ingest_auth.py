"""The Kafka ingest signature (shared/runtime/ingest_auth.py): what proves a tenant and what does not."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, Rejected, encode
from shared.runtime.ingest_auth import SIGNATURE_HEADER, IngestVerifier, ServiceSigner, internal_secret, sign

ACME = b"acme-secret-0123456789"
NOW = 1_800_000_000.0


def verifier(settings: Settings | None = None) -> IngestVerifier:
    s = settings or Settings(internal_token=SecretStr("internal-token-0123456789"))
    return IngestVerifier({"acme": ACME}, internal_secret(s), max_skew_s=300)


def record(tenant: str = "acme") -> tuple[Envelope, bytes]:
    env = Envelope(request_id="r1", tenant=tenant, model="sy-tiny")
    return env, encode(env)


def reason(v: IngestVerifier, value: bytes, headers: list, env: Envelope, now: float = NOW) -> str:
    with pytest.raises(Rejected) as err:
        v.verify(value, headers, env, now=now)
    assert err.value.code == "unauthenticated" and err.value.http_status == 401
    return err.value.reason


def test_a_tenant_signed_record_proves_its_tenant() -> None:
    env, value = record()
    assert verifier().verify(value, [sign(value, "acme", ACME, now=NOW)], env, now=NOW) == "acme"


def test_the_services_key_signs_for_any_tenant() -> None:
    s = Settings(internal_token=SecretStr("internal-token-0123456789"))
    env, value = record("globex")
    header = ServiceSigner(s).header(value)
    assert verifier(s).verify(value, [header], env) == "internal"
    other = Settings(internal_token=SecretStr("another-token-0123456789"))
    assert "does not match" in reason(verifier(other), value, [header], env, now=float(header[1][2:12]))


def test_unsigned_forged_tampered_stale_and_malformed_records_are_refused() -> None:
    v = verifier()
    env, value = record()
    assert "no sy-signature" in reason(v, value, [], env)
    assert "no sy-signature" in reason(v, value, [(SIGNATURE_HEADER, None)], env)
    # acme's key cannot sign for globex: the key id must be the record's own tenant
    genv, gvalue = record("globex")
    assert "not the record's tenant" in reason(v, gvalue, [sign(gvalue, "acme", ACME, now=NOW)], genv)
    # a key id naming globex with acme's secret (or any guess) does not match
    assert "does not match" in reason(v, gvalue, [sign(gvalue, "globex", ACME, now=NOW)], genv)
    # one byte changed after signing
    tampered = value[:-1] + bytes([value[-1] ^ 1])
    assert "does not match" in reason(v, tampered, [sign(value, "acme", ACME, now=NOW)], env)
    # a valid signature from long ago: a replay
    assert "SY_INGEST_MAX_SKEW_S" in reason(v, value, [sign(value, "acme", ACME, now=NOW - 3600)], env)
    good = sign(value, "acme", ACME, now=NOW)
    assert "more than one" in reason(v, value, [good, good], env)
    for bad in (
        b"",
        b"t=1",
        b"t=x,k=acme,v1=00",
        b"t=1,k=acme,v1=00,t=2",
        "t=1,k=é,v1=0".encode(),
        b"\xff\xfe",
    ):
        reason(v, value, [(SIGNATURE_HEADER, bad)], env)


def test_production_mode_requires_signed_ingest_by_default() -> None:
    assert not Settings(env="dev").ingest_auth_required
    assert Settings(env="production").ingest_auth_required
    assert Settings(kafka_bootstrap="kafka:9092", env=None).ingest_auth_required  # a production endpoint
    assert not Settings(kafka_bootstrap="kafka:9092", env="dev").ingest_auth_required
    assert Settings(env="dev", kafka_ingest_auth="required").ingest_auth_required
    assert not Settings(env="production", kafka_ingest_auth="off").ingest_auth_required
