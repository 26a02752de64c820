"""SASL without a broker, above the mechanisms: the per-connection state machine (the gate, v0 tokens,
KIP-368 re-authentication with a hand-moved clock), the client exchange against it, the listener
settings, Kafka's AlterUserScramCredentials / DescribeUserScramCredentials validation and the tool's
kafka-configs syntax."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FakeClock
from kio.schema.errors import ErrorCode

from tieredlog.clients.sasl import exchange
from tieredlog.config import BrokerConfig, BrokerConfigError
from tieredlog.protocol.api import (
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from tieredlog.security import scram
from tieredlog.security.sasl.authenticator import Admit, SaslClose, SaslServerAuthenticator, SaslState
from tieredlog.security.sasl.client import SaslClientCredentials, SaslClientError
from tieredlog.security.sasl.config import ListenerSasl, inter_broker_credentials, sasl_listeners
from tieredlog.security.sasl.mechanisms import plain_users_check
from tieredlog.security.scram_store import FileScramCredentialStore
from tieredlog.server.context import RequestContext
from tieredlog.server.sasl_apis import (
    alter_credentials,
    describe_credentials,
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from tieredlog.tools.cluster_admin import AdminCommandFailed
from tieredlog.tools.users import alteration, parse_add_config, parse_delete_config

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


# ---- the authenticator --------------------------------------------------------------------------------

CRED = scram.credential_from_password(scram.SCRAM_SHA_256, "bob-secret", 4096)


def _authenticator(clock: FakeClock | None = None, reauth_ms: int = 0) -> SaslServerAuthenticator:
    settings = ListenerSasl("SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-256"), plain_users_check({"alice": "alice-secret"}),
                            {"PLAIN": reauth_ms, "SCRAM-SHA-256": reauth_ms})
    return SaslServerAuthenticator(settings, lambda user, mech: CRED if user == "bob" else None,
                                   api_versions_max=4, clock=clock or FakeClock())


def test_before_authentication_only_apiversions_then_handshake_then_authenticate() -> None:
    a = _authenticator()
    assert a.admit(API_VERSIONS, 3) is Admit.SERVE
    with pytest.raises(SaslClose, match="Unexpected ApiVersions request received during SASL authentication"):
        a.admit(API_VERSIONS, 3)
    a = _authenticator()
    assert a.admit(API_VERSIONS, 9) is Admit.SERVE  # unknown version: the client may ask again
    assert a.admit(API_VERSIONS, 3) is Admit.SERVE
    with pytest.raises(SaslClose, match="^Unexpected Kafka request of type METADATA during SASL handshake.$"):
        a.admit(METADATA, 12)
    a = _authenticator()
    with pytest.raises(SaslClose, match="Unexpected Kafka request of type PRODUCE during SASL handshake"):
        a.admit(PRODUCE, 9)
    a = _authenticator()
    assert a.admit(SASL_HANDSHAKE, 1) is Admit.AUTHENTICATOR
    assert a.handshake(1, "PLAIN").body == {"error_code": ErrorCode.none, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
    with pytest.raises(SaslClose, match="Unexpected Kafka request of type METADATA during SASL authentication."):
        a.admit(METADATA, 12)


def test_authentication_sets_the_principal_and_failures_answer_then_close() -> None:
    a = _authenticator()
    a.admit(SASL_HANDSHAKE, 1)
    a.handshake(1, "PLAIN")
    assert a.admit(SASL_AUTHENTICATE, 2) is Admit.AUTHENTICATOR
    reply = a.authenticate(2, b"\0alice\0alice-secret")
    assert reply.failure is None and reply.body["error_code"] == ErrorCode.none and reply.body["session_lifetime"] == 0
    assert str(a.principal) == "User:alice" and a.state is SaslState.COMPLETE
    assert a.admit(METADATA, 12) is Admit.SERVE
    assert a.admit(SASL_HANDSHAKE, 1) is Admit.SERVE  # no re-authentication configured: ILLEGAL_SASL_STATE

    a = _authenticator()
    a.admit(SASL_HANDSHAKE, 1)
    refused = a.handshake(1, "GSSAPI")
    assert refused.body["error_code"] == ErrorCode.unsupported_sasl_mechanism and refused.failure
    a = _authenticator()
    a.admit(SASL_HANDSHAKE, 1)
    a.handshake(1, "SCRAM-SHA-256")
    failed = a.authenticate(2, scram.ScramClient(scram.SCRAM_SHA_256, "nobody", "x").first())
    assert failed.body["error_code"] == ErrorCode.sasl_authentication_failed
    # the client learns nothing of why; the log line does
    assert failed.body["error_message"] == ("Authentication failed during authentication due to invalid credentials "
                                            "with SASL mechanism SCRAM-SHA-256")
    assert failed.failure is not None and "Invalid user credentials" in failed.failure
    assert a.principal is None


def test_handshake_v0_takes_bare_tokens() -> None:
    a = _authenticator()
    a.admit(SASL_HANDSHAKE, 0)
    a.handshake(0, "SCRAM-SHA-256")
    assert a.expects_raw_token
    client = scram.ScramClient(scram.SCRAM_SHA_256, "bob", "bob-secret")
    client.verify(a.raw_token(client.final(a.raw_token(client.first()))))
    assert str(a.principal) == "User:bob" and not a.expects_raw_token
    b = _authenticator()
    b.admit(SASL_HANDSHAKE, 0)
    b.handshake(0, "PLAIN")
    with pytest.raises(SaslClose):
        b.raw_token(b"\0alice\0wrong")


def _plain_login(a: SaslServerAuthenticator, user: str = "alice", password: str = "alice-secret") -> int:
    assert a.admit(SASL_HANDSHAKE, 1) is Admit.AUTHENTICATOR
    assert a.handshake(1, "PLAIN").failure is None
    reply = a.authenticate(2, f"\0{user}\0{password}".encode())
    assert reply.failure is None, reply.failure
    return int(reply.body["session_lifetime"])


def test_session_lifetime_reauthentication_and_expiry() -> None:
    clock = FakeClock(100.0)
    a = _authenticator(clock, reauth_ms=5000)
    assert _plain_login(a) == 5000
    clock.t += 4.0
    assert a.admit(METADATA, 12) is Admit.SERVE
    assert _plain_login(a) == 5000  # re-authenticated within its session: a new one begins
    clock.t += 0.5
    assert a.admit(SASL_HANDSHAKE, 1) is Admit.SERVE  # a second within the same second is not a re-authentication
    clock.t += 4.4
    assert a.admit(METADATA, 12) is Admit.SERVE
    clock.t += 0.2
    with pytest.raises(SaslClose, match="SASL session expired"):
        a.admit(METADATA, 12)

    other = _authenticator(FakeClock(0.0), reauth_ms=5000)
    _plain_login(other)
    other._clock.t = 2.0  # type: ignore[attr-defined]
    other.admit(SASL_HANDSHAKE, 1)
    assert other.handshake(1, "SCRAM-SHA-256").failure is None  # answered, then the next request fails
    with pytest.raises(SaslClose, match="not supported for re-authentication of mechanism 'PLAIN'"):
        other.admit(SASL_AUTHENTICATE, 2)

    two_users = ListenerSasl("SASL_PLAINTEXT", ("PLAIN",), plain_users_check({"alice": "a", "carol": "c"}),
                             {"PLAIN": 5000})
    clock = FakeClock(0.0)
    third = SaslServerAuthenticator(two_users, None, clock=clock)
    _plain_login(third, "alice", "a")
    clock.t = 2.0
    third.admit(SASL_HANDSHAKE, 1)
    third.handshake(1, "PLAIN")
    changed = third.authenticate(2, b"\0carol\0c")
    assert changed.body["error_code"] == ErrorCode.sasl_authentication_failed
    assert changed.body["error_message"] == "Cannot change principals during re-authentication from User.alice: User.carol"


def test_client_exchange_against_the_authenticator() -> None:
    for creds in (SaslClientCredentials("PLAIN", "alice", "alice-secret"),
                  SaslClientCredentials("SCRAM-SHA-256", "bob", "bob-secret")):
        a = _authenticator()
        steps = exchange(creds, {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)})
        key, body, version = next(steps)
        try:
            while True:
                assert a.admit(key, version) is Admit.AUTHENTICATOR
                reply = a.handshake(version, body["mechanism"]) if key == SASL_HANDSHAKE else \
                    a.authenticate(version, body["auth_bytes"])
                key, body, version = steps.send(SimpleNamespace(**reply.body))
        except StopIteration:
            pass
        assert str(a.principal) == f"User:{creds.username}"
    a = _authenticator()
    steps = exchange(SaslClientCredentials("PLAIN", "alice", "bad"), {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)})
    _, body, _ = next(steps)
    a.admit(SASL_HANDSHAKE, 1)
    _, body, _ = steps.send(SimpleNamespace(**a.handshake(1, body["mechanism"]).body))
    with pytest.raises(SaslClientError, match="Invalid username or password"):
        steps.send(SimpleNamespace(**a.authenticate(2, body["auth_bytes"]).body))


# ---- listener settings -----------------------------------------------------------------------------

def _config(**props: str) -> BrokerConfig:
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"}
    return BrokerConfig.from_props({**base, **{k.replace("_", "."): v for k, v in props.items()}}, warn=False)


def test_listener_settings_precedence_and_start_up_errors() -> None:
    cfg = BrokerConfig.from_props({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": "60000",
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "3000",
    }, warn=False)
    (settings,) = sasl_listeners(cfg).values()
    assert settings.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert settings.reauth_ms == {"PLAIN": 3000, "SCRAM-SHA-256": 60000}
    assert settings.plain_check is not None and settings.plain_check("alice", "alice-secret")
    assert not settings.plain_check("alice", "admin-secret")

    with pytest.raises(BrokerConfigError, match="SASL mechanism GSSAPI of listener SASL_PLAINTEXT"):
        sasl_listeners(_config())  # Kafka's default, GSSAPI, is not served
    with pytest.raises(BrokerConfigError, match="PLAIN of listener SASL_PLAINTEXT has no JAAS configuration"):
        sasl_listeners(_config(sasl_enabled_mechanisms="PLAIN"))
    bad = BrokerConfig.from_props({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                                   "sasl.enabled.mechanisms": "PLAIN",
                                   "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                       'required user_alice="alice-secret"'}, warn=False)
    with pytest.raises(BrokerConfigError) as err:
        sasl_listeners(bad)
    assert "sasl.jaas.config" in str(err.value) and "alice-secret" not in str(err.value)


def test_inter_broker_credentials_come_from_the_listeners_jaas() -> None:
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "security.inter.broker.protocol": "SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "zookeeper.connect": "127.0.0.1:2181",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    with pytest.raises(BrokerConfigError, match="sasl.mechanism.inter.broker.protocol must be included"):
        inter_broker_credentials(BrokerConfig.from_props(props, warn=False))
    creds = inter_broker_credentials(BrokerConfig.from_props(
        {**props, "sasl.mechanism.inter.broker.protocol": "PLAIN"}, warn=False))
    assert creds == SaslClientCredentials("PLAIN", "admin", "admin-secret") and "admin-secret" not in repr(creds)
    with pytest.raises(BrokerConfigError, match="must give the username and password"):
        inter_broker_credentials(BrokerConfig.from_props(
            {**props, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, warn=False))


# ---- AlterUserScramCredentials / DescribeUserScramCredentials ---------------------------------------

def _ups(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> SimpleNamespace:
    m = scram.MECHANISMS_BY_TYPE.get(mechanism, scram.SCRAM_SHA_256)
    return SimpleNamespace(name=name, mechanism=mechanism, iterations=iterations, salt=b"salt",
                           salted_password=scram.salted_password(m, password, b"salt", max(iterations, 1)))


def _del(name: str, mechanism: int = 1) -> SimpleNamespace:
    return SimpleNamespace(name=name, mechanism=mechanism)


def _codes(results: list[dict]) -> dict[str, tuple[ErrorCode, str | None]]:
    return {r["user"]: (r["error_code"], r["error_message"]) for r in results}


def test_alter_validation_is_kafkas(tmp_path: Path) -> None:
    store = FileScramCredentialStore(tmp_path)
    store.load()
    results = _codes(alter_credentials(store, [
        _ups("few", iterations=4095), _ups("many", iterations=16385), _ups("", 1), _ups("mech", mechanism=7),
        _ups("twice"), _ups("twice"), _ups("ok"), _ups("ok", mechanism=2),
    ], [_del("gone")]))
    assert results == {
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "mech": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "twice": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        "gone": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "ok": (ErrorCode.none, None),
    }
    assert store.credential("ok", "SCRAM-SHA-512") is not None and store.credential("few", "SCRAM-SHA-256") is None

    described = describe_credentials(store, None)
    assert described["error_code"] == ErrorCode.none
    assert [(r["user"], r["credential_infos"]) for r in described["results"]] == [
        ("ok", [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 4096}])]
    some = _codes(describe_credentials(store, ["ok", "nobody", "x", "x", ""])["results"])
    assert some["nobody"] == (ErrorCode.resource_not_found,
                              "Attempt to describe a user credential that does not exist: nobody")
    assert some["x"][0] == ErrorCode.duplicate_resource and some[""][0] == ErrorCode.resource_not_found
    assert some["ok"][0] == ErrorCode.none

    assert _codes(alter_credentials(store, [], [_del("ok", 2)]))["ok"] == (ErrorCode.none, None)
    assert store.credential("ok", "SCRAM-SHA-512") is None and store.credential("ok", "SCRAM-SHA-256") is not None


# ---- the tool's syntax --------------------------------------------------------------------------------

def test_add_config_syntax_is_kafka_configs() -> None:
    parsed = parse_add_config("SCRAM-SHA-256=[iterations=8192,password=a,b=c],SCRAM-SHA-512=[password=x]")
    assert parsed == {"SCRAM-SHA-256": (8192, "a,b=c"), "SCRAM-SHA-512": (4096, "x")}
    with pytest.raises(AdminCommandFailed, match="Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256"):
        parse_add_config("SCRAM-SHA-256=[iterations=100,password=x]")
    with pytest.raises(AdminCommandFailed) as err:
        parse_add_config("SCRAM-SHA-256=[pass=topsecret]")
    assert "topsecret" not in str(err.value)
    with pytest.raises(AdminCommandFailed, match="Unexpected config names: producer_byte_rate"):
        parse_add_config("producer_byte_rate=1024")
    assert parse_delete_config(["SCRAM-SHA-256,SCRAM-SHA-512"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    body = alteration("alice", {"SCRAM-SHA-512": (4096, "pw")}, ["SCRAM-SHA-256"])
    (up,) = body["upsertions"]
    assert up["salted_password"] == scram.salted_password(scram.SCRAM_SHA_512, "pw", up["salt"], 4096)
    assert body["deletions"] == [{"name": "alice", "mechanism": 1}]


def test_credential_apis_need_cluster_alter_and_describe(tmp_path: Path) -> None:
    store = FileScramCredentialStore(tmp_path)
    store.load()
    deny_all = SimpleNamespace(authorize=lambda *request: False)
    broker = SimpleNamespace(authorizer=deny_all, cluster=None, controller=None, scram_credentials=store)
    alter = RequestContext(ALTER_USER_SCRAM_CREDENTIALS, 0, 1, "c", "127.0.0.1", 1, broker)  # type: ignore[arg-type]
    out = asyncio.run(handle_alter_user_scram_credentials(alter, SimpleNamespace(upsertions=[_ups("bob")],
                                                                                  deletions=[_del("amy")])))
    assert [(r["user"], r["error_code"]) for r in out["results"]] == [
        ("amy", ErrorCode.cluster_authorization_failed), ("bob", ErrorCode.cluster_authorization_failed)]
    assert store.credential("bob", "SCRAM-SHA-256") is None
    describe = RequestContext(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 2, "c", "127.0.0.1", 1, broker)  # type: ignore[arg-type]
    out = asyncio.run(handle_describe_user_scram_credentials(describe, SimpleNamespace(users=[SimpleNamespace(name="bob")])))
    assert out["error_code"] == ErrorCode.cluster_authorization_failed and out["error_message"] == "Cluster authorization failed."
    assert [(r["user"], r["error_code"]) for r in out["results"]] == [("", ErrorCode.cluster_authorization_failed)]
