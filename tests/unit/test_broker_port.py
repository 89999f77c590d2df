"""The embedded broker listens on Kafka's usual 9092 when it can, and says why when it cannot."""

from __future__ import annotations

import socket

from shared.devstack.embedded.kafka import DEFAULT_PORT, EmbeddedKafka, choose_port
from shared.runtime.procs import free_port, port_free


def test_sy_kafka_port_wins() -> None:
    port = free_port()
    assert choose_port(port) == (port, "SY_KAFKA_PORT")


def test_9092_when_free_else_a_free_port_and_the_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    holder = None
    if port_free(DEFAULT_PORT):
        assert choose_port(None) == (DEFAULT_PORT, "Kafka's default port")
        holder = socket.socket()
        holder.bind(("127.0.0.1", DEFAULT_PORT))
        holder.listen()
    try:  # 9092 taken (by us, or by whatever held it already)
        port, why = choose_port(None)
        assert port != DEFAULT_PORT and port_free(port)
        assert "9092 is in use" in why and "SY_KAFKA_PORT" in why
        line = EmbeddedKafka(tmp_path).describe()
        assert "9092 is in use" in line and "127.0.0.1:" in line
    finally:
        if holder is not None:
            holder.close()
