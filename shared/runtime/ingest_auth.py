"""Who may write a request for a tenant onto the ingest topic (the Kafka trust boundary).

A record on `sy.requests` proves its tenant with an HMAC header, as webhook signatures do
(Stripe's `t=...,v1=...` shape):

    sy-signature: t=<unix seconds>,k=<key id>,v1=<hex HMAC-SHA256(secret, b"<t>." + value)>

`k` is the tenant whose ingest secret (SY_INGEST_SECRETS) signed the record, and it must be the
envelope's tenant; or `internal`, the services' own key (derived from SY_INTERNAL_TOKEN), which
the gateway, the batch service and the canary use after they have authenticated the tenant
themselves. The MAC covers the whole value, so neither the tenant nor anything else in the record
can be changed, and `t` bounds a replay to SY_INGEST_MAX_SKEW_S (a replayed request id is then
deduplicated like any redelivery).

The alternative the issue offers, a topic per tenant behind ACLs, needs a broker with ACLs; the
embedded one has none, and a topic per tenant multiplies partitions. docs/security.md explains.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

from shared.runtime.bus import OutRecord
from shared.runtime.config import Settings
from shared.runtime.envelope import Envelope, ErrorCode, Rejected

SIGNATURE_HEADER = "sy-signature"
INTERNAL_KEY_ID = "internal"
UNAUTHENTICATED = ErrorCode.UNAUTHENTICATED

Headers = Sequence[tuple[str, bytes | None]]


def _mac(secret: bytes, ts: int, value: bytes) -> str:
    return hmac.new(secret, str(ts).encode() + b"." + value, hashlib.sha256).hexdigest()


def internal_secret(settings: Settings) -> bytes:
    """The services' signing key: derived from the internal token, never the token itself."""
    token = settings.internal_token.get_secret_value().encode()
    return hmac.new(token, b"switchyard ingest signing key v1", hashlib.sha256).digest()


def sign(value: bytes, key_id: str, secret: bytes, now: float | None = None) -> tuple[str, bytes]:
    """The `sy-signature` header for a record value, signed by `key_id` with `secret`."""
    ts = int(time.time() if now is None else now)
    return SIGNATURE_HEADER, f"t={ts},k={key_id},v1={_mac(secret, ts, value)}".encode()


def parse(header: bytes) -> tuple[int, str, str]:
    """(t, k, v1) of a signature header; ValueError when it is not one."""
    fields: dict[str, str] = {}
    for part in header.decode("ascii").split(","):
        name, sep, val = part.partition("=")
        if not sep or name in fields:
            raise ValueError("malformed sy-signature")
        fields[name.strip()] = val.strip()
    if set(fields) != {"t", "k", "v1"} or not fields["t"].isdigit() or len(fields["t"]) > 12:
        raise ValueError("sy-signature needs t=<unix seconds>,k=<key id>,v1=<hex>")
    return int(fields["t"]), fields["k"], fields["v1"]


class IngestVerifier:
    """Checks the signature of an ingest record against the envelope's tenant."""

    def __init__(self, tenant_secrets: Mapping[str, bytes], internal: bytes, max_skew_s: float) -> None:
        self._secrets = dict(tenant_secrets)
        self._internal = internal
        self._max_skew_s = max_skew_s

    @classmethod
    def from_settings(cls, settings: Settings) -> IngestVerifier:
        return cls(
            {t: s.get_secret_value().encode() for t, s in settings.ingest_secrets.items()},
            internal_secret(settings),
            settings.ingest_max_skew_s,
        )

    def verify(self, value: bytes, headers: Headers, env: Envelope, now: float | None = None) -> str:
        """The key id that signed the record; Rejected(unauthenticated) when nothing proves it.

        The reason never says which part failed beyond what the producer can see itself.
        """
        raw = [v for k, v in headers if k == SIGNATURE_HEADER]
        if not raw or raw[0] is None:
            raise Rejected(UNAUTHENTICATED, "no sy-signature header (SY_KAFKA_INGEST_AUTH=required)", 401)
        if len(raw) > 1:
            raise Rejected(UNAUTHENTICATED, "more than one sy-signature header", 401)
        try:
            ts, key_id, mac = parse(raw[0])
        except (ValueError, UnicodeDecodeError) as exc:
            raise Rejected(UNAUTHENTICATED, str(exc), 401) from None
        if key_id == INTERNAL_KEY_ID:
            secret: bytes | None = self._internal
        else:
            if key_id != env.tenant:
                raise Rejected(UNAUTHENTICATED, "the signing key is not the record's tenant's", 401)
            secret = self._secrets.get(key_id)
        expected = _mac(secret or b"\0unknown tenant", ts, value or b"")
        if not hmac.compare_digest(expected.encode(), mac.encode()) or secret is None:
            raise Rejected(UNAUTHENTICATED, "sy-signature does not match the record", 401)
        skew = abs((time.time() if now is None else now) - ts)
        if skew > self._max_skew_s:
            raise Rejected(
                UNAUTHENTICATED,
                f"sy-signature is {skew:.0f}s from now, over SY_INGEST_MAX_SKEW_S={self._max_skew_s:g}",
                401,
            )
        return key_id


class ServiceSigner:
    """Signs what a service writes to the ingest topic with the services' key (`k=internal`).

    The gateway and the batch service write there only after they authenticated the tenant
    themselves (its API key), so their records need no tenant secret."""

    def __init__(self, settings: Settings) -> None:
        self._secret = internal_secret(settings)

    def header(self, value: bytes) -> tuple[str, bytes]:
        return sign(value, INTERNAL_KEY_ID, self._secret)

    def sign(self, rec: OutRecord) -> OutRecord:
        rec.headers = [*rec.headers, self.header(rec.value)]
        return rec
