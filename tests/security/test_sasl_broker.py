"""SASL against a real broker process with confluent-kafka (librdkafka): a SASL_PLAINTEXT listener
beside the PLAINTEXT one, PLAIN users from the listener's JAAS, SCRAM-SHA-256/512 users made with
`tieredlog users` (AlterUserScramCredentials), wrong passwords refused, a request before authentication
closing the connection, KIP-368 sessions, SCRAM users kept over a restart and no secret in the log.

Metadata answers each listener with its own endpoints, so clients that bootstrap on the SASL listener
stay on it. The harness waits on the PLAINTEXT one, where the tool needs no login."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from broker_harness import BrokerProcess
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from helpers import free_port, wait_for
from sasl_harness import (
    ADMIN_SECRET,
    ALICE_SECRET,
    METADATA_ALL,
    REAUTH_MS,
    Raw,
    auth_error,
    produce_and_consume,
    sasl_overrides,
    users_tool,
)

from tieredlog.protocol.api import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE

pytestmark = pytest.mark.integration

SCRAM_SECRET = "scram-s3cret-never-logged"
SECRETS = (ADMIN_SECRET, ALICE_SECRET, SCRAM_SECRET)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    sasl_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("sasl") / "data")
    b.overrides = sasl_overrides(sasl_port, b.port)
    b.start()
    try:
        yield b, f"127.0.0.1:{sasl_port}"
    finally:
        b.stop()


def client_conf(address: str, mechanism: str, user: str, password: str, protocol: str = "SASL_PLAINTEXT",
                **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": address, "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


# ---- a raw connection, to see exactly what the broker does -----------------------------------------


def plain_login(raw: Raw, user: str, password: str) -> Any:
    assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    return raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})


# ---- the tests ------------------------------------------------------------------------------------

def test_plain_users_from_the_jaas_produce_and_consume(sasl_broker: tuple[BrokerProcess, str]) -> None:
    _, address = sasl_broker
    got = produce_and_consume(client_conf(address, "PLAIN", "alice", ALICE_SECRET), "plain-topic")
    assert got == [f"plain-topic-{i}".encode() for i in range(5)]


def test_scram_users_made_with_the_tool_produce_and_consume(sasl_broker: tuple[BrokerProcess, str],
                                                           tmp_path: Path) -> None:
    b, address = sasl_broker
    done = users_tool("--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "users", "--entity-name", "bob",
                      "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={SCRAM_SECRET}],"
                                      f"SCRAM-SHA-512=[password={SCRAM_SECRET}]")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Completed updating config for user bob."
    # the tool over the SASL listener, logged in with PLAIN
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     f'username="admin" password="{ADMIN_SECRET}";\n')
    described = users_tool("--bootstrap-server", address, "--command-config", str(props), "--describe",
                           "--entity-name", "bob")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == ("SCRAM credential configs for user-principal 'bob' are "
                                        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        topic = f"scram-{mechanism.lower()}"
        got = produce_and_consume(client_conf(address, mechanism, "bob", SCRAM_SECRET), topic)
        assert got == [f"{topic}-{i}".encode() for i in range(5)]

    # the broker refuses what Kafka refuses, and the tool says so
    too_many = users_tool("--bootstrap-server", b.bootstrap, "--alter", "--entity-name", "bob",
                          "--add-config", f"SCRAM-SHA-256=[iterations=20000,password={SCRAM_SECRET}]")
    assert too_many.returncode == 1
    assert "UnacceptableCredentialException: Too many iterations" in too_many.stderr
    deleted = users_tool("--bootstrap-server", b.bootstrap, "--alter", "--entity-name", "bob",
                         "--delete-config", "SCRAM-SHA-512")
    assert deleted.returncode == 0, deleted.stderr
    again = users_tool("--bootstrap-server", b.bootstrap, "--alter", "--entity-name", "bob",
                       "--delete-config", "SCRAM-SHA-512")
    assert "ResourceNotFoundException: Attempt to delete a user credential that does not exist" in again.stderr
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth_error(
        client_conf(address, "SCRAM-SHA-512", "bob", SCRAM_SECRET))


def test_wrong_passwords_are_refused_with_kafkas_messages(sasl_broker: tuple[BrokerProcess, str]) -> None:
    b, address = sasl_broker
    assert "Authentication failed: Invalid username or password" in auth_error(
        client_conf(address, "PLAIN", "alice", "not-the-password"))
    assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-256") in auth_error(client_conf(address, "SCRAM-SHA-256", "nobody", "whatever"))
    wait_for(lambda: "Invalid user credentials" in b.log_text(), "the reason in the broker's log")


def test_a_request_before_authentication_closes_the_connection(sasl_broker: tuple[BrokerProcess, str]) -> None:
    b, address = sasl_broker
    raw = Raw(address)
    raw.send(METADATA, 12, METADATA_ALL)
    assert raw.recv() is None
    raw.close()
    # ApiVersions is allowed, then only the handshake
    raw = Raw(address)
    versions = raw.call(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert served[SASL_HANDSHAKE] == (0, 1) and served[SASL_AUTHENTICATE] == (0, 2)
    raw.send(METADATA, 12, METADATA_ALL)
    assert raw.recv() is None
    raw.close()
    wait_for(lambda: "Unexpected Kafka request of type METADATA during SASL handshake." in b.log_text(), "the log line")
    lines = [line for line in b.log_text().splitlines() if "during SASL handshake" in line]
    assert len(lines) == 2, lines  # one line per closed connection
    # an unknown mechanism: answered with the enabled ones, then closed
    raw = Raw(address)
    refused = raw.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert (refused.error_code, refused.mechanisms) == (33, ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    assert raw.recv() is None
    raw.close()
    # on the PLAINTEXT listener SASL has no place: ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers
    raw = Raw(b.bootstrap)
    assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
    raw.close()


def test_plain_sessions_end_and_librdkafka_reauthenticates(sasl_broker: tuple[BrokerProcess, str]) -> None:
    _, address = sasl_broker
    raw = Raw(address)
    answer = plain_login(raw, "alice", ALICE_SECRET)
    assert answer.error_code == 0 and answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
    assert raw.call(METADATA, 12, METADATA_ALL).brokers
    time.sleep(REAUTH_MS / 1000 + 0.3)
    raw.send(METADATA, 12, METADATA_ALL)
    assert raw.recv() is None, "a request after the session's end closes the connection"
    raw.close()
    # a client that re-authenticates (KIP-368) keeps its connection working well past the session
    errors: list[KafkaError] = []
    p = Producer({**client_conf(address, "PLAIN", "alice", ALICE_SECRET), "error_cb": errors.append})
    delivered: list[Any] = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        p.produce("reauth-topic", b"x", on_delivery=lambda err, msg: delivered.append(err))
        p.poll(0.2)
    assert p.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors


def test_describe_configs_never_shows_a_jaas_config(sasl_broker: tuple[BrokerProcess, str]) -> None:
    _, address = sasl_broker
    admin = AdminClient(client_conf(address, "PLAIN", "admin", ADMIN_SECRET))
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]).values()
    entries = future.result(30)
    for name, entry in entries.items():
        assert not any(secret in str(entry.value) for secret in SECRETS), name
        if "sasl.jaas.config" in name:
            assert entry.is_sensitive and entry.value is None, name


def test_restart_keeps_scram_users_and_no_secret_reaches_the_log(sasl_broker: tuple[BrokerProcess, str]) -> None:
    b, address = sasl_broker
    done = users_tool("--bootstrap-server", b.bootstrap, "--alter", "--entity-name", "carol",
                      "--add-config", f"SCRAM-SHA-512=[password={SCRAM_SECRET}]")
    assert done.returncode == 0, done.stderr
    b.restart()
    got = produce_and_consume(client_conf(address, "SCRAM-SHA-512", "carol", SCRAM_SECRET), "after-restart")
    assert got == [f"after-restart-{i}".encode() for i in range(5)]
    log = b.log_text()
    assert "SCRAM credentials of user carol are now SCRAM-SHA-512" in log
    for secret in SECRETS:
        assert secret not in log
    stored = (b.data_dir / "tieredlog-scram-credentials.json").read_text()
    assert "carol" in stored and SCRAM_SECRET not in stored
