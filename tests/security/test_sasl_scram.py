"""SASL's building blocks without a broker: the JAAS parser with Kafka's messages, SCRAM against RFC
7677's example and Kafka's credential text, the PLAIN and SCRAM server mechanisms with Kafka's
messages, the credential file store."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from tieredlog.security import scram
from tieredlog.security.jaas import JaasConfigError, parse_jaas_config, parse_single_module
from tieredlog.security.sasl.mechanisms import (
    PlainServer,
    SaslAuthenticationError,
    SaslMechanismError,
    ScramServer,
    plain_users_check,
)
from tieredlog.security.scram_store import STORE_FILE, FileScramCredentialStore, desanitize, sanitize

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


# ---- JAAS -------------------------------------------------------------------------------------------

def test_jaas_entries_with_quoted_escaped_and_bare_values_and_comments() -> None:
    (entry,) = parse_jaas_config(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "REQUIRED"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": "alice-secret"}
    text = r'''// the broker's login
        a.B$c Optional k1=bare.word-1 k2="say \"hi\"; \\ ok" /* a comment */ k3='single = quoted';
        other.Module sufficient;'''
    first, second = parse_jaas_config(text)
    assert first.control_flag == "OPTIONAL"
    assert first.options == {"k1": "bare.word-1", "k2": 'say "hi"; \\ ok', "k3": "single = quoted"}
    assert (second.login_module, second.options) == ("other.Module", {})


@pytest.mark.parametrize("text, message", [
    ("", "Login module not specified in JAAS config"),
    ("a.Module", "Login module control flag not specified in JAAS config"),
    ("a.Module mandatory;", "Invalid login module control flag 'mandatory' in JAAS config"),
    ('a.Module required password=12345;', "Value not specified for key 'password' in JAAS config"),
    ('a.Module required password;', "Value not specified for key 'password' in JAAS config"),
    ('a.Module required password="secret"', "JAAS config entry not terminated by semi-colon"),
    ('a.Module required password="secret;', "Unterminated quoted value in JAAS config"),
])
def test_jaas_errors_are_kafkas_and_never_show_a_value(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError) as err:
        parse_jaas_config(text)
    assert str(err.value) == message
    assert "secret" not in str(err.value) and "12345" not in str(err.value)


def test_a_brokers_jaas_value_holds_one_login_module() -> None:
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_single_module("a.A required; b.B required;")
    assert "admin-secret" not in repr(parse_single_module(PLAIN_JAAS))


# ---- SCRAM ------------------------------------------------------------------------------------------

def test_scram_client_matches_rfc7677_example() -> None:
    c = scram.ScramClient(scram.SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(scram.ScramFormatError):
        c.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_credential_text_is_kafkas_and_round_trips_without_showing_keys() -> None:
    cred = scram.credential_from_password(scram.SCRAM_SHA_512, "pw", 8192, salt=b"salt")
    text = cred.to_text()
    assert text.startswith("salt=c2FsdA==,stored_key=") and ",server_key=" in text and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_text(text) == cred
    assert repr(cred) == "ScramCredential(iterations=8192)"
    with pytest.raises(scram.ScramFormatError, match="^Credentials not valid$"):
        scram.ScramCredential.from_text("salt=c2FsdA==,iterations=8192")


def test_saslname_and_zookeeper_sanitizing_are_kafkas() -> None:
    assert scram.sasl_name("a=b,c") == "a=3Db=2Cc"
    assert scram.username_of("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ValueError):
        scram.username_of("a=b")
    assert sanitize("alice") == "alice"
    assert sanitize("a b*c/é~") == "a%20b%2Ac%2F%C3%A9%7E"
    assert desanitize(sanitize("a b*c/é~")) == "a b*c/é~"


def _scram_exchange(server: ScramServer, client: scram.ScramClient) -> None:
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))


@pytest.mark.parametrize("mechanism", list(scram.MECHANISMS.values()), ids=lambda m: m.name)
def test_scram_server_accepts_the_password_and_refuses_others(mechanism: scram.ScramMechanism) -> None:
    creds = {"alice": scram.credential_from_password(mechanism, "alice-secret", 4096)}
    ok = ScramServer(mechanism, lambda user, mech: creds.get(user))
    _scram_exchange(ok, scram.ScramClient(mechanism, "alice", "alice-secret"))
    assert ok.complete and ok.authorization_id == "alice"
    bad = ScramServer(mechanism, lambda user, mech: creds.get(user))
    client = scram.ScramClient(mechanism, "alice", "wrong")
    with pytest.raises(SaslMechanismError, match="Invalid client credentials"):
        bad.evaluate(client.final(bad.evaluate(client.first())))
    unknown = ScramServer(mechanism, lambda user, mech: creds.get(user))
    with pytest.raises(SaslMechanismError, match="Authentication failed: Invalid user credentials"):
        unknown.evaluate(scram.ScramClient(mechanism, "bob", "x").first())


def test_scram_server_refuses_tokens_few_iterations_other_authzid_and_bad_messages() -> None:
    m = scram.SCRAM_SHA_256
    weak = scram.credential_from_password(m, "pw", 4096)
    weak = scram.ScramCredential(weak.salt, weak.stored_key, weak.server_key, 1000)
    with pytest.raises(SaslMechanismError, match="Iterations 1000 is less than the minimum 4096 for SCRAM-SHA-256"):
        ScramServer(m, lambda u, mech: weak).evaluate(b"n,,n=alice,r=abc")
    good = scram.credential_from_password(m, "pw", 4096)
    with pytest.raises(SaslMechanismError, match="Token Authentication failed"):
        ScramServer(m, lambda u, mech: good).evaluate(b"n,,n=alice,r=abc,tokenauth=true")
    # other extensions are ignored, as Kafka does
    assert ScramServer(m, lambda u, mech: good).evaluate(b"n,,n=alice,r=abc,foo=bar").startswith(b"r=abc")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different from username"):
        ScramServer(m, lambda u, mech: good).evaluate(b"n,a=bob,n=alice,r=abc")
    with pytest.raises(SaslMechanismError, match="Invalid SCRAM client first message format"):
        ScramServer(m, lambda u, mech: good).evaluate(b"p=tls-unique,,n=alice,r=abc")


def test_plain_server_messages_are_kafkas() -> None:
    check = plain_users_check({"alice": "alice-secret"})
    ok = PlainServer(check)
    assert ok.evaluate(b"\0alice\0alice-secret") == b"" and ok.authorization_id == "alice"
    assert PlainServer(check).evaluate(b"alice\0alice\0alice-secret") == b""
    for token, exc, message in [
        (b"\0alice\0wrong", SaslAuthenticationError, "Authentication failed: Invalid username or password"),
        (b"\0nobody\0x", SaslAuthenticationError, "Authentication failed: Invalid username or password"),
        (b"\0\0x", SaslMechanismError, "Authentication failed: username not specified"),
        (b"\0alice\0", SaslMechanismError, "Authentication failed: password not specified"),
        (b"bob\0alice\0alice-secret", SaslAuthenticationError,
         "Authentication failed: Client requested an authorization id that is different from username"),
    ]:
        with pytest.raises(exc) as err:
            PlainServer(check).evaluate(token)
        assert str(err.value) == message


def test_file_store_survives_a_reload_and_holds_no_password(tmp_path: Path) -> None:
    store = FileScramCredentialStore(tmp_path)
    store.load()
    credential = scram.credential_from_password(scram.SCRAM_SHA_256, "alice-secret", 4096)
    store.change_user_configs("alice", {"SCRAM-SHA-256": credential.to_text(), "producer_byte_rate": "1024"})
    path = tmp_path / STORE_FILE
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    data = json.loads(path.read_text())
    # a user's other configs are kept beside the credentials (Kafka's user config)
    assert set(data["users"]["alice"]) == {"SCRAM-SHA-256", "producer_byte_rate"}
    assert "alice-secret" not in path.read_text()
    again = FileScramCredentialStore(tmp_path)
    again.load()
    assert again.credential("alice", "SCRAM-SHA-256") == store.credential("alice", "SCRAM-SHA-256")
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not a SCRAM credential file"):
        FileScramCredentialStore(tmp_path).load()
