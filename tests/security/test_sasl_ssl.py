"""SASL over TLS: a SASL_SSL listener with a PEM key store, a SCRAM-SHA-512 user made with `tieredlog
users` over that same listener (TLS, then PLAIN as the admin of the listener's JAAS), then confluent-kafka
producing and consuming as that user; a wrong password refused after the TLS handshake succeeded."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from broker_harness import BrokerProcess
from helpers import free_port
from sasl_harness import auth_error, produce_and_consume, users_tool
from tls_certs import Pki, tls_certs  # noqa: F401

pytestmark = pytest.mark.integration

ADMIN_SECRET = "tls-admin-s3cret"
USER_SECRET = "tls-erin-s3cret"


def test_scram_over_sasl_ssl(broker_factory: Callable[..., BrokerProcess], tls_certs: Pki,  # noqa: F811
                             tmp_path: Path) -> None:
    port = free_port()
    b = broker_factory(start=False)
    b.overrides = {
        "listeners": f"SASL_SSL://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{b.port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.broker_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_admin="{ADMIN_SECRET}";',
        "remote.log.storage.system.enable": "false", "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    b.start()
    address = f"localhost:{port}"
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                     f"sasl.password={ADMIN_SECRET}\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={tls_certs.ca_pem}\n")
    done = users_tool("--bootstrap-server", address, "--command-config", str(props), "--alter",
                      "--entity-name", "erin", "--add-config", f"SCRAM-SHA-512=[password={USER_SECRET}]")
    assert done.returncode == 0, done.stderr

    def conf(password: str) -> dict[str, Any]:
        return {"bootstrap.servers": address, "security.protocol": "SASL_SSL", "ssl.ca.location": str(tls_certs.ca_pem),
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "erin", "sasl.password": password}

    got = produce_and_consume(conf(USER_SECRET), "over-sasl-ssl")
    assert got == [f"over-sasl-ssl-{i}".encode() for i in range(5)]
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth_error(conf("wrong"))
    log = b.log_text()
    assert ADMIN_SECRET not in log and USER_SECRET not in log
