"""A request other than SaslAuthenticate once a SASL mechanism runs: answered as Kafka's
SaslServerAuthenticator answers it, with the request's own error response carrying ILLEGAL_SASL_STATE
(34), then the connection closes; a response without an error code to carry it: closed unanswered.
Before the handshake such a request closes the connection without an answer (test_sasl_broker)."""

from __future__ import annotations

import pytest
from broker_harness import BrokerProcess
from helpers import free_port, wait_for
from sasl_harness import METADATA_ALL, Raw, sasl_overrides

from tieredlog.protocol.api import API_VERSIONS, HEARTBEAT, LIST_GROUPS, METADATA, SASL_HANDSHAKE

pytestmark = pytest.mark.integration


def _mid_authentication(address: str) -> Raw:
    raw = Raw(address)
    raw.call(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    return raw


def test_unexpected_request_during_sasl_authentication(tmp_path) -> None:
    sasl_port = free_port()
    b = BrokerProcess(tmp_path / "data")
    b.overrides = sasl_overrides(sasl_port, b.port)
    b.start()
    address = f"127.0.0.1:{sasl_port}"
    try:
        raw = _mid_authentication(address)
        # a request the authorizer's error response exists for (Heartbeat: a top-level error code)
        answer = raw.call(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m"})
        assert answer.error_code == 34
        assert raw.recv() is None
        raw.close()
        raw = _mid_authentication(address)
        answer = raw.call(LIST_GROUPS, 4, {"states_filter": []})
        assert (answer.error_code, answer.groups) == (34, ())
        assert raw.recv() is None
        raw.close()
        # Metadata's response has no top-level error code: closed without an answer
        raw = _mid_authentication(address)
        raw.send(METADATA, 12, METADATA_ALL)
        assert raw.recv() is None
        raw.close()
        wait_for(lambda: b.log_text().count("Unexpected Kafka request of type") == 3, "one line per connection")
        assert "Unexpected Kafka request of type LIST_GROUPS during SASL authentication." in b.log_text()
        assert b.alive()
    finally:
        b.stop()
