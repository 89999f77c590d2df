"""The embedded broker listens on Kafka's usual 9092 when it can, and says why when it cannot."""

from __future__ import annotations

import socket
from pathlib import Path

from shared.devstack.embedded.kafka import DEFAULT_PORT, EmbeddedKafka, choose_port
from shared.runtime.procs import free_port, port_free


def test_sy_kafka_port_wins() -> None:
    port = free_port()
    assert choose_port(port) == (port, "SY_KAFKA_PORT")


def test_the_default_port_when_free_else_a_free_port_and_the_reason() -> None:
    default = free_port()  # stands in for 9092, which a running stack may hold
    assert choose_port(None, default=default) == (default, "Kafka's default port")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", default))
        holder.listen()
        port, why = choose_port(None, default=default)
    assert port != default and port_free(port)
    assert f"{default} is in use" in why and "SY_KAFKA_PORT" in why


def test_the_launcher_line_says_which_port_and_why(tmp_path: Path) -> None:
    assert DEFAULT_PORT == 9092
    line = EmbeddedKafka(tmp_path).describe()
    why = "Kafka's default port" if "127.0.0.1:9092 " in line else "9092 is in use"
    assert why in line and str(tmp_path) in line
